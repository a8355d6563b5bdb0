package signing

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/problemtest"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

const threeSigners = `{"templateId":"PAGE-1","name":"Lease","signers":[
	{"fullName":"Ann Email","accessKind":"email","email":"ann@example.com","signerSigningMethods":["render","draw"],"appendSignatureMacro":true},
	{"fullName":"Bob Phone","accessKind":"url","email":"bob@example.com","phone":"+14155552671","receivesCompletedContract":false},
	{"fullName":"Cleo None","accessKind":"email","email":"cleo@example.com","otpMethod":"none","signerSigningMethods":["upload"]}],
	"watchers":[
	{"name":"Wendy","email":"wendy@example.com","notificationKinds":"created|opened|signed|rejected|completed|completed-contract"},
	{"name":"Walt","email":"walt@example.com","notificationKinds":"completed-contract"}]}`

// TestParallelSigning walks a three-signer contract from creation to the
// signed PDFs: pages, passwords by e-mail and SMS, each signing method,
// statuses, the PDFs' contents, and that every notification reaches the
// right recipients exactly once.
func TestParallelSigning(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(threeSigners)
		ann, bob, cleo := c.token(0), c.token(1), c.token(2)

		// Ann opens her page: the document, her name, the forms of her methods.
		w := f.page(http.MethodGet, "/sign/"+ann, "", "", "Accept", "text/html")
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("page: %d %s", w.Code, w.Header())
		}
		html := w.Body.String()
		for _, want := range []string{"Lease agreement", "The tenant shall pay the rent", "For Ann Email", `id="otp-request"`,
			`id="form-draw"`, `id="form-render"`, `<canvas id="pad"`, `id="form-reject"`, `action="` + ann + `/decision"`} {
			if !strings.Contains(html, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if strings.Contains(html, `id="form-upload"`) {
			t.Error("page offers upload, which Ann may not use")
		}
		for h, want := range map[string]string{"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
			if got := w.Header().Get(h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'nonce-") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
		v := f.view(ann)
		// Nothing to download before everyone signed, and the page says why.
		if w := f.page(http.MethodGet, "/sign/"+ann+"/document", "", ""); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "not signed by everyone yet") || v.DocumentURL != "" {
			t.Errorf("the document before completion: %d %s", w.Code, w.Body)
		}
		if v.Contract.Status != "sent" || !v.CanDecide || v.Signer.FullName != "Ann Email" || v.Signer.OTPMethod != "email" ||
			v.Signer.OTPDestination != "a•••@example.com" || v.Signer.OpenedTimestamp != "2026-11-22T10:15:00.000Z" {
			t.Fatalf("view %+v", v)
		}
		opened := f.contract(c.ID)["signers"].([]any)[0].(map[string]any)["openedTimestamp"]
		if opened != "2026-11-22T10:15:00.000Z" {
			t.Errorf("openedTimestamp %v", opened)
		}

		// A password by e-mail; asking again within a minute is refused.
		w = f.requestOTP(ann)
		if w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), `"sentTo":"a•••@example.com"`) ||
			!strings.Contains(w.Body.String(), `"expirationTimestamp":"2026-11-22T10:25:00.000Z"`) {
			t.Fatalf("otp: %d %s", w.Code, w.Body)
		}
		first := f.otpMail("ann@example.com", 0)
		f.clock.Advance(30 * time.Second)
		before := f.digest()
		w = f.requestOTP(ann)
		decodeProblem(t, w, http.StatusTooManyRequests, "rate_limited")
		if ra := w.Header().Get("Retry-After"); ra != "30" {
			t.Errorf("Retry-After %q, want 30", ra)
		}
		// From the page's form: the page with the message, which keeps
		// no-store on a 429.
		w = f.page(http.MethodPost, "/sign/"+ann+"/otp", "application/x-www-form-urlencoded", "")
		if w.Code != http.StatusTooManyRequests || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") ||
			w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "ask again in") {
			t.Errorf("otp from the form: %d %v", w.Code, w.Header())
		}
		problemtest.SecureHeaders(t, w.Code, w.Header())
		f.unchanged(t, before, "a password asked for within the minute")

		// Four wrong passwords are 400s, the fifth voids the password (429),
		// after which even the right one is refused.
		wrong := "000000"
		if first == wrong {
			wrong = "111111"
		}
		sign := map[string]string{"decision": "signed", "method": "render", "signature": "Ann Email", "otp": wrong}
		for i := 1; i <= 4; i++ {
			d := decodeProblem(t, f.decide(ann, sign), http.StatusBadRequest, "invalid_request")
			if len(d.Errors) != 1 || d.Errors[0].Field != "otp" || d.Errors[0].Code != "wrong_otp" {
				t.Fatalf("try %d: %+v", i, d)
			}
		}
		decodeProblem(t, f.decide(ann, sign), http.StatusTooManyRequests, "rate_limited")
		if rec := f.otp(c.Signers[0].ID); rec == nil || rec.Failures != otpMaxFailures {
			t.Fatalf("password after five wrong tries: %+v", rec)
		}
		before = f.digest()
		sign["otp"] = first
		decodeProblem(t, f.decide(ann, sign), http.StatusTooManyRequests, "rate_limited")
		f.unchanged(t, before, "the right password after the fifth wrong one")

		// A new password after the minute, and Ann signs by typing her name.
		f.clock.Advance(31 * time.Second)
		if w := f.requestOTP(ann); w.Code != http.StatusAccepted {
			t.Fatalf("second otp: %d %s", w.Code, w.Body)
		}
		sign["otp"] = f.otpMail("ann@example.com", 1)
		w = f.decide(ann, sign)
		if w.Code != http.StatusOK {
			t.Fatalf("sign: %d %s", w.Code, w.Body)
		}
		if v := f.view(ann); v.Signer.Decision != "signed" || v.CanDecide || v.Contract.Status != "ongoing" {
			t.Fatalf("after signing: %+v", v)
		}
		before = f.digest()
		decodeProblem(t, f.decide(ann, sign), http.StatusConflict, "conflict")
		decodeProblem(t, f.requestOTP(ann), http.StatusConflict, "conflict")
		f.unchanged(t, before, "a second decision or password of a signer who signed")

		// Cleo needs no password and uploads an image through the HTML form.
		f.page(http.MethodGet, "/sign/"+cleo, "", "")
		decodeProblem(t, f.requestOTP(cleo), http.StatusConflict, "conflict")
		img, _ := base64.StdEncoding.DecodeString(drawing(t))
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		mw.WriteField("decision", "signed")
		mw.WriteField("method", "upload")
		fw, _ := mw.CreateFormFile("signature", "me.png")
		fw.Write(img)
		mw.Close()
		f.clock.Advance(time.Minute)
		w = f.page(http.MethodPost, "/sign/"+cleo+"/decision", mw.FormDataContentType(), body.String())
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../"+cleo+"?notice=signed" {
			t.Fatalf("form post: %d %v %s", w.Code, w.Header(), w.Body)
		}
		w = f.page(http.MethodGet, "/sign/"+cleo+"?notice=signed", "", "")
		if !strings.Contains(w.Body.String(), "your signature is recorded") || !strings.Contains(w.Body.String(), "You signed this contract") {
			t.Errorf("page after signing: %s", w.Body)
		}

		// Bob gets his password by SMS and draws.
		f.page(http.MethodGet, "/sign/"+bob, "", "")
		if w := f.requestOTP(bob); w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), `"sentTo":"•••671"`) {
			t.Fatalf("bob otp: %d %s", w.Code, w.Body)
		}
		f.clock.Advance(time.Minute)
		w = f.decide(bob, map[string]string{"decision": "signed", "method": "draw", "signature": "data:image/png;base64," + drawing(t), "otp": f.otpSMS("+14155552671", 0)})
		if w.Code != http.StatusOK {
			t.Fatalf("bob signs: %d %s", w.Code, w.Body)
		}

		// The decision is answered at once, the documents being sealed;
		// then the contract is signed, with both PDFs listed and
		// downloadable.
		var answered pageView
		if err := json.Unmarshal(w.Body.Bytes(), &answered); err != nil || answered.DocumentStatus == "" {
			t.Errorf("the last decision's answer: %v %s", err, w.Body)
		}
		got := f.sealed(c.ID)
		if got["status"] != "signed" {
			t.Fatalf("status %v", got["status"])
		}
		for i, s := range got["signers"].([]any) {
			s := s.(map[string]any)
			if s["decision"] != "signed" || s["decisionIp"] != "192.0.2.7" || s["decisionTimestamp"] == nil || s["openedTimestamp"] == nil {
				t.Errorf("signer %d: %v", i, s)
			}
		}
		finalized := f.download(got["finalizedPdf"].(map[string]any))
		certificate := f.download(got["certificatePdf"].(map[string]any))
		sum := sha256.Sum256(finalized)
		// Each signer downloads the finalized PDF from their own link; the
		// page says so, without a deadline.
		v = f.view(ann)
		dl := f.page(http.MethodGet, v.DocumentURL, "", "")
		if v.DocumentURL == "" || dl.Code != http.StatusOK || !bytes.Equal(dl.Body.Bytes(), finalized) ||
			!strings.Contains(dl.Header().Get("Content-Disposition"), "attachment") {
			t.Errorf("the signer's download at %q: %d %v", v.DocumentURL, dl.Code, dl.Header())
		}
		// And the certificate of completion, which the finalized PDF says
		// each signer has.
		if dl := f.page(http.MethodGet, v.CertificateURL, "", ""); v.CertificateURL != "/sign/"+ann+"/certificate" || dl.Code != http.StatusOK || !bytes.Equal(dl.Body.Bytes(), certificate) {
			t.Errorf("the signer's certificate at %q: %d", v.CertificateURL, dl.Code)
		}
		if html := f.page(http.MethodGet, "/sign/"+ann, "", "").Body.String(); !strings.Contains(html, "Download the signed document") ||
			!strings.Contains(html, `href="/sign/`+ann+`/certificate"`) || strings.Contains(html, "open for signing until") {
			t.Errorf("the signed contract's page:\n%s", html)
		}
		// Both are sealed, over the whole file, for poppler's pdfsig; the
		// certificate names the finalized PDF as sealed.
		for name, doc := range map[string][]byte{"finalized": finalized, "certificate": certificate} {
			if out, ok := pdftest.SealValid(t, doc); !ok {
				t.Errorf("the %s PDF's seal:\n%s", name, out)
			}
		}

		ftext := pdfText(t, finalized)
		for _, want := range []string{"Lease agreement", "The tenant shall pay the rent", "Ann Email", "Bob Phone", "Cleo None", "Signed electronically",
			"signing link"} {
			if !strings.Contains(ftext, want) {
				t.Errorf("finalized PDF lacks %q:\n%s", want, ftext)
			}
		}
		// The finalized PDF ends with the certificate of completion, after
		// the signature blocks, under its one seal: read by pdftotext, the
		// certificate's heading and the signers' steps follow the blocks.
		ftext = pdftest.Text(t, finalized)
		blocks := strings.LastIndex(ftext, "Signed electronically")
		if i := strings.Index(ftext, "Certificate of completion"); blocks < 0 || i < blocks {
			t.Errorf("the finalized PDF's certificate does not follow its signature blocks:\n%s", ftext)
		} else {
			for _, want := range []string{"ann@example.com", "+14155552671", "Opened the signing page", "One-time password accepted",
				"signature drawn on the signing page", "uploaded signature image", "IP address 192.0.2.7", "this file: these are its last pages"} {
				if !strings.Contains(ftext[i:], want) {
					t.Errorf("the finalized PDF's certificate lacks %q:\n%s", want, ftext[i:])
				}
			}
		}
		ctext := pdfText(t, certificate)
		for _, want := range []string{"Certificate of completion", "Ann Email", "ann@example.com", "Bob Phone", "+14155552671", "Cleo None",
			"cleo@example.com", "typed name", "signature drawn on the signing page", "uploaded signature image", "192.0.2.7", "22 November 2026", hex.EncodeToString(sum[:])} {
			if !strings.Contains(ctext, want) {
				t.Errorf("certificate lacks %q:\n%s", want, ctext)
			}
		}

		// Final: no more decisions.
		decodeProblem(t, f.decide(bob, map[string]string{"decision": "rejected", "otp": "123456"}), http.StatusConflict, "conflict")

		// Every notification reached its recipients once.
		f.settle()
		const q = "“Lease”"
		want := map[string]int{
			"ann@example.com | Please sign " + q:                1,
			"cleo@example.com | Please sign " + q:               1,
			"ann@example.com | Your one-time password for " + q: 2,
			"ann@example.com | Your signed contract: " + q:      1,
			"cleo@example.com | Your signed contract: " + q:     1,
			"wendy@example.com | Contract created: " + q:        1,
			"wendy@example.com | Ann Email opened " + q:         1,
			"wendy@example.com | Cleo None opened " + q:         1,
			"wendy@example.com | Bob Phone opened " + q:         1,
			"wendy@example.com | Ann Email signed " + q:         1,
			"wendy@example.com | Cleo None signed " + q:         1,
			"wendy@example.com | Bob Phone signed " + q:         1,
			"wendy@example.com | Completed: " + q:               1,
			"wendy@example.com | Signed contract: " + q:         1,
			"walt@example.com | Signed contract: " + q:          1,
		}
		mails := f.smtp.All()
		if got := countBy(mails); !maps.Equal(got, want) {
			t.Errorf("mails:\n%v\nwant\n%v", keys(got), keys(want))
		}
		if n := len(f.sms.to("+14155552671")); n != 1 {
			t.Errorf("%d texts to Bob, want 1", n)
		}
		for _, m := range mails {
			if strings.HasPrefix(m.Subject, "Please sign") {
				if !strings.Contains(m.Text, "https://sign.example.com/sign/") {
					t.Errorf("invitation without link: %s", m.Text)
				}
			}
			if strings.Contains(m.Subject, "Signed contract") || strings.HasPrefix(m.Subject, "Your signed contract") {
				if len(m.Attachments) != 1 || !bytes.Equal(m.Attachments["Lease-signed.pdf"], finalized) {
					t.Errorf("%s to %s: attachments %v", m.Subject, m.To, slices.Collect(maps.Keys(m.Attachments)))
				}
			}
		}
		// Only Ann's own invitation holds Ann's link.
		for _, m := range mails {
			if strings.Contains(m.Text, ann) && m.To != "ann@example.com" {
				t.Errorf("Ann's link went to %s", m.To)
			}
		}
	})
}

