// Package seal encrypts what keygate must store but must be able to read
// again (API tokens, signing links, queued message bodies) with
// AES-256-GCM under the master key, and reads or creates the master key's
// file. It is the one sealing implementation: the key store and the
// notification outbox both use it.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
)

// Sealer seals and opens values under one key. The associated data binds a
// sealed value to the record that holds it, so a value copied into another
// record does not open. It is safe for concurrent use.
type Sealer struct{ aead cipher.AEAD }

// New makes a Sealer from a 32-byte master key.
func New(masterKey []byte) (*Sealer, error) {
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

// Seal returns nonce||ciphertext of plaintext bound to aad. Nonces are
// random: 96 bits leave no practical chance of reuse at keygate's volumes.
func (s *Sealer) Seal(plaintext, aad []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic("seal: crypto/rand failed: " + err.Error())
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
