package caddymodule_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/testkit/tsatest"
)

// emlMails reads the .eml files of dir/mail.
func emlMails(t *testing.T, dir string) []mailtest.Mail {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "mail", "*.eml"))
	var out []mailtest.Mail
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mailtest.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, m)
	}
	return out
}

func withSubject(ms []mailtest.Mail, to, prefix string) []mailtest.Mail {
	var out []mailtest.Mail
	for _, m := range ms {
		if m.To == to && strings.HasPrefix(m.Subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

var sentMetric = regexp.MustCompile(`(?m)^keygate_notifications_total\{channel="email",outcome="sent"\} (\d+)`)

func emailsSent(t *testing.T) int {
	t.Helper()
	r := do(t, http.MethodGet, adminURL+"/metrics", nil)
	m := sentMetric.FindSubmatch(r.body)
	if m == nil {
		t.Fatalf("no keygate_notifications_total in the metrics")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestSigningThroughCaddy runs the lifecycle behind Caddy: without smtp
// the mail goes to .eml files in <data_dir>/mail, deliveries are counted
// in keygate_notifications_total, a reload that configures smtp moves
// delivery to the SMTP server without a second worker, decisions record
// Caddy's client address, and delete takes the signing links.
func TestSigningThroughCaddy(t *testing.T) { eachBackend(t, testSigningThroughCaddy) }

func testSigningThroughCaddy(t *testing.T, b backend) {
	dir, storage := t.TempDir(), b.storage(t)
	mails := mailtest.Start(t)
	tester := serve(t, signingConfig(dir, storage, ""))
	sentBefore := emailsSent(t)

	if r := do(t, http.MethodPost, adminURL+"/webapi/templates", map[string]any{"id": "PAGE-8", "collectionId": "SPACE-8",
		"title": "Loan", "body": "Ten coins, returned in a year."}); r.status != http.StatusCreated {
		t.Fatalf("template: %d %s", r.status, r.body)
	}
	key := createKey(t, map[string]any{"service": "contracts", "name": "lifecycle", "owner": "alice", "privileges": []string{"get", "create", "delete"}})
	r := do(t, http.MethodPost, siteURL+"/webapi/contracts", map[string]any{
		"templateId": "PAGE-8", "name": "Coins",
		"signers":  []map[string]any{{"fullName": "Eli", "accessKind": "email", "email": "eli@example.com", "signerSigningMethods": []string{"render"}}},
		"watchers": []map[string]any{{"name": "Wendy", "email": "wendy@example.com", "notificationKinds": "created|completed"}},
	}, bearer(key.Token)...)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created struct {
		ID      string
		Signers []struct{ AccessURL string }
	}
	r.json(t, &created)
	link := created.Signers[0].AccessURL

	testwait.For(t, testwait.Generous, "the invitation and the created notice as .eml files", func() bool { return len(emlMails(t, dir)) == 2 })
	if inv := withSubject(emlMails(t, dir), "eli@example.com", "Please sign"); len(inv) != 1 || !strings.Contains(inv[0].Text, link) {
		t.Fatalf("invitation files: %+v", inv)
	}
	if len(withSubject(emlMails(t, dir), "wendy@example.com", "Contract created")) != 1 {
		t.Fatal("no created notice")
	}
	testwait.For(t, testwait.Generous, "the sent counter", func() bool { return emailsSent(t) >= sentBefore+2 })

	if r := do(t, http.MethodGet, link, nil, "Accept", "application/json"); r.status != http.StatusOK || !strings.Contains(string(r.body), `"canDecide":true`) {
		t.Fatalf("page: %d %s", r.status, r.body)
	}
	if r := do(t, http.MethodPost, link+"/otp", nil); r.status != http.StatusAccepted {
		t.Fatalf("otp: %d %s", r.status, r.body)
	}
	var code string
	testwait.For(t, testwait.Generous, "the password file", func() bool {
		ms := withSubject(emlMails(t, dir), "eli@example.com", "Your one-time password")
		if len(ms) == 1 {
			code = passwordLine.FindStringSubmatch(ms[0].Text)[1]
		}
		return code != ""
	})

	// A reload that configures smtp: the same database, the same worker,
	// now delivering through the SMTP server.
	tester.InitServer(signingConfig(dir, storage, mails.Addr), "caddyfile")
	r = do(t, http.MethodPost, link+"/decision", map[string]string{"decision": "signed", "method": "render", "signature": "Eli", "otp": code})
	if r.status != http.StatusOK {
		t.Fatalf("decision: %d %s", r.status, r.body)
	}
	testwait.For(t, testwait.Generous, "the signed contract by SMTP", func() bool {
		return len(mails.To("eli@example.com", "Your signed contract")) == 1 && len(mails.To("wendy@example.com", "Completed")) == 1
	})
	if n := len(emlMails(t, dir)); n != 3 {
		t.Errorf("%d .eml files, want the 3 written before smtp was configured", n)
	}

	r = do(t, http.MethodGet, siteURL+"/webapi/contracts/"+created.ID, nil, bearer(key.Token)...)
	var got struct {
		Status         string
		Signers        []struct{ DecisionIP string }
		FinalizedPDF   struct{ ID string } `json:"finalizedPdf"`
		CertificatePDF struct{ ID string } `json:"certificatePdf"`
	}
	r.json(t, &got)
	if ip := got.Signers[0].DecisionIP; got.Status != "signed" || (ip != "127.0.0.1" && ip != "::1") {
		t.Fatalf("contract: %s", r.body)
	}
	// Both documents are sealed, for poppler's pdfsig, with the
	// certificate the gateway publishes and the admin API shows.
	for _, id := range []string{got.FinalizedPDF.ID, got.CertificatePDF.ID} {
		r := do(t, http.MethodGet, siteURL+"/webapi/contracts/"+created.ID+"/attachments/"+id, nil, bearer(key.Token)...)
		if out, ok := pdftest.SealValid(t, r.body); r.status != http.StatusOK || !ok || !strings.Contains(out, "Common Name: keygate document seal") {
			t.Errorf("document %s: %d, pdfsig:\n%s", id, r.status, out)
		}
	}
	// The certificate of completion names the key and Caddy's client
	// address of each step.
	cert := do(t, http.MethodGet, siteURL+"/webapi/contracts/"+created.ID+"/attachments/"+got.CertificatePDF.ID, nil, bearer(key.Token)...).body
	text := strings.Join(strings.Fields(pdftest.Text(t, cert)), " ")
	for _, want := range []string{"Contract created through the API by alice, with the API key “lifecycle” (" + key.ID + ")",
		"One-time password queued for delivery by e-mail to e•••@example.com IP address " + got.Signers[0].DecisionIP + " · user agent “Go-http-client/1.1”",
		"One-time password accepted", "Signed: typed name", "Contract completed"} {
		if !strings.Contains(text, want) {
			t.Errorf("certificate lacks %q:\n%s", want, text)
		}
	}
	pemReply := do(t, http.MethodGet, siteURL+"/webapi/documents/seal-certificate", nil)
	var seal struct {
		SHA256, AnchorSHA256, Level string
		NotAfter                    time.Time
	}
	do(t, http.MethodGet, adminURL+"/webapi/seal", nil).json(t, &seal)
	if seal.Level != "B-B" {
		t.Errorf("without a timestamp authority the set-up reaches %q, want B-B", seal.Level)
	}
	// Monitoring sees when the certificate ends.
	m := regexp.MustCompile(`(?m)^keygate_seal_certificate_expiry_timestamp_seconds (\S+)$`).FindSubmatch(do(t, http.MethodGet, adminURL+"/metrics", nil).body)
	if m == nil {
		t.Error("no keygate_seal_certificate_expiry_timestamp_seconds")
	} else if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || int64(v) != seal.NotAfter.Unix() {
		t.Errorf("keygate_seal_certificate_expiry_timestamp_seconds %s, want %d", m[1], seal.NotAfter.Unix())
	}
	// The anchor to trust (the self-made root), named by its
	// fingerprint; ?chain=1 the seal certificate, then its root.
	block, _ := pem.Decode(pemReply.body)
	if block == nil || pemReply.status != http.StatusOK || seal.AnchorSHA256 == "" || seal.AnchorSHA256 == seal.SHA256 ||
		pemReply.header.Get("Seal-Certificate-SHA256") != seal.AnchorSHA256 || fmt.Sprintf("%x", sha256.Sum256(block.Bytes)) != seal.AnchorSHA256 {
		t.Errorf("seal certificate: %d %v, admin %+v", pemReply.status, pemReply.header, seal)
	}
	chain := do(t, http.MethodGet, siteURL+"/webapi/documents/seal-certificate?chain=1", nil).body
	leaf, rest := pem.Decode(chain)
	root, _ := pem.Decode(rest)
	if leaf == nil || root == nil || fmt.Sprintf("%x", sha256.Sum256(leaf.Bytes)) != seal.SHA256 || !bytes.Equal(root.Bytes, block.Bytes) {
		t.Errorf("the chain:\n%s", chain)
	}
	if n := metricValue(t, `keygate_document_seals_total{outcome="sealed"}`); n < 2 {
		t.Errorf("%d seals counted", n)
	}
	finalized := do(t, http.MethodGet, siteURL+"/webapi/contracts/"+created.ID+"/attachments/"+got.FinalizedPDF.ID, nil, bearer(key.Token)...).body
	// The signer downloads it from their own link too.
	var page struct{ DocumentURL string }
	do(t, http.MethodGet, link, nil, "Accept", "application/json").json(t, &page)
	if r := do(t, http.MethodGet, siteURL+page.DocumentURL, nil); r.status != http.StatusOK || !bytes.Equal(r.body, finalized) {
		t.Errorf("the signer's download at %q: %d", page.DocumentURL, r.status)
	}
	// The header says the version the seal needs: the seal did not have
	// to declare another in the catalog.
	if !bytes.HasPrefix(finalized, []byte("%PDF-1.5")) || bytes.Contains(finalized, []byte("/Version /")) {
		t.Errorf("the sealed PDF's header %q and catalog disagree", finalized[:8])
	}
	// A relying party that trusts the anchor the gateway serves trusts
	// the document, in pdfsig.
	if out, ok := pdftest.SealTrusted(t, finalized, pemReply.body); !ok {
		t.Errorf("pdfsig with the served anchor trusted:\n%s", out)
	}
	checkVerify(t, created.ID, finalized, "B-B")
	checkCRL(t, pemReply.body)

	if r := do(t, http.MethodDelete, siteURL+"/webapi/contracts/"+created.ID, nil, bearer(key.Token)...); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := do(t, http.MethodGet, link, nil, "Accept", "application/json"); r.status != http.StatusNotFound {
		t.Fatalf("link after delete: %d %s", r.status, r.body)
	}
}

// checkCRL: the self-made root's CRL, which its leaf names, is served
// fresh, signed by the anchor served beside it, revoking nothing.
func checkCRL(t *testing.T, anchorPEM []byte) {
	t.Helper()
	r := do(t, http.MethodGet, siteURL+"/webapi/documents/seal-crl", nil)
	block, _ := pem.Decode(anchorPEM)
	anchor, err := x509.ParseCertificate(block.Bytes)
	must(t, "anchor", err)
	crl, err := x509.ParseRevocationList(r.body)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/pkix-crl" || err != nil {
		t.Fatalf("seal-crl: %d %v %v", r.status, r.header, err)
	}
	if err := crl.CheckSignatureFrom(anchor); err != nil || len(crl.RevokedCertificateEntries) != 0 || !crl.NextUpdate.After(time.Now()) {
		t.Errorf("the CRL: %v, %d revoked, next update %s", err, len(crl.RevokedCertificateEntries), crl.NextUpdate)
	}
}

// upload posts doc to /verify as the form does, in the field field.
func upload(t *testing.T, field string, doc []byte, accept string) response {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, err := mw.CreateFormFile(field, "document.pdf")
	must(t, "form", err)
	fw.Write(doc)
	must(t, "form", mw.Close())
	return do(t, http.MethodPost, siteURL+"/verify", b.Bytes(), "Content-Type", mw.FormDataContentType(), "Accept", accept)
}

// checkVerify: /verify recognises the sealed finalized PDF of contract
// id, tells a changed one and a stranger's PDF, refuses what is not a
// PDF, an empty or missing upload and one over 10 MiB, and limits each
// client address.
func checkVerify(t *testing.T, id string, finalized []byte, level string) {
	t.Helper()
	var res struct {
		Result   string
		Message  string
		SHA256   string
		Level    string
		Contract struct {
			ID, Name string
			Signers  []string
		}
	}
	r := upload(t, "file", finalized, "application/json")
	r.json(t, &res)
	if r.status != 200 || res.Result != "sealed" || res.Contract.ID != id || res.Contract.Name == "" || len(res.Contract.Signers) != 1 || res.Level != level {
		t.Errorf("the sealed PDF (want level %s): %d %s", level, r.status, r.body)
	}
	if page := upload(t, "file", finalized, "text/html"); page.status != 200 || !strings.Contains(string(page.body), "Sealed and unchanged") ||
		!strings.Contains(page.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("the page: %d %s", page.status, page.body)
	}
	// Bytes added after the seal: sealed here, changed since. A byte
	// changed where the seal covers it, or a file that only quotes the
	// seal certificate, proves nothing: unknown.
	changed := bytes.Clone(finalized)
	changed[len(changed)/3] ^= 1
	certPEM := do(t, http.MethodGet, siteURL+"/webapi/documents/seal-certificate", nil).body
	block, _ := pem.Decode(certPEM)
	quoting := []byte("%PDF-1.4\n/ByteRange [0 10 20 5] /Contents <" + fmt.Sprintf("%x", block.Bytes) + ">\n%%EOF\n")
	// A byte of the seal's own /Contents, in the zeros that pad the
	// signature to its reserved room: no signature covers it.
	padded := bytes.Clone(finalized)
	all := regexp.MustCompile(`/Contents\s*<[0-9a-fA-F]+>`).FindAllIndex(padded, -1)
	if len(all) == 0 || padded[all[len(all)-1][1]-3] != '0' {
		t.Fatalf("no zero-padded /Contents in the sealed PDF")
	}
	padded[all[len(all)-1][1]-3] = '1'
	for _, tc := range []struct {
		name, want, message string
	}{
		{"bytes appended", "changed", "bytes were added after the seal"},
		{"a byte of the signature field", "changed", "bytes inside the seal's signature field were changed"},
		{"a byte changed", "unknown", ""},
		{"quoting the certificate", "unknown", ""},
	} {
		doc := map[string][]byte{"bytes appended": append(bytes.Clone(finalized), "\n% more\n"...),
			"a byte of the signature field": padded, "a byte changed": changed, "quoting the certificate": quoting}[tc.name]
		res.Result, res.Message = "", ""
		upload(t, "file", doc, "application/json").json(t, &res)
		if res.Result != tc.want || !strings.Contains(res.Message, tc.message) {
			t.Errorf("%s: %s %q, want %s saying %q", tc.name, res.Result, res.Message, tc.want, tc.message)
		}
	}
	res.Result = ""
	upload(t, "file", []byte("%PDF-1.4\n% a stranger's document\n%%EOF\n"), "application/json").json(t, &res)
	if res.Result != "unknown" {
		t.Errorf("a stranger's PDF: %s", res.Result)
	}
	for _, tc := range []struct {
		name, field string
		doc         []byte
		status      int
	}{
		{"not a PDF", "file", []byte("hello"), 400}, // (an empty file: verify_internal_test.go)
		{"another field", "document", finalized, 400},
		{"10 MiB and one byte", "file", append([]byte("%PDF-"), make([]byte, 10<<20-4)...), 413},
	} {
		if r := upload(t, tc.field, tc.doc, "application/json"); r.status != tc.status {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
		}
	}
	// 10 checks from one address, then a wait: 10 were made above.
	statuses := ""
	for range 1 {
		statuses += fmt.Sprint(upload(t, "file", finalized, "application/json").status, " ")
	}
	if statuses != "429 " {
		t.Errorf("the limit per address: %s", statuses)
	}
	// The page's form is told on the page, which keeps no-store on a 429.
	if r := upload(t, "file", finalized, "text/html"); r.status != 429 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
		r.header.Get("Retry-After") == "" {
		t.Errorf("the limit per address, on the page: %d %v", r.status, r.header)
	} else {
		problemtest.SecureHeaders(t, r.status, r.header)
	}
}

// TestTimestampThroughCaddy: a document_seal block's timestamp_url and
// timestamp_roots_file: a token from an authority the roots vouch for is
// embedded (sealed_with_timestamp); a reply over another hash is refused,
// the document sealed without it (timestamp_failed), valid either way.
func TestTimestampThroughCaddy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    tsatest.Mode
		outcome string
		level   string
	}{{"trusted", tsatest.Answer, "sealed_with_timestamp", "B-LTA"}, {"over another hash", tsatest.WrongHash, "timestamp_failed", "B-B"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tsa := tsatest.StartAuthority(t, tc.mode)
			roots := filepath.Join(dir, "tsa-roots.pem")
			if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tsa.Cert.Raw}), 0o600); err != nil {
				t.Fatal(err)
			}
			serve(t, signingConfig(dir, fmt.Sprintf("document_seal {\n\t\t\ttimestamp_url %s\n\t\t\ttimestamp_roots_file %s\n\t\t}", tsa.URL, roots), ""))
			var setUp struct{ Level string }
			if do(t, http.MethodGet, adminURL+"/webapi/seal", nil).json(t, &setUp); setUp.Level != "B-LTA" {
				t.Errorf("a self-made seal naming its CRL, with an authority, reaches %q, want B-LTA", setUp.Level)
			}
			before := metricValue(t, `keygate_document_seals_total{outcome="`+tc.outcome+`"}`)
			if r := do(t, http.MethodPost, adminURL+"/webapi/templates", map[string]any{"id": "TS-1", "collectionId": "S", "title": "Timed", "body": "On time."}); r.status != http.StatusCreated {
				t.Fatalf("template: %d %s", r.status, r.body)
			}
			key := createKey(t, map[string]any{"service": "contracts", "name": "ts", "owner": "alice", "privileges": []string{"get", "create"}})
			r := do(t, http.MethodPost, siteURL+"/webapi/contracts", map[string]any{"templateId": "TS-1", "name": "Timed",
				"signers": []map[string]any{{"fullName": "Tim", "accessKind": "url", "signerSigningMethods": []string{"render"}}}}, bearer(key.Token)...)
			var created struct {
				ID      string
				Signers []struct{ AccessURL string }
			}
			r.json(t, &created)
			if r := do(t, http.MethodPost, created.Signers[0].AccessURL+"/decision", map[string]string{"decision": "signed", "method": "render", "signature": "Tim"}); r.status != http.StatusOK {
				t.Fatalf("decision: %d %s", r.status, r.body)
			}
			awaitSealed(t, siteURL+"/webapi/contracts/"+created.ID, bearer(key.Token)...)
			if n := metricValue(t, `keygate_document_seals_total{outcome="`+tc.outcome+`"}`); n != before+2 {
				t.Errorf("%s counted %d times, want 2 more than %d", tc.outcome, n, before)
			}
			doc := do(t, http.MethodGet, created.Signers[0].AccessURL+"/document", nil).body
			var level struct{ Level string }
			if upload(t, "file", doc, "application/json").json(t, &level); level.Level != tc.level {
				t.Errorf("/verify says level %q, want %s", level.Level, tc.level)
			}
			// pdfsig: the seal valid, and over the whole file but for
			// what B-LTA adds after it. pdfcpu, trusting the served anchor
			// and the authority, fetching the CRL the leaf names from the
			// gateway: every signature valid.
			anchor := do(t, http.MethodGet, siteURL+"/webapi/documents/seal-certificate", nil).body
			anchor = append(anchor, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tsa.Cert.Raw})...)
			if out := pdftest.Pdfsig(t, doc); !strings.Contains(out, "Signature Validation: Signature is Valid.") {
				t.Errorf("pdfsig:\n%s", out)
			}
			out := pdftest.Pdfcpu(t, doc, anchor)
			if n, valid := strings.Count(out, "Type: "), strings.Count(out, "Status: signature is valid"); tc.level == "B-LTA" && (n != 2 || valid != 2) {
				t.Errorf("pdfcpu: %d of %d signatures valid:\n%s", valid, n, out)
			}
		})
	}
}
