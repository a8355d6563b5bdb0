package docseal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"
)

// fuzzCertificate is the same in every fuzzing process (an Ed25519 key
// from a fixed seed signs deterministically), so that a sealed input
// one process made is sealed for the others too.
func fuzzCertificate(f *testing.F) *Certificate {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x5e}, ed25519.SeedSize))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "keygate fuzz seal"},
		NotBefore:    time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		f.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		f.Fatal(err)
	}
	return &Certificate{Cert: cert, Key: key}
}

// FuzzSealedBy: whatever the file, SealedBy answers without a panic, and
// says sealed only of a file that carries the certificate. The seeds are
// a sealed document, bytes appended, the overflowing, negative,
// backwards and out-of-file byte ranges of TestSealedByHostileByteRanges,
// many signatures, and cut or odd /Contents.
func FuzzSealedBy(f *testing.F) {
	cert := fuzzCertificate(f)
	sealed, _, err := NewSigner(cert, "").Seal(minimalPDF("sealed"), Info{Name: "keygate", Time: time.Now()})
	if err != nil {
		f.Fatal(err)
	}
	m := sealContents.FindSubmatchIndex(sealed)
	contents := string(sealed[m[10]:m[11]])
	n := len(sealed)
	f.Add(sealed)
	f.Add(append(bytes.Clone(sealed), "\n% more\n"...))
	for _, r := range []string{
		"0 10 20 9223372036854775807", fmt.Sprintf("0 10 %d 9223372036854775807", n),
		"0 9223372036854775807 9223372036854775807 9223372036854775807", "0 10 20 99999999999999999999999999",
		"0 10 20 -5", "0 -10 20 5", "-0 10 20 5", fmt.Sprintf("0 %d %d 0", n+1, n+1), fmt.Sprintf("0 10 20 %d", n-19),
		"0 20 10 5", "0 20 10 30", "5 10 20 5", fmt.Sprintf("0 %d %d 0", n, n), "0 0 0 0",
	} {
		f.Add(withByteRange(sealed, r))
	}
	small := "/ByteRange [0 10 20 5] /Contents <" + contents + ">"
	whole := "/ByteRange [0 0 0 {len}] /Contents <" + contents + ">"
	f.Add(genuineLast(sealed, small, small))
	f.Add(genuineLast(sealed, repeated(small, 15)...))
	f.Add(genuineLast(sealed, whole, whole))
	cut := bytes.Clone(sealed)
	copy(cut[m[10]+len(contents)/2:m[11]], strings.Repeat("0", len(contents)-len(contents)/2))
	f.Add(cut)
	f.Add(withContents(sealed, contents[:len(contents)/2]))
	f.Add(withContents(sealed, contents+"0"))
	f.Add(withContents(sealed, contents[:9]))
	f.Add([]byte("%PDF-1.4\n/ByteRange [0 10 20 5] /Contents <" + hex.EncodeToString(cert.Cert.Raw) + ">\n%%EOF\n"))
	f.Add([]byte("%PDF-"))

	certHex := []byte(hex.EncodeToString(cert.Cert.Raw))
	f.Fuzz(func(t *testing.T, doc []byte) {
		if SealedBy(doc, cert.Cert) && !bytes.Contains(bytes.ToLower(doc), certHex) {
			t.Error("sealed, but the file does not carry the certificate")
		}
	})
}

// withContents is doc with its first /Contents replaced by the hex h.
func withContents(doc []byte, h string) []byte {
	m := sealContents.FindSubmatchIndex(doc)
	return append(append(append([]byte(nil), doc[:m[10]]...), h...), doc[m[11]:]...)
}
