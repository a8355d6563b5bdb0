package docseal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/tsatest"
)

// TestSealCheckedByPdfsig: a sealed PDF is valid and wholly signed for
// poppler's pdfsig, with a self-made certificate and with a PKCS#12 file
// from OpenSSL 3; a changed byte or appended bytes fail.
func TestSealCheckedByPdfsig(t *testing.T) {
	self, err := MakeSelfSigned("gateway.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p12 := openSSLPKCS12(t, "s3cret")
	fromFile, err := LoadPKCS12(p12, "s3cret")
	if err != nil {
		t.Fatalf("an OpenSSL 3 PKCS#12 file: %v", err)
	}
	if _, err := LoadPKCS12(p12, "wrong"); err == nil {
		t.Error("a wrong password opened the PKCS#12 file")
	}
	for _, tc := range []struct {
		name string
		cert *Certificate
	}{{"self-made", self}, {"PKCS#12 from OpenSSL 3", fromFile}} {
		t.Run(tc.name, func(t *testing.T) {
			doc := minimalPDF("A contract to seal")
			sealed, outcome, err := NewSigner(tc.cert, "").Seal(doc, Info{Name: "keygate", Reason: "sealed on completion", Time: time.Now()})
			if err != nil || outcome != Sealed {
				t.Fatalf("Seal: %v %v", outcome, err)
			}
			if !bytes.HasPrefix(sealed, doc) {
				t.Error("the seal is not an incremental update of the document")
			}
			if out, ok := pdftest.SealValid(t, sealed); !ok {
				t.Fatalf("pdfsig on the sealed document:\n%s", out)
			}
			changed := bytes.Clone(sealed)
			i := bytes.Index(changed, []byte("A contract"))
			if i < 0 {
				t.Fatal("the text is not in the file")
			}
			changed[i] = 'B'
			if out := pdftest.Pdfsig(t, changed); strings.Contains(out, "Signature is Valid.") {
				t.Errorf("pdfsig on a changed byte:\n%s", out)
			}
			appended := append(bytes.Clone(sealed), []byte("\n% appended\n")...)
			if out := pdftest.Pdfsig(t, appended); !strings.Contains(out, "Not total document signed") {
				t.Errorf("pdfsig on appended bytes:\n%s", out)
			}
		})
	}
}

// openSSLPKCS12 makes a key, a self-signed certificate and a PKCS#12 file
// of both with the openssl command, in OpenSSL 3's default format.
func openSSLPKCS12(t *testing.T, password string) []byte {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is missing: run scripts/test-deps.sh (Debian openssl)")
	}
	dir := t.TempDir()
	run := func(args ...string) {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	key, crt, p12 := filepath.Join(dir, "k.pem"), filepath.Join(dir, "c.pem"), filepath.Join(dir, "s.p12")
	run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt, "-days", "30", "-subj", "/CN=Example Operator Seal")
	run("pkcs12", "-export", "-inkey", key, "-in", crt, "-out", p12, "-passout", "pass:"+password)
	b, err := os.ReadFile(p12)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSelfMadeRoundTrip(t *testing.T) {
	c, err := MakeSelfSigned("gw.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(b)
	if err != nil || back.Fingerprint() != c.Fingerprint() || !back.SelfMade {
		t.Fatalf("round trip: %v", err)
	}
	if c.Cert.Subject.CommonName != "keygate document seal" || c.Cert.DNSNames[0] != "gw.example.com" ||
		c.Cert.NotAfter.Sub(c.Cert.NotBefore) < SelfMadeValidity {
		t.Errorf("certificate %+v", c.Cert.Subject)
	}
	if Host("https://gw.example.com:8443/x") != "gw.example.com" {
		t.Error("Host")
	}
}

// minimalPDF is a one-page PDF showing text, uncompressed, with a
// classic cross-reference table.
func minimalPDF(text string) []byte {
	content := fmt.Sprintf("BT /F1 24 Tf 72 720 Td (%s) Tj ET", text)
	objects := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.7\n")
	offsets := make([]int, len(objects))
	for i, o := range objects {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objects)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objects)+1, xref)
	return b.Bytes()
}

