package keystore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
)

// TokenPrefix starts every API key token, so secret scanners and people
// can tell a keygate token at a glance.
const TokenPrefix = "kg_"

// A token is TokenPrefix, 32 random bytes as 43 characters of base62, '_'
// and the CRC32 of those 43 characters as 6 characters of base62: one word
// under a double click, a precise pattern for secret scanners
// (TokenPattern), and a typo is refused from the checksum alone, before
// any hash or lookup. Tokens issued before this format (TokenPrefix and 43
// characters of base64url) keep working.
const (
	tokenRandomLen = 43
	tokenCheckLen  = 6
	tokenLen       = len(TokenPrefix) + tokenRandomLen + 1 + tokenCheckLen
	// legacyTokenLen is "kg_" plus 43 characters of unpadded base64url.
	legacyTokenLen = len(TokenPrefix) + 43
)

// TokenPattern matches the tokens keygate issues, for secret scanners.
const TokenPattern = `kg_[0-9A-Za-z]{43}_[0-9A-Za-z]{6}`

// TokenHash is the SHA-256 of a token, the only form the server looks
// tokens up by.
type TokenHash [sha256.Size]byte

const base62Digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewToken returns a fresh API key token: kg_, 32 random bytes in base62,
// '_' and the base62 CRC32 of the random part.
func NewToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("keystore: crypto/rand failed: " + err.Error())
	}
	random := base62(new(big.Int).SetBytes(b[:]), tokenRandomLen)
	return TokenPrefix + random + "_" + tokenChecksum(random)
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

// RandomString returns 32 random bytes as unpadded base64url, the form of
// every secret link keygate hands out.
func RandomString() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("keystore: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// HashToken returns the lookup hash of token. A token of our length is
// hashed from a stack copy, so the key check allocates nothing.
func HashToken(token string) TokenHash {
	if len(token) <= tokenLen {
		var buf [tokenLen]byte
		n := copy(buf[:], token)
		return sha256.Sum256(buf[:n])
	}
	return sha256.Sum256([]byte(token))
}

// RedactTokens replaces every token-like run in s (TokenPrefix and at
// least 8 base64url characters) with TokenPrefix + "[redacted]", for logs
// of what a client sent: a client that puts its token into a URL path must
// not find it in the audit log. s without TokenPrefix is returned as is.
func RedactTokens(s string) string {
	i := strings.Index(s, TokenPrefix)
	if i < 0 {
		return s
	}
	var b strings.Builder
	for i >= 0 {
		start := i + len(TokenPrefix)
		end := start
		for end < len(s) && isBase64URL(s[end]) {
			end++
		}
		if end-start >= 8 {
			b.WriteString(s[:start])
			b.WriteString("[redacted]")
		} else {
			b.WriteString(s[:end])
		}
		s = s[end:]
		i = strings.Index(s, TokenPrefix)
	}
	b.WriteString(s)
	return b.String()
}

func isBase64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// wellFormedToken rejects tokens that cannot be ours before hashing them:
// a token of the current format whose checksum does not match (a typo, a
// truncation, garbage), and anything that is neither it nor the earlier
// format.
func wellFormedToken(token string) bool {
	switch {
	case len(token) == legacyTokenLen:
		if token[:len(TokenPrefix)] != TokenPrefix {
			return false
		}
		for i := len(TokenPrefix); i < len(token); i++ {
			if !isBase64URL(token[i]) {
				return false
			}
		}
		return true
	case len(token) != tokenLen || token[:len(TokenPrefix)] != TokenPrefix || token[tokenLen-tokenCheckLen-1] != '_':
		return false
	}
	random := token[len(TokenPrefix) : len(TokenPrefix)+tokenRandomLen]
	for i := 0; i < len(random); i++ {
		if !isBase62(random[i]) {
			return false
		}
	}
	var want [tokenCheckLen]byte
	checksumDigits(&want, random)
	var diff byte // the checksum is no secret, but the loop costs nothing
	for i, c := range want {
		diff |= c ^ token[tokenLen-tokenCheckLen+i]
	}
	return diff == 0
}

func isBase62(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// LoadOrCreateMasterKey reads the 32-byte master key at path, creating it
// with mode 0600 (and its directory with 0700) on first start. As ssh does
// with a private key, it refuses a file that group or others may read or
// write.
func LoadOrCreateMasterKey(path string) ([]byte, error) {
	key, err := LoadMasterKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating master key directory: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		// Another process created it between our read and open: use theirs.
		return LoadOrCreateMasterKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("creating master key: %w", err)
	}
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// A short file would stop every later start; leave none.
		os.Remove(path)
		return nil, fmt.Errorf("writing master key: %w", err)
	}
	return key, nil
}

// LoadMasterKey reads the 32-byte master key at path, which must exist,
// under the rules of LoadOrCreateMasterKey; an error for a missing file
// wraps os.ErrNotExist. Tools that work on a gateway's data (caddy webapi
// migrate) use it: a new key would open nothing that gateway sealed.
func LoadMasterKey(path string) ([]byte, error) {
	key, err := readMasterKey(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("reading master key: %w", err)
		}
		return nil, err // names the file already
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("master key file %s holds %d bytes, want 32", path, len(key))
	}
	return key, nil
}

// readMasterKey reads the file at path once it has checked, on the open
// file, that it is a regular file that only its owner may use.
func readMasterKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("master key file %s is not a regular file (%s)", path, st.Mode().Type())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("master key file %s has mode %04o: group and others must have no access (chmod 600 %s)", path, perm, path)
	}
	return io.ReadAll(f)
}

// MarshalText writes the hash as base64, so records that store it (signer
// links) hold a short string rather than a JSON array of 32 numbers.
func (h TokenHash) MarshalText() ([]byte, error) {
	out := make([]byte, base64.RawStdEncoding.EncodedLen(len(h)))
	base64.RawStdEncoding.Encode(out, h[:])
	return out, nil
}

// UnmarshalText reads what MarshalText wrote.
func (h *TokenHash) UnmarshalText(b []byte) error {
	var buf [sha256.Size + 3]byte
	n, err := base64.RawStdEncoding.Decode(buf[:], b)
	if err != nil || n != sha256.Size {
		return errors.New("token hash: not 32 bytes of base64")
	}
	copy(h[:], buf[:n])
	return nil
}