func keys(m map[string]int) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+" ×"+string(rune('0'+v)))
	}
	slices.Sort(out)
	return out
}

// download fetches an attachment through the API and checks its headers
// against the listing.
func (f *fixture) download(a map[string]any) []byte {
	f.t.Helper()
	w := f.apiDo(http.MethodGet, a["url"].(string), "")
	if w.Code != http.StatusOK {
		f.t.Fatalf("download %v: %d %s", a["url"], w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/pdf" || a["mediaType"] != "application/pdf" {
		f.t.Errorf("Content-Type %q, mediaType %v", ct, a["mediaType"])
	}
	if cd := w.Header().Get("Content-Disposition"); cd != `attachment; filename=`+a["fileName"].(string) {
		f.t.Errorf("Content-Disposition %q for %v", cd, a["fileName"])
	}
	data, _ := io.ReadAll(w.Body)
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != a["sha256"] || float64(len(data)) != a["size"] {
		f.t.Errorf("attachment %v: size %d, sha256 %x", a, len(data), sum)
	}
	if !bytes.HasPrefix(data, []byte("%PDF-")) {
		f.t.Errorf("not a PDF: %q", data[:min(len(data), 16)])
	}
	return data
}

// TestSequentialSigning checks turns: only the first undecided signer may
// act, each invitation goes out when the turn comes, a rejection ends
// the contract for everyone after.
func TestSequentialSigning(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"Chain","sequentialSigning":true,"signers":[
			{"fullName":"Uma Url","accessKind":"url","otpMethod":"none"},
			{"fullName":"Eve Email","accessKind":"email","email":"eve@example.com"},
			{"fullName":"Finn Email","accessKind":"email","email":"finn@example.com"}],
			"watchers":[{"name":"Wendy","email":"wendy@example.com","notificationKinds":"rejected|completed"}]}`)
		uma, eve, finn := c.token(0), c.token(1), c.token(2)
		f.settle()
		if n := len(f.smtp.All()); n != 0 {
			t.Fatalf("%d mails at creation; the first signer is a url signer", n)
		}

		before := f.digest()
		for _, tok := range []string{eve, finn} {
			decodeProblem(t, f.requestOTP(tok), http.StatusConflict, "conflict")
			decodeProblem(t, f.decide(tok, map[string]string{"decision": "rejected", "otp": "123456"}), http.StatusConflict, "conflict")
		}
		f.unchanged(t, before, "a password or decision out of turn")
		if v := f.view(eve); v.CanDecide || !strings.Contains(v.Blocked, "Uma Url decides first") {
			t.Fatalf("eve's view: %+v", v)
		}

		if w := f.decide(uma, map[string]string{"decision": "signed", "method": "render", "signature": "Uma Url"}); w.Code != http.StatusOK {
			t.Fatalf("uma signs: %d %s", w.Code, w.Body)
		}
		f.settle()
		if n := len(f.smtp.To("eve@example.com", "Please sign")); n != 1 {
			t.Fatalf("%d invitations to Eve after Uma signed, want 1", n)
		}
		if n := len(f.smtp.To("finn@example.com", "")); n != 0 {
			t.Fatalf("Finn got %d mails before his turn", n)
		}
		decodeProblem(t, f.requestOTP(finn), http.StatusConflict, "conflict")

		if w := f.requestOTP(eve); w.Code != http.StatusAccepted {
			t.Fatalf("eve otp: %d %s", w.Code, w.Body)
		}
		w := f.decide(eve, map[string]string{"decision": "rejected", "reason": "The rent is too high.", "otp": f.otpMail("eve@example.com", 0)})
		if w.Code != http.StatusOK {
			t.Fatalf("eve rejects: %d %s", w.Code, w.Body)
		}
		got := f.contract(c.ID)
		if got["status"] != "rejected" || got["finalizedPdf"] != nil {
			t.Fatalf("after the rejection: %v", got)
		}
		decodeProblem(t, f.decide(finn, map[string]string{"decision": "signed", "method": "render", "signature": "Finn", "otp": "123456"}), http.StatusConflict, "conflict")
		if v := f.view(finn); v.CanDecide || v.Contract.Status != "rejected" {
			t.Fatalf("finn's view: %+v", v)
		}

		f.settle()
		rejected := f.smtp.To("wendy@example.com", "Eve Email rejected")
		if len(rejected) != 1 || !strings.Contains(rejected[0].Text, "The rent is too high.") {
			t.Fatalf("rejection mails to the watcher: %+v", rejected)
		}
		if n := len(f.smtp.To("finn@example.com", "")); n != 0 {
			t.Errorf("Finn got %d mails; his turn never came", n)
		}
		if n := len(f.smtp.To("wendy@example.com", "")); n != 1 {
			t.Errorf("the watcher got %d mails, want only the rejection", n)
		}
	})
}

// TestSequentialCompletion checks that each signer is invited in turn
// and that a completed sequential contract is signed.
func TestSequentialCompletion(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"Two","sequentialSigning":true,"signers":[
			{"fullName":"Ada","accessKind":"email","email":"ada@example.com","otpMethod":"none"},
			{"fullName":"Ben","accessKind":"email","email":"ben@example.com","otpMethod":"none"}]}`)
		f.settle()
		if a, b := len(f.smtp.To("ada@example.com", "Please sign")), len(f.smtp.To("ben@example.com", "Please sign")); a != 1 || b != 0 {
			t.Fatalf("invitations at creation: ada %d, ben %d", a, b)
		}
		for i, name := range []string{"Ada", "Ben"} {
			if w := f.decide(c.token(i), map[string]string{"decision": "signed", "method": "render", "signature": name}); w.Code != http.StatusOK {
				t.Fatalf("%s signs: %d %s", name, w.Code, w.Body)
			}
		}
		f.settle()
		if b := len(f.smtp.To("ben@example.com", "Please sign")); b != 1 {
			t.Fatalf("%d invitations to Ben", b)
		}
		if got := f.contract(c.ID); got["status"] != "signed" || got["finalizedPdf"] == nil || got["certificatePdf"] == nil {
			t.Fatalf("contract %v", got)
		}
		for _, to := range []string{"ada@example.com", "ben@example.com"} {
			if n := len(f.smtp.To(to, "Your signed contract")); n != 1 {
				t.Errorf("%d signed contracts to %s", n, to)
			}
		}
	})
}