// TestSelfMadeStored: on both backends, the first value stored is the one
// every later call (another instance, a restart) gets.
func TestSelfMadeStored(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		b := storetest.Pick[Backend](t, db,
			func(d *boltdb.DB) (Backend, error) { return NewBoltBackend(d) },
			func(d *pgdb.DB) Backend { return NewPostgresBackend(d) })
		first, err := b.SelfMade(func() ([]byte, error) { return []byte("first"), nil })
		if err != nil || string(first) != "first" {
			t.Fatalf("first: %q %v", first, err)
		}
		again, err := b.SelfMade(func() ([]byte, error) { return []byte("second"), nil })
		if err != nil || string(again) != "first" {
			t.Fatalf("again: %q %v", again, err)
		}
	})
}

// TestTimestamp: a seal with a timestamp authority that answers carries
// its token, once checked; one that fails or never answers, or whose
// reply fails a check (a token over another hash, without the nonce,
// from a certificate not for timestamping or not trusted), leaves the
// document sealed without one, and valid.
func TestTimestamp(t *testing.T) {
	cert, err := MakeSelfSigned("gw.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mode    tsatest.Mode
		trusted bool // the authority's certificate among the roots
		want    Outcome
		why     string
	}{
		{"answers", tsatest.Answer, true, SealedWithTimestamp, ""},
		{"fails", tsatest.Fail, true, SealedWithoutTimestamp, "answered 500"},
		{"hangs", tsatest.Hang, true, SealedWithoutTimestamp, ""},
		{"a token over another hash", tsatest.WrongHash, true, TimestampFailed, "over another hash"},
		{"a token without the nonce", tsatest.NoNonce, true, TimestampFailed, "nonce"},
		{"a signer not for timestamping", tsatest.NoEKU, true, TimestampFailed, "timeStamping"},
		{"an authority no root vouches for", tsatest.Answer, false, TimestampFailed, "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tsa := tsatest.StartAuthority(t, tc.mode)
			sealer := NewSigner(cert, tsa.URL)
			roots := x509.NewCertPool()
			if tc.trusted {
				roots.AddCert(tsa.Cert)
			}
			sealer.TrustTimestampRoots(roots)
			sealed, outcome, err := sealer.Seal(minimalPDF("timestamped"), Info{Name: "keygate", Time: time.Now()})
			if outcome != tc.want || sealed == nil {
				t.Fatalf("outcome %s, want %s (%v)", outcome, tc.want, err)
			}
			if (err == nil) != (tc.want == SealedWithTimestamp) || err != nil && !strings.Contains(err.Error(), tc.why) {
				t.Errorf("error %v with outcome %s, want one saying %q", err, outcome, tc.why)
			}
			out, ok := pdftest.SealValid(t, sealed)
			if !ok {
				t.Fatalf("pdfsig:\n%s", out)
			}
			// The signature's /Contents is hex: the token names its authority.
			name := hex.EncodeToString([]byte("test timestamp authority"))
			if has := bytes.Contains(bytes.ToLower(sealed), []byte(name)); has != (tc.want == SealedWithTimestamp) {
				t.Errorf("the seal carries the authority's token: %v, want %v", has, tc.want == SealedWithTimestamp)
			}
		})
	}
}

