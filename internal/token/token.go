// Package token makes and checks the secrets keygate hands out: API key
// tokens (their form, checksum and lookup hash, and their redaction from
// logs) and the random strings of secret links.
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash/crc32"
	"math/big"
	"strings"
)

// Prefix starts every API key token, so secret scanners and people
// can tell a keygate token at a glance.
const Prefix = "kg_"

// A token is Prefix, 32 random bytes as 43 characters of base62, '_'
// and the CRC32 of those 43 characters as 6 characters of base62: one word
// under a double click, a precise pattern for secret scanners
// (Pattern), and a typo is refused from the checksum alone, before
// any hash or lookup. Tokens issued before this format (Prefix and 43
// characters of base64url) keep working.
const (
	tokenRandomLen = 43
	tokenCheckLen  = 6
	tokenLen       = len(Prefix) + tokenRandomLen + 1 + tokenCheckLen
	// legacyTokenLen is "kg_" plus 43 characters of unpadded base64url.
	legacyTokenLen = len(Prefix) + 43
)

// Pattern matches the tokens keygate issues, for secret scanners.
const Pattern = `kg_[0-9A-Za-z]{43}_[0-9A-Za-z]{6}`

// Hash is the SHA-256 of a token, the only form the server looks
// tokens up by.
type Hash [sha256.Size]byte

const base62Digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// New returns a fresh API key token: kg_, 32 random bytes in base62,
// '_' and the base62 CRC32 of the random part.
func New() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("token: crypto/rand failed: " + err.Error())
	}
	random := base62(new(big.Int).SetBytes(b[:]), tokenRandomLen)
	return Prefix + random + "_" + tokenChecksum(random)
}

// base62 writes n in exactly width base62 digits, leading zeros
// included (32 bytes need 43: 62^43 > 2^256).
func base62(n *big.Int, width int) string {
	out := make([]byte, width)
	base, rem := big.NewInt(62), new(big.Int)
	for i := width - 1; i >= 0; i-- {
		n.QuoRem(n, base, rem)
		out[i] = base62Digits[rem.Int64()]
	}
	return string(out)
}

// tokenChecksum is the CRC32 (IEEE) of a token's random part in 6 base62
// digits (62^6 > 2^32), as GitHub's tokens carry theirs.
func tokenChecksum(random string) string {
	var buf [tokenCheckLen]byte
	checksumDigits(&buf, random)
	return string(buf[:])
}

// slicing8 are the tables of CRC32 (IEEE) slicing-by-8, made once from
// the standard library's table: crc32.ChecksumIEEE over a []byte would make
// the key check allocate (its buffer escapes), and byte by byte it takes
// four times as long.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		for k := 1; k < 8; k++ {
			prev := t[k-1][i]
			t[k][i] = t[0][byte(prev)] ^ prev>>8
		}
	}
	return t
}()

// crc32IEEE is crc32.ChecksumIEEE of s, allocating nothing.
func crc32IEEE(s string) uint32 {
	t := &slicing8
	crc := ^uint32(0)
	for len(s) >= 8 {
		crc ^= uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][byte(crc>>24)] ^
			t[3][s[4]] ^ t[2][s[5]] ^ t[1][s[6]] ^ t[0][s[7]]
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		crc = t[0][byte(crc)^s[i]] ^ crc>>8
	}
	return ^crc
}

func checksumDigits(out *[tokenCheckLen]byte, random string) {
	sum := crc32IEEE(random)
	for i := tokenCheckLen - 1; i >= 0; i-- {
		out[i] = base62Digits[sum%62]
		sum /= 62
	}
}

// Random returns 32 random bytes as unpadded base64url, the form of
// every secret link keygate hands out.
func Random() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("token: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// HashOf returns the lookup hash of token. A token of our length is
// hashed from a stack copy, so the key check allocates nothing.
func HashOf(token string) Hash {
	if len(token) <= tokenLen {
		var buf [tokenLen]byte
		n := copy(buf[:], token)
		return sha256.Sum256(buf[:n])
	}
	return sha256.Sum256([]byte(token))
}

// Redact replaces what could be a keygate token in s with "[redacted]",
// for logs of what a client sent: a client that puts its token into a URL
// path must not find it in the audit log, nor enough of it to rebuild it.
// In each run of token characters (base64url) it redacts
//   - Prefix in any case (kg_, KG_, Kg_) and at least 8 characters after
//     it, the prefix as written kept;
//   - without the prefix, the body of a token: 43 base62 characters and
//     '_' (the checksum may be mistyped), wherever it starts in the run;
//   - a run of exactly 43 characters, the body of a token of the earlier
//     format.
//
// s without any of these is returned as is, without allocating.
func Redact(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !isBase64URL(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isBase64URL(s[j]) {
			j++
		}
		if from, keep, ok := secretIn(s[i:j]); ok {
			b.WriteString(s[last : i+from+keep])
			b.WriteString("[redacted]")
			last = j
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// secretIn finds a token in run, a run of base64url characters: it is
// redacted from from to the run's end, keep characters of it (a prefix as
// written) left in view.
func secretIn(run string) (from, keep int, ok bool) {
	for k := 0; k+len(Prefix) <= len(run); k++ {
		if strings.EqualFold(run[k:k+len(Prefix)], Prefix) && len(run)-k-len(Prefix) >= 8 {
			return k, len(Prefix), true
		}
	}
	for k := 0; k+tokenRandomLen < len(run); k++ {
		if run[k+tokenRandomLen] == '_' && allBase62(run[k:k+tokenRandomLen]) {
			return k, 0, true
		}
	}
	if len(run) == legacyTokenLen-len(Prefix) {
		return 0, 0, true
	}
	return 0, 0, false
}

// checksumMatches reports whether body is 43 base62 characters, '_' and
// their checksum: a token without its prefix.
func checksumMatches(body string) bool {
	random := body[:tokenRandomLen]
	if !allBase62(random) {
		return false
	}
	var want [tokenCheckLen]byte
	checksumDigits(&want, random)
	return string(want[:]) == body[tokenRandomLen+1:]
}

func isBase64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// WellFormed rejects tokens that cannot be ours before hashing them:
// a token of the current format whose checksum does not match (a typo, a
// truncation, garbage), and anything that is neither it nor the earlier
// format.
func WellFormed(token string) bool {
	switch {
	case len(token) == legacyTokenLen:
		if token[:len(Prefix)] != Prefix {
			return false
		}
		for i := len(Prefix); i < len(token); i++ {
			if !isBase64URL(token[i]) {
				return false
			}
		}
		return true
	case len(token) != tokenLen || token[:len(Prefix)] != Prefix || token[tokenLen-tokenCheckLen-1] != '_':
		return false
	}
	return checksumMatches(token[len(Prefix):])
}

func allBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isBase62(s[i]) {
			return false
		}
	}
	return true
}

func isBase62(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// MarshalText writes the hash as base64, so records that store it (signer
// links) hold a short string rather than a JSON array of 32 numbers.
func (h Hash) MarshalText() ([]byte, error) {
	out := make([]byte, base64.RawStdEncoding.EncodedLen(len(h)))
	base64.RawStdEncoding.Encode(out, h[:])
	return out, nil
}

// UnmarshalText reads what MarshalText wrote.
func (h *Hash) UnmarshalText(b []byte) error {
	var buf [sha256.Size + 3]byte
	n, err := base64.RawStdEncoding.Decode(buf[:], b)
	if err != nil || n != sha256.Size {
		return errors.New("token hash: not 32 bytes of base64")
	}
	copy(h[:], buf[:n])
	return nil
}
