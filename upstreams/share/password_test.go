package share

import (
	"strings"
	"testing"
)

func TestPasswordHashFormat(t *testing.T) {
	h := newHasher(Argon2Params{})
	enc, err := h.hash("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(enc, "$argon2id$v=19$m=19456,t=2,p=1$") || len(strings.Split(enc, "$")) != 6 {
		t.Fatalf("encoded hash %q", enc)
	}
	again, _ := h.hash("correct horse")
	if again == enc {
		t.Fatal("two hashes of one password are equal: no salt")
	}
	// A hash made with other parameters still verifies: they are read
	// from the string.
	cheap := newHasher(cheapArgon)
	tests := []struct {
		name    string
		encoded string
		pw      string
		ok      bool
		err     bool
	}{
		{"wrong", enc, "correct horse ", false, false},
		{"right, other parameters", enc, "correct horse", true, false},
		{"not argon2id", "$2a$10$abcdefghijklmnopqrstuv", "x", false, true},
		{"bad parameters", "$argon2id$v=19$m=0,t=1,p=1$AAAA$AAAA", "x", false, true},
		{"bad version", "$argon2id$v=16$m=64,t=1,p=1$AAAA$AAAA", "x", false, true},
		{"bad salt", "$argon2id$v=19$m=64,t=1,p=1$!!$AAAA", "x", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := cheap.verify(tc.encoded, tc.pw)
			if ok != tc.ok || (err != nil) != tc.err {
				t.Fatalf("verify = %v, %v", ok, err)
			}
		})
	}
}
