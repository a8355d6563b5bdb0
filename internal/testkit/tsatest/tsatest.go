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
	// Cert is the root that issued its certificate: what a client must
	// be told to trust.
	Cert *x509.Certificate
}

// StartAuthority runs an authority of mode on loopback until the test
// ends.
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
	// The server is made first: the authority's certificate names the
	// CRL it serves, so that verifiers can learn it is not revoked.
	var handler http.HandlerFunc
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w, r) }))
	crlURL := "http://" + srv.Listener.Addr().String() + "/crl"
	// A root, which the client trusts, and the authority's certificate
	// it issues (verifiers refuse a self-signed authority).
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	rootTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test timestamp root"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, nil, err
	}
	root, err := x509.ParseCertificate(rootDER)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: "test timestamp authority"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageTimeStamping},
		BasicConstraintsValid: true,
		CRLDistributionPoints: []string{crlURL},
	}
	if mode == NoEKU {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}
	} else {
		// RFC 3161 (2.3): the timeStamping extended key usage, alone and
		// critical, which verifiers (pdfcpu) require; Go writes it
		// non-critical from ExtKeyUsage.
		eku, err := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 8}})
		if err != nil {
			return nil, nil, err
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Critical: true, Value: eku}}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, &key.PublicKey, rootKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	stopped := make(chan struct{})
	handler = func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/crl" {
			crl, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1),
				ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(time.Hour)}, root, rootKey)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = w.Write(crl)
			return
		}
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
	}
	srv.Start()
	return &Authority{URL: srv.URL, Cert: root}, func() { close(stopped); srv.Close() }, nil
}
