package keystore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// wellFormedToken rejects tokens that cannot be ours before hashing them.
func wellFormedToken(token string) bool {
	return len(token) == tokenLen && token[:len(TokenPrefix)] == TokenPrefix
}

// Sealer encrypts secrets that an administrator or creator may need to see
// again (API tokens, signing links) with AES-256-GCM under the master key.
// The associated data binds a sealed value to the record that holds it.
type Sealer struct{ aead cipher.AEAD }

// NewSealer makes a Sealer from a 32-byte master key.
func NewSealer(masterKey []byte) (*Sealer, error) {
	if len(masterKey) != 32 {
		return nil, errors.New("master key must be 32 bytes")
	}
	block, err := aes.NewCipher(masterKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns nonce||ciphertext of plaintext bound to aad.
func (s *Sealer) Seal(plaintext, aad []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic("keystore: crypto/rand failed: " + err.Error())
	}
	return s.aead.Seal(nonce, nonce, plaintext, aad)
}

// Open reverses Seal; it fails if sealed was made under another key or aad.
func (s *Sealer) Open(sealed, aad []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed value too short")
	}
	return s.aead.Open(nil, sealed[:n], sealed[n:], aad)
}

// LoadOrCreateMasterKey reads the 32-byte master key at path, creating it
// with mode 0600 (and its directory with 0700) on first start.
func LoadOrCreateMasterKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err == nil {
		if len(key) != 32 {
			return nil, fmt.Errorf("master key file %s holds %d bytes, want 32", path, len(key))
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading master key: %w", err)
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
