package docseal

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/openssltest"
	"github.com/keygate/keygate/internal/testkit/pdftest"
)

// TestPAdESLevels: each level is reached with what it needs and proved
// by tools keygate did not write: a CA, an OCSP responder and a
// timestamp authority made with openssl; pdfsig and pdfcpu trusting the
// CA's root; openssl ts -verify on the embedded tokens. What fails
// (authority, responder) lowers the level and never the seal.
func TestPAdESLevels(t *testing.T) {
	ca := openssltest.NewCA(t)
	p12, _ := ca.Leaf("Example Operator Seal", "s3cret")
	operator, err := LoadPKCS12(p12, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if len(operator.Chain) != 1 || !namesRevocation(operator) {
		t.Fatalf("the operator's chain %v does not name its responder", operator.Chain)
	}
	selfMade, err := MakeSelfSigned("gw.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// A self-made seal whose leaf names the root's CRL, served as the
	// gateway serves it.
	var withCRL *Certificate
	crlServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		crl, err := withCRL.CRL(time.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(crl)
	}))
	defer crlServer.Close()
	if withCRL, err = MakeSelfSigned("gw.example.com", crlServer.URL+"/seal-crl", time.Now()); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)

	for _, tc := range []struct {
		name     string
		cert     *Certificate
		tsa      openssltest.TSAMode // -1: none
		ocspDown bool
		setUp    Level
		want     Level
		outcome  Outcome
	}{
		{"self-made, no authority", selfMade, -1, false, LevelBB, LevelBB, Sealed},
		{"self-made with an authority", selfMade, openssltest.TSAAnswer, false, LevelBT, LevelBT, SealedWithTimestamp},
		{"self-made naming its CRL, with an authority", withCRL, openssltest.TSAAnswer, false, LevelBLTA, LevelBLTA, SealedWithTimestamp},
		{"operator's, no authority", operator, -1, false, LevelBB, LevelBB, Sealed},
		{"operator's with an authority and a responder", operator, openssltest.TSAAnswer, false, LevelBLTA, LevelBLTA, SealedWithTimestamp},
		{"the responder down", operator, openssltest.TSAAnswer, true, LevelBLTA, LevelBT, SealedWithoutValidationData},
		{"the document timestamp fails", operator, openssltest.TSAOnce, false, LevelBLTA, LevelBLT, SealedWithoutValidationData},
		{"the authority fails", operator, openssltest.TSAFail, false, LevelBLTA, LevelBB, SealedWithoutTimestamp},
		{"the authority hangs", operator, openssltest.TSAHang, false, LevelBLTA, LevelBB, SealedWithoutTimestamp},
		{"the authority answers over another hash", operator, openssltest.TSAWrongHash, false, LevelBLTA, LevelBB, TimestampFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := ""
			if tc.tsa >= 0 {
				url = ca.TSA(tc.tsa)
			}
			ca.OCSPDown(tc.ocspDown)
			sealer := NewSigner(tc.cert, url)
			sealer.TrustTimestampRoots(roots)
			if got := sealer.Level(); got != tc.setUp {
				t.Errorf("set-up level %s, want %s", got, tc.setUp)
			}
			sealed, outcome, err := sealer.Seal(minimalPDF("A contract of level "+string(tc.want)), Info{Name: "keygate", Time: time.Now()})
			if outcome != tc.outcome || sealed == nil {
				t.Fatalf("outcome %s, want %s (%v)", outcome, tc.outcome, err)
			}
			ca.OCSPDown(false) // for the verifiers, which ask it themselves
			if got := LevelOf(sealed); got != tc.want {
				t.Errorf("LevelOf: %s, want %s", got, tc.want)
			}
			if !regexp.MustCompile(`/SubFilter /ETSI.CAdES.detached`).Match(sealed) {
				t.Error("the seal is not ETSI.CAdES.detached")
			}
			seal, err := lastSignature(sealed, "ETSI.CAdES.detached")
			if err != nil {
				t.Fatal(err)
			}
			var signingTime time.Time
			if seal.p7.UnmarshalSignedAttribute([]int{1, 2, 840, 113549, 1, 9, 5}, &signingTime) == nil {
				t.Error("the seal carries a CMS signing-time")
			}
			var scv2 asn1.RawValue
			if err := seal.p7.UnmarshalSignedAttribute([]int{1, 2, 840, 113549, 1, 9, 16, 2, 47}, &scv2); err != nil {
				t.Errorf("no signing-certificate-v2: %v", err)
			}

			// The relying party trusts the seal's root and the timestamp
			// authority's (the seal's first: pdfsig takes one).
			anchor := ca.RootPEM
			if tc.cert.SelfMade {
				anchor = append(PEMOf(tc.cert.Anchor()), ca.RootPEM...)
			}
			// pdfsig: the seal valid and its certificate trusted, over the
			// whole file but for B-LT's /DSS and document timestamp, which
			// covers the whole file (poppler does not check RFC 3161
			// document timestamps: it says it cannot).
			out, ok := pdftest.SealTrusted(t, sealed, anchor)
			if tc.want == LevelBLTA || tc.want == LevelBLT {
				ok = strings.Contains(out, "Signature Validation: Signature is Valid.") && strings.Contains(out, "Certificate Validation: Certificate is Trusted.")
				if last := out[strings.LastIndex(out, "Signature #"):]; tc.want == LevelBLTA && !strings.Contains(last, "Total document signed") {
					ok = false
				}
			}
			if !ok {
				t.Errorf("pdfsig, the anchor trusted:\n%s", out)
			}
			out = pdftest.Pdfcpu(t, sealed, anchor)
			for _, want := range []string{"Certified:      true", "Local Path: Status: ok"} {
				if !strings.Contains(out, want) {
					t.Errorf("pdfcpu does not say %q:\n%s", want, out)
				}
			}
			// With the operator's CA, whose responder pdfcpu asks, or a
			// self-made leaf naming its CRL, every signature (the seal,
			// and the document timestamp of B-LTA) is valid; a self-made
			// leaf that names no revocation status pdfcpu reports as
			// unknown.
			signatures := strings.Count(out, "Type: ")
			if valid := strings.Count(out, "Status: signature is valid"); tc.cert != selfMade && valid != signatures {
				t.Errorf("pdfcpu finds %d of %d signatures valid:\n%s", valid, signatures, out)
			}

			if tc.want == LevelBB || tc.cert.SelfMade {
				return
			}
			// openssl ts -verify: the seal's token is over its signature value...
			ts := seal.token()
			sum := sha256.Sum256(seal.p7.Signers[0].EncryptedDigest)
			if out, ok := ca.VerifyToken(ts.RawToken, sum[:]); !ok {
				t.Errorf("openssl ts -verify on the seal's token:\n%s", out)
			}
			if tc.want != LevelBLTA {
				return
			}
			// ...and the document timestamp's over the whole file.
			dts, err := lastSignature(sealed, "ETSI.RFC3161")
			if err != nil {
				t.Fatal(err)
			}
			if out, ok := ca.VerifyToken(dts.firstDER(), dts.hashedRanges(sealed)); !ok {
				t.Errorf("openssl ts -verify on the document timestamp:\n%s", out)
			}
			if !dts.coversAll(sealed) {
				t.Error("the document timestamp does not cover the whole file")
			}
		})
	}
}

// TestRevokedSealCertificate: a seal certificate its CA's responder
// calls revoked gets no validation data saying otherwise: the seal stays
// at B-T, counted, with the responder's word in the error.
func TestRevokedSealCertificate(t *testing.T) {
	ca := openssltest.NewCA(t)
	p12, leaf := ca.Leaf("Revoked Seal", "s3cret")
	cert, err := LoadPKCS12(p12, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	ca.Revoke(leaf)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	sealer := NewSigner(cert, ca.TSA(openssltest.TSAAnswer))
	sealer.TrustTimestampRoots(roots)
	sealed, outcome, err := sealer.Seal(minimalPDF("revoked"), Info{Name: "keygate", Time: time.Now()})
	if outcome != SealedWithoutValidationData || err == nil || !strings.Contains(err.Error(), "not good") {
		t.Fatalf("outcome %s, %v", outcome, err)
	}
	if got := LevelOf(sealed); got != LevelBT {
		t.Errorf("LevelOf: %s, want B-T", got)
	}
}