// TestCompletionSealedInBackground: the last signer is answered at once
// while the documents' seal waits (a timestamp authority that hangs),
// other writes go on, and the contract, the signing page and the
// signer's download say that the documents are being sealed; once the
// seal is made they are stored, and the completed-contract mails go.
func TestCompletionSealedInBackground(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		f.svc.sealWait = 50 * time.Millisecond
		c := f.create(`{"templateId":"PAGE-1","name":"Slow seal","signers":[{"fullName":"Una Url","accessKind":"url","email":"una@example.com","otpMethod":"none","signerSigningMethods":["render"]}]}`)
		seal := f.svc.seal
		entered, release := make(chan struct{}, 1), make(chan struct{})
		var seals atomic.Int32
		f.svc.seal = func(doc []byte, c *contracts.Contract) ([]byte, error) {
			if seals.Add(1) == 1 {
				entered <- struct{}{}
				<-release
			}
			return seal(doc, c)
		}
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		w := f.decide(c.token(0), map[string]string{"decision": "signed", "method": "render", "signature": "Una Url"})
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"documentStatus":"being_sealed"`) {
			t.Fatalf("decision: %d %s", w.Code, w.Body)
		}
		<-entered
		// While the seal waits: a write goes through, and everyone sees
		// the documents being sealed.
		f.create(`{"templateId":"PAGE-1","name":"Meanwhile","signers":[{"fullName":"Mo","accessKind":"url"}]}`)
		if got := f.contract(c.ID); got["status"] != "signed" || got["documentStatus"] != "being_sealed" || got["finalizedPdf"] != nil {
			t.Errorf("contract while sealing: %v", got)
		}
		if html := f.page(http.MethodGet, "/sign/"+c.token(0), "", "").Body.String(); !strings.Contains(html, "are being sealed") {
			t.Errorf("the page while sealing:\n%s", html)
		}
		dl := f.page(http.MethodGet, "/sign/"+c.token(0)+"/document", "", "", "Accept", "application/json")
		decodeProblem(t, dl, http.StatusServiceUnavailable, "unavailable")
		if dl.Header().Get("Retry-After") == "" || !strings.Contains(dl.Body.String(), "being sealed") {
			t.Errorf("the download while sealing: %v %s", dl.Header(), dl.Body)
		}
		close(release)
		got := f.sealed(c.ID)
		if got["certificatePdf"] == nil || seals.Load() != 2 {
			t.Errorf("after the seal: %v, %d seals", got, seals.Load())
		}
		f.settle()
		if n := len(f.smtp.To("una@example.com", "Your signed contract")); n != 1 {
			t.Errorf("%d signed contracts mailed", n)
		}
		if f.count(storedSignatures) != 0 {
			t.Error("the signature is kept after the sealed documents hold it")
		}
	})
}

// TestCompletionSealedAfterFailure: a seal that fails (here a panic)
// leaves the completion queued, answered and shown as being
// sealed; the next process seals it (SealQueued), and of two attempts at
// once one stores its documents.
func TestCompletionSealedAfterFailure(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"Failing seal","signers":[{"fullName":"Una Url","accessKind":"url","signerSigningMethods":["render"]}]}`)
		failed := make(chan struct{})
		f.svc.seal = func([]byte, *contracts.Contract) ([]byte, error) {
			defer close(failed)
			// A panic while sealing, in the background, is a failed
			// attempt, not the end of the process.
			panic("the seal certificate expired")
		}
		if w := f.decide(c.token(0), map[string]string{"decision": "signed", "method": "render", "signature": "Una Url"}); w.Code != http.StatusOK {
			t.Fatalf("decision: %d %s", w.Code, w.Body)
		}
		<-failed
		f.svc.WaitSealing()
		if got := f.contract(c.ID); got["documentStatus"] != "being_sealed" || f.count(storedSealQueue) != 1 || f.count(storedSignatures) != 1 {
			t.Fatalf("after a failed seal: %v, queued %d", got, f.count(storedSealQueue))
		}
		// The next process: two attempts at once, as two instances.
		f.restart()
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f.svc.sealDocuments(context.Background(), c.ID); err != nil {
					t.Errorf("an attempt: %v", err)
				}
			}()
		}
		wg.Wait()
		if got := f.contract(c.ID); got["documentStatus"] != "sealed" || f.count(storedAttachments) != 2 || f.count(storedSealQueue) != 0 {
			t.Errorf("after two attempts: %v, %d attachments", got, f.count(storedAttachments))
		}
		// SealQueued picks up what waited: a second completion, queued
		// while nobody sealed.
		d := f.create(`{"templateId":"PAGE-1","name":"Queued","signers":[{"fullName":"Quin","accessKind":"url","signerSigningMethods":["render"]}]}`)
		f.svc.seal = func([]byte, *contracts.Contract) ([]byte, error) { return nil, errors.New("down") }
		f.decide(d.token(0), map[string]string{"decision": "signed", "method": "render", "signature": "Quin"})
		f.svc.WaitSealing()
		f.restart()
		f.svc.sealRetryAfter = 0
		f.svc.SealQueued(10)
		f.sealed(d.ID)
	})
}
