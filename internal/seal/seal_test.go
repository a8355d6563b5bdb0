package seal

import (
	"bytes"
	"crypto/rand"
	"testing"
)

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealer(t *testing.T) {
	if _, err := New(make([]byte, 16)); err == nil {
		t.Error("New accepted a 16-byte key")
	}
	s, err := New(randomKey(t))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New(randomKey(t))
	secret := []byte("kg_secret")
	sealed := s.Seal(secret, []byte("id-1"))
	if bytes.Contains(sealed, secret) {
		t.Fatal("sealed value holds the plaintext")
	}
	if again := s.Seal(secret, []byte("id-1")); bytes.Equal(again, sealed) {
		t.Error("two seals of one value are equal: nonce reused")
	}
	tampered := append([]byte(nil), sealed...)
	tampered[len(tampered)-1] ^= 1
	tests := []struct {
		name   string
		s      *Sealer
		sealed []byte
		aad    string
		ok     bool
	}{
		{"same key and aad", s, sealed, "id-1", true},
		{"wrong aad", s, sealed, "id-2", false},
		{"empty aad", s, sealed, "", false},
		{"wrong key", other, sealed, "id-1", false},
		{"tampered", s, tampered, "id-1", false},
		{"truncated", s, sealed[:5], "id-1", false},
		{"empty", s, nil, "id-1", false},
	}
	for _, tt := range tests {
		got, err := tt.s.Open(tt.sealed, []byte(tt.aad))
		if tt.ok && (err != nil || !bytes.Equal(got, secret)) {
			t.Errorf("%s: Open = %q, %v", tt.name, got, err)
		}
		if !tt.ok && err == nil {
			t.Errorf("%s: Open succeeded with %q", tt.name, got)
		}
	}
}
