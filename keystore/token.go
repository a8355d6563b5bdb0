package keystore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/keygate/keygate/internal/seal"
)

// TokenPrefix starts every API key token, so secret scanners and people
// can tell a keygate token at a glance.
const TokenPrefix = "kg_"

// tokenLen is "kg_" plus 43 characters of unpadded base64url (32 bytes).
const tokenLen = len(TokenPrefix) + 43

// TokenHash is the SHA-256 of a token, the only form the server looks
// tokens up by.
type TokenHash [sha256.Size]byte

// NewToken returns a fresh API key token: kg_ + 32 random bytes, base64url.
func NewToken() string {
	return TokenPrefix + RandomString()
}

// RandomString returns 32 random bytes as unpadded base64url, the form of
// every secret link and token keygate hands out.
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

// wellFormedToken rejects tokens that cannot be ours before hashing them.
func wellFormedToken(token string) bool {
	return len(token) == tokenLen && token[:len(TokenPrefix)] == TokenPrefix
}

// Sealer seals secrets that an administrator or creator may need to see
// again (API tokens, signing links) under the master key. It is
// internal/seal's, shared with the notification outbox.
type Sealer = seal.Sealer

// NewSealer makes a Sealer from a 32-byte master key.
func NewSealer(masterKey []byte) (*Sealer, error) { return seal.New(masterKey) }

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
