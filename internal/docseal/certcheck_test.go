package docseal

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/certtest"
)

// TestLoadPKCS12Refusals: a certificate that could not make a seal any
// verifier accepts is refused when loaded, with what is wrong.
func TestLoadPKCS12Refusals(t *testing.T) {
	now := time.Now()
	sign := x509.KeyUsageDigitalSignature
	p12 := func(from, to time.Duration, usage x509.KeyUsage, wrongKey bool) []byte {
		return certtest.PKCS12(t, certtest.Seal{NotBefore: now.Add(from), NotAfter: now.Add(to), KeyUsage: usage, Password: "pw", WrongKey: wrongKey})
	}
	for _, tc := range []struct {
		name     string
		p12      []byte
		password string
		want     string // "" loads
	}{
		{"valid, digitalSignature", p12(-time.Hour, time.Hour, sign, false), "pw", ""},
		{"valid, nonRepudiation only", p12(-time.Hour, time.Hour, x509.KeyUsageContentCommitment, false), "pw", ""},
		{"no key usage extension", p12(-time.Hour, time.Hour, 0, false), "pw", ""},
		{"expired", p12(-48*time.Hour, -24*time.Hour, sign, false), "pw", "expired on"},
		{"not yet valid", p12(24*time.Hour, 48*time.Hour, sign, false), "pw", "is not valid before"},
		{"key usage without signing", p12(-time.Hour, time.Hour, x509.KeyUsageKeyEncipherment, false), "pw",
			"neither digitalSignature nor nonRepudiation"},
		{"wrong password", p12(-time.Hour, time.Hour, sign, false), "other", "password"},
		{"another key", p12(-time.Hour, time.Hour, sign, true), "pw", "is not the key of its certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPKCS12(tc.p12, tc.password)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestSealRefusesExpired: a certificate that expires while the gateway
// runs seals nothing more; the seal fails instead of making a document
// no verifier accepts.
func TestSealRefusesExpired(t *testing.T) {
	c, err := MakeSelfSigned("gateway.example.com", "", time.Now().Add(-SelfMadeValidity-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	out, outcome, err := NewSigner(c, "").Seal(minimalPDF("x"), Info{Name: "keygate", Time: time.Now()})
	if out != nil || outcome != Failed || err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("sealing with an expired certificate: %v %v", outcome, err)
	}
}

// TestOrderChain: a PKCS#12 file may list its chain root first; each
// certificate is put before its issuer, and one that issued none of them
// goes last.
func TestOrderChain(t *testing.T) {
	self, err := MakeSelfSigned("a.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	root := self.Chain[0]
	// An intermediate under the root, with a key of its own, and a leaf
	// under the intermediate.
	midKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mid, err := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "mid"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign}, root, midKey.Public(), self.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "leaf"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)},
		mid, self.Key.Public(), midKey)
	if err != nil {
		t.Fatal(err)
	}
	stranger := self.Cert
	for _, tc := range []struct {
		name string
		in   []*x509.Certificate
		want []*x509.Certificate
	}{
		{"in order", []*x509.Certificate{mid, root}, []*x509.Certificate{mid, root}},
		{"root first", []*x509.Certificate{root, mid}, []*x509.Certificate{mid, root}},
		{"a stranger among them", []*x509.Certificate{stranger, root, mid}, []*x509.Certificate{mid, root, stranger}},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := orderChain(leaf, tc.in)
			if len(got) != len(tc.want) {
				t.Fatalf("%d certificates, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Errorf("%d: %s, want %s", i, got[i].Subject.CommonName, tc.want[i].Subject.CommonName)
				}
			}
		})
	}
}