// TestCopyToPostgres: the self-made certificate and the index of sealed
// documents move with caddy webapi migrate, so the gateway on PostgreSQL
// seals with the same certificate and /verify knows the documents sealed
// before the move.
func TestCopyToPostgres(t *testing.T) {
	src, dst := storetest.OpenBolt(t), storetest.OpenPostgres(t)
	bb, err := NewBoltBackend(src.(*boltdb.DB))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bb.SelfMade(func() ([]byte, error) { return []byte("sealed certificate"), nil }); err != nil {
		t.Fatal(err)
	}
	bi, err := NewBoltIndex(src.(*boltdb.DB))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	contract := "01a2139b-46b7-72cb-bd43-7aba811f6931"
	sums := [][32]byte{sha256.Sum256([]byte("finalized")), sha256.Sum256([]byte("certificate"))}
	for _, sum := range sums {
		if err := src.Update(ctx, func(tx storage.Tx) error { return bi.Record(tx, sum, contract) }); err != nil {
			t.Fatal(err)
		}
	}
	err = src.View(ctx, func(from storage.Tx) error {
		return dst.Update(ctx, func(to storage.Tx) error {
			c, err := CopyToPostgres(ctx, from, to)
			if err == nil && (len(c) != 2 || c[0].N != 1 || c[1].Kind != "sealed documents" || c[1].N != 2) {
				t.Errorf("copied %+v", c)
			}
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := NewPostgresBackend(dst.(*pgdb.DB)).SelfMade(func() ([]byte, error) { return []byte("another"), nil })
	if err != nil || string(got) != "sealed certificate" {
		t.Errorf("on PostgreSQL: %q %v", got, err)
	}
	pi := NewPostgresIndex(dst.(*pgdb.DB))
	for _, sum := range sums {
		if id, ok, err := pi.Lookup(sum); err != nil || !ok || id != contract {
			t.Errorf("sealed document %x on PostgreSQL: %q %v %v", sum[:4], id, ok, err)
		}
	}
}

// TestSealedBy: a sealed document, and one with bytes appended, carry the
// seal; one changed where the seal covers it, one that only quotes the
// certificate, and one sealed with another key do not.
func TestSealedBy(t *testing.T) {
	cert, err := MakeSelfSigned("gw.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := MakeSelfSigned("gw.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sealed, _, err := NewSigner(cert, "").Seal(minimalPDF("sealed"), Info{Name: "keygate", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	strangers, _, err := NewSigner(other, "").Seal(minimalPDF("sealed"), Info{Name: "keygate", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Clone(sealed)
	changed[bytes.Index(changed, []byte("sealed"))] = 'S'
	quoting := []byte("%PDF-1.4\n/ByteRange [0 10 20 5] /Contents <" + hex.EncodeToString(cert.Cert.Raw) + ">\n%%EOF\n")
	for _, tc := range []struct {
		name string
		doc  []byte
		want bool
	}{
		{"sealed", sealed, true},
		{"bytes appended", append(bytes.Clone(sealed), "\n% more\n"...), true},
		{"a byte changed", changed, false},
		{"quoting the certificate", quoting, false},
		{"another key's seal", strangers, false},
		{"no seal", minimalPDF("plain"), false},
	} {
		if got := SealedBy(tc.doc, cert.Cert); got != tc.want {
			t.Errorf("%s: SealedBy = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// sealedForTest is a document sealed with a fresh self-made certificate.
func sealedForTest(t testing.TB) (*Certificate, []byte) {
	t.Helper()
	cert, err := MakeSelfSigned("gw.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sealed, _, err := NewSigner(cert, "").Seal(minimalPDF("sealed"), Info{Name: "keygate", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return cert, sealed
}

var byteRangeText = regexp.MustCompile(`/ByteRange\s*\[[^\]]*\]`)

// withByteRange is doc with its first /ByteRange array replaced by r,
// its signature's /Contents (a genuine seal's) untouched.
func withByteRange(doc []byte, r string) []byte {
	loc := byteRangeText.FindIndex(doc)
	return append(append(append([]byte(nil), doc[:loc[0]]...), "/ByteRange ["+r+"]"...), doc[loc[1]:]...)
}

// TestSealedByHostileByteRanges: a genuine seal's /Contents under byte
// ranges that overflow, point outside the file, overlap or run
// backwards proves nothing, and never panics.
func TestSealedByHostileByteRanges(t *testing.T) {
	cert, sealed := sealedForTest(t)
	n := len(sealed)
	for _, tc := range []struct {
		name, byteRange string
	}{
		{"the end overflows", "0 10 20 9223372036854775807"},
		{"the end overflows from the file's end", fmt.Sprintf("0 10 %d 9223372036854775807", n)},
		{"both ends at the largest number", "0 9223372036854775807 9223372036854775807 9223372036854775807"},
		{"a number beyond 64 bits", "0 10 20 99999999999999999999999999"},
		{"a very long number", "0 10 20 " + strings.Repeat("9", 4096)},
		{"negative length", "0 10 20 -5"},
		{"negative offset", "0 -10 20 5"},
		{"the first range beyond the file", fmt.Sprintf("0 %d %d 0", n+1, n+1)},
		{"the second range one byte beyond the file", fmt.Sprintf("0 10 20 %d", n-19)},
		{"the second range starts beyond the file", fmt.Sprintf("0 10 %d 0", n+1)},
		{"backwards", "0 20 10 5"},
		{"overlapping", "0 20 10 30"},
		{"not from the start", "5 10 20 5"},
		{"the whole file", fmt.Sprintf("0 %d %d 0", n, n)},
		{"nothing", "0 0 0 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if SealedBy(withByteRange(sealed, tc.byteRange), cert.Cert) {
				t.Errorf("SealedBy = true for /ByteRange [%s]", tc.byteRange)
			}
		})
	}
}

// genuineLast is sealed with its seal's /Contents zeroed where it lies
// (bytes the seal does not cover), then the signatures others, then the
// genuine signature again, examined last. In others, {len} is the
// length of the whole file.
func genuineLast(sealed []byte, others ...string) []byte {
	m := sealContents.FindSubmatchIndex(sealed)
	genuine := string(sealed[m[0]:m[1]])
	doc := bytes.Clone(sealed)
	copy(doc[m[10]:m[11]], strings.Repeat("0", m[11]-m[10]))
	for _, o := range others {
		doc = append(doc, "\n"+o...)
	}
	doc = append(doc, "\n"+genuine+"\n"...)
	// {len} and its value are both 10 characters: the length stays.
	return bytes.ReplaceAll(doc, []byte("{len}"), fmt.Appendf(nil, "%010d", len(doc)+5*bytes.Count(doc, []byte("{len}"))))
}

// repeated is n copies of s.
func repeated(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestSealedByBounds: SealedBy examines the first maxSignatures
// signatures and hashes at most twice the file, whatever the file
// repeats: a genuine seal further on, or after ranges that made it hash
// the whole file twice already, is not found.
func TestSealedByBounds(t *testing.T) {
	cert, sealed := sealedForTest(t)
	m := sealContents.FindSubmatch(sealed)
	small := "/ByteRange [0 10 20 5] /Contents <" + string(m[5]) + ">"
	whole := "/ByteRange [0 0 0 {len}] /Contents <" + string(m[5]) + ">"
	if maxSignatures < 3 {
		t.Fatalf("maxSignatures %d leaves no room for the cases", maxSignatures)
	}
	for _, tc := range []struct {
		name   string
		others []string
		want   bool
	}{
		{"second", nil, true},
		{"last of the signatures examined", repeated(small, maxSignatures-2), true},
		{"first beyond those examined", repeated(small, maxSignatures-1), false},
		{"sixteenth", repeated(small, 14), false},
		{"after ranges over the whole file once", []string{whole}, true},
		{"after ranges over the whole file twice", []string{whole, whole}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := genuineLast(sealed, tc.others...)
			if got := SealedBy(doc, cert.Cert); got != tc.want {
				t.Errorf("SealedBy = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSelfMadeRootTrusted: the self-made seal is a local root (a CA for
// leaves only) and the leaf it issued, which seals; a document it sealed
// is trusted by pdfsig once the root is, as a relying party trusts it,
// and only then.
func TestSelfMadeRootTrusted(t *testing.T) {
	c, sealed := sealedForTest(t)
	root := c.Anchor()
	if len(c.Chain) != 1 || root == c.Cert || !root.IsCA || !root.MaxPathLenZero || c.Cert.IsCA ||
		c.Cert.CheckSignatureFrom(root) != nil || root.CheckSignatureFrom(root) != nil {
		t.Fatalf("not a root and its leaf: %+v", c)
	}
	rootPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw})
	if out, ok := pdftest.SealTrusted(t, sealed, rootPEM); !ok {
		t.Errorf("pdfsig with the root trusted:\n%s", out)
	}
	other, err := MakeSelfSigned("other.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if out, ok := pdftest.SealTrusted(t, sealed, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Anchor().Raw})); ok {
		t.Errorf("pdfsig trusts the seal with another gateway's root:\n%s", out)
	}
	// Kept and read back whole: the chain and the root's key too.
	raw, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(raw)
	if err != nil || len(back.Chain) != 1 || !back.Chain[0].Equal(root) || back.rootKey == nil {
		t.Errorf("read back: %+v %v", back, err)
	}
}

// TestCertified: the seal is a certification signature that viewers see
// as one: the catalog names it in /Perms /DocMDP, its widget is in the
// page's /Annots, and pdfcpu, trusting
// the self-made root, reports the signature certified, its path
// resolved.
func TestCertified(t *testing.T) {
	c, sealed := sealedForTest(t)
	if !regexp.MustCompile(`/Perms << /DocMDP \d+ 0 R >>`).Match(sealed) {
		t.Error("the catalog has no /Perms /DocMDP")
	}
	// The signature's widget is in its page's /Annots, as every widget.
	if field := regexp.MustCompile(`/Fields \[(\d+) 0 R\]`).FindSubmatch(sealed); field == nil ||
		!regexp.MustCompile(`/Annots \[[^\]]*\b`+string(field[1])+` 0 R`).Match(sealed) {
		t.Error("the signature's widget is not in its page's /Annots")
	}
	out := pdftest.Pdfcpu(t, sealed, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Anchor().Raw}))
	for _, want := range []string{"Type: form signature (certified", "Certified:      true", "Local Path: Status: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("pdfcpu does not say %q:\n%s", want, out)
		}
	}
}
