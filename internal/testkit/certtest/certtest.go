// Package certtest makes, for tests, the operator's seal certificates as
// PKCS#12 files: good ones and each kind a gateway must refuse.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"
)

// Seal describes a seal certificate to make.
type Seal struct {
	NotBefore, NotAfter time.Time
	// KeyUsage is the certificate's; 0 leaves the extension out.
	KeyUsage x509.KeyUsage
	Password string
	// WrongKey puts another key than the certificate's in the file.
	WrongKey bool
}

// Valid is a seal certificate valid for an hour either side of now, for
// digital signatures.
func Valid(password string) Seal {
	now := time.Now()
	return Seal{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, Password: password}
}

// PKCS12 makes s: an ECDSA P-256 key and a self-signed certificate
// "Example Operator Seal", in OpenSSL 3's default format.
func PKCS12(tb testing.TB, s Seal) []byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "Example Operator Seal"},
		NotBefore: s.NotBefore, NotAfter: s.NotAfter, KeyUsage: s.KeyUsage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	inFile := key
	if s.WrongKey {
		if inFile, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			tb.Fatal(err)
		}
	}
	p12, err := pkcs12.Modern.Encode(inFile, cert, nil, s.Password)
	if err != nil {
		tb.Fatal(err)
	}
	return p12
}
