package token

import (
	"crypto/sha256"
	"encoding/base64"
	"hash/crc32"
	"regexp"
	"strings"
	"testing"
)

// TestTokenFormat: a new token is kg_, 43 base62 characters, '_' and their
// base62 CRC32; every typo (one character changed, two swapped, one left
// out or added) fails the checksum, and tokens of the earlier format
// (kg_ and 43 base64url characters) are still well formed.
func TestTokenFormat(t *testing.T) {
	re := regexp.MustCompile(`^` + Pattern + `$`)
	for range 200 {
		tok := New()
		if !re.MatchString(tok) || len(tok) != tokenLen || !WellFormed(tok) {
			t.Fatalf("New = %q", tok)
		}
		if got := tokenChecksum(tok[3:46]); got != tok[47:] || crc32.ChecksumIEEE([]byte(tok[3:46])) != decode62(tok[47:]) {
			t.Fatalf("checksum of %q = %s", tok, got)
		}
		for i := len(Prefix); i < len(tok); i++ {
			if tok[i] == '_' {
				continue
			}
			for _, c := range []byte{'0', 'z', 'Q', '-', '_', '+'} {
				if c == tok[i] {
					continue
				}
				typo := tok[:i] + string(c) + tok[i+1:]
				if WellFormed(typo) {
					t.Fatalf("%q (from %q) is well formed", typo, tok)
				}
			}
			if i+1 < len(tok) && tok[i] != tok[i+1] && tok[i+1] != '_' {
				swapped := tok[:i] + string(tok[i+1]) + string(tok[i]) + tok[i+2:]
				if WellFormed(swapped) {
					t.Fatalf("%q (swapped from %q) is well formed", swapped, tok)
				}
			}
		}
		for _, bad := range []string{tok[:len(tok)-1], tok + "0", "kg-" + tok[3:], strings.ToUpper(tok[:3]) + tok[3:]} {
			if WellFormed(bad) {
				t.Fatalf("%q is well formed", bad)
			}
		}
	}
	if WellFormed(Prefix + strings.Repeat("!", 43)) {
		t.Error("a token of the earlier length with other characters is well formed")
	}
	legacy := Prefix + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	if !WellFormed(legacy) || !WellFormed(Prefix+Random()) {
		t.Errorf("a token of the earlier format is refused: %q", legacy)
	}
	if n := testing.AllocsPerRun(100, func() { WellFormed("kg_SWdFeyUrLC4w16QTOVtCdZzoBdYxqs0wIKEjYNxmncf_0sWiqL") }); n != 0 {
		t.Errorf("WellFormed allocates %v times", n)
	}
}

// TestCRC32: the key check's CRC32 is the standard library's, for every
// length around its 8-byte steps.
func TestCRC32(t *testing.T) {
	s := "kg_SWdFeyUrLC4w16QTOVtCdZzoBdYxqs0wIKEjYNxmncf_0sWiqL\x00\xff"
	for n := 0; n <= len(s); n++ {
		if got, want := crc32IEEE(s[:n]), crc32.ChecksumIEEE([]byte(s[:n])); got != want {
			t.Errorf("crc32IEEE(%q) = %08x, want %08x", s[:n], got, want)
		}
	}
}

// decode62 reads base62 digits (the test's own decoder, to check the
// checksum against the standard library's CRC32).
func decode62(s string) uint32 {
	var n uint64
	for i := 0; i < len(s); i++ {
		n = n*62 + uint64(strings.IndexByte(base62Digits, s[i]))
	}
	return uint32(n)
}

func TestRedact(t *testing.T) {
	tok := New()
	for in, want := range map[string]string{
		"/webapi/contracts/abc":                        "/webapi/contracts/abc",
		"/webapi/contracts/" + tok:                     "/webapi/contracts/kg_[redacted]",
		"/x/" + tok + "/y/" + tok[:20] + "/kg_/kg_abc": "/x/kg_[redacted]/y/kg_[redacted]/kg_/kg_abc",
		// The prefix in another case, kept as written.
		"/webapi/contracts/Kg_" + tok[3:]:     "/webapi/contracts/Kg_[redacted]",
		"/webapi/contracts/KG_" + tok[3:]:     "/webapi/contracts/KG_[redacted]",
		"/webapi/contracts/x.kG_" + tok[3:20]: "/webapi/contracts/x.kG_[redacted]",
		// Without the prefix: the body, alone or in a run, checksum
		// mistyped or not; the earlier format's 43 characters.
		"/webapi/contracts/" + tok[3:]:                         "/webapi/contracts/[redacted]",
		"/webapi/contracts/Bearer " + tok[3:] + ".json":        "/webapi/contracts/Bearer [redacted].json",
		"/webapi/contracts/x" + tok[3:49] + "zzzzzz":           "/webapi/contracts/x[redacted]",
		"/webapi/contracts/" + strings.Repeat("A-_", 14) + "b": "/webapi/contracts/[redacted]",
		// What is no token stays.
		"/webapi/contracts/0b6a3f7e-2c1d-4c8e-9f3a-5d6e7f8a9b0c": "/webapi/contracts/0b6a3f7e-2c1d-4c8e-9f3a-5d6e7f8a9b0c",
		"/webapi/share/PAGE-42/kg/KG_short":                      "/webapi/share/PAGE-42/kg/KG_short",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHashOf(t *testing.T) {
	for _, tok := range []string{"", "kg_", New(), New() + "x", strings.Repeat("a", 200)} {
		if got, want := HashOf(tok), Hash(sha256.Sum256([]byte(tok))); got != want {
			t.Errorf("HashOf(%q) = %x, want %x", tok, got, want)
		}
	}
	if HashOf("kg_a") == HashOf("kg_b") {
		t.Error("different tokens hash alike")
	}
}
