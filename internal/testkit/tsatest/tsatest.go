// Package tsatest runs an RFC 3161 timestamp authority on loopback for
// tests: one that answers, one that fails, one that never answers, and
// ones whose tokens a client must refuse.
package tsatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/digitorus/timestamp"
)

// Mode is how the authority answers.
type Mode int

const (
	Answer    Mode = iota // a valid token
	Fail                  // 500
	Hang                  // no answer until the test ends
	WrongHash             // a valid token over another hash
	NoNonce               // a valid token without the request's nonce
	NoEKU                 // a token signed by a certificate without the timeStamping extended key usage
)

// Authority is a running test authority.
type Authority struct {
	URL string
	// Cert is its certificate, self-signed: the root a client must be
	// told to trust.
	Cert *x509.Certificate
}

// Start runs an authority of mode on loopback until the test ends and
// returns its URL.
func Start(t testing.TB, mode Mode) string {
	t.Helper()
	return StartAuthority(t, mode).URL
}

// StartAuthority is Start, with the authority's certificate.
func StartAuthority(t testing.TB, mode Mode) *Authority {
	t.Helper()
	a, stop, err := Serve(mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return a
}

// Serve runs an authority of mode on loopback until stop, for a program
// (the bench) as for a test.
func Serve(mode Mode) (a *Authority, stop func(), err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test timestamp authority"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageTimeStamping},
		BasicConstraintsValid: true,
	}
	if mode == NoEKU {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	stopped := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case Fail:
			http.Error(w, "out of order", http.StatusInternalServerError)
			return
		case Hang:
			<-stopped
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, err := timestamp.ParseRequest(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ts := timestamp.Timestamp{
			HashAlgorithm: req.HashAlgorithm, HashedMessage: req.HashedMessage, Time: time.Now(),
			Nonce: req.Nonce, Policy: asn1.ObjectIdentifier{1, 2, 3, 4, 1}, AddTSACertificate: req.Certificates,
			SerialNumber: big.NewInt(time.Now().UnixNano()),
		}
		switch mode {
		case WrongHash:
			ts.HashedMessage = make([]byte, len(req.HashedMessage))
		case NoNonce:
			ts.Nonce = nil
		}
		resp, err := ts.CreateResponse(cert, key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/timestamp-reply")
		_, _ = w.Write(resp)
	}))
	return &Authority{URL: srv.URL, Cert: cert}, func() { close(stopped); srv.Close() }, nil
}
