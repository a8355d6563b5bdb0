package signing

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

const oneSigner = `{"templateId":"PAGE-1","name":"Solo","signers":[
	{"fullName":"Sam Solo","accessKind":"url","otpMethod":"none","signerSigningMethods":["upload","render"]}]}`

func encodePNG(t *testing.T, img image.Image) string {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// TestDecisionValidation lists every invalid field of a decision and
// changes nothing.
func TestDecisionValidation(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(oneSigner)
		tok := c.token(0)
		before := f.digest()
		blankPNG := encodePNG(t, image.NewNRGBA(image.Rect(0, 0, 50, 20)))
		var gifImg bytes.Buffer
		if err := gif.Encode(&gifImg, image.NewPaletted(image.Rect(0, 0, 4, 4), color.Palette{color.Black, color.White}), nil); err != nil {
			t.Fatal(err)
		}
		big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, maxSignatureBytes+1))
		// Found by FuzzSignatureImage: 8192×2 is fewer pixels than 4096×4096,
		// but wider than the documented bound.
		wide := encodePNG(t, image.NewNRGBA(image.Rect(0, 0, 8192, 2)))
		tall := encodePNG(t, image.NewNRGBA(image.Rect(0, 0, 2, 4097)))

		tests := []struct {
			name   string
			body   map[string]string
			fields []string
		}{
			{"empty", map[string]string{}, []string{"decision=required"}},
			{"unknown decision", map[string]string{"decision": "maybe"}, []string{"decision=invalid"}},
			{"no method", map[string]string{"decision": "signed"}, []string{"method=required"}},
			{"method not offered", map[string]string{"decision": "signed", "method": "draw", "signature": drawing(t)}, []string{"method=not_allowed"}},
			{"unknown method", map[string]string{"decision": "signed", "method": "stamp"}, []string{"method=not_allowed"}},
			{"no image", map[string]string{"decision": "signed", "method": "upload"}, []string{"signature=required"}},
			{"not base64", map[string]string{"decision": "signed", "method": "upload", "signature": "!!!"}, []string{"signature=invalid"}},
			{"not an image", map[string]string{"decision": "signed", "method": "upload", "signature": base64.StdEncoding.EncodeToString([]byte("hello"))}, []string{"signature=invalid"}},
			{"gif", map[string]string{"decision": "signed", "method": "upload", "signature": base64.StdEncoding.EncodeToString(gifImg.Bytes())}, []string{"signature=invalid"}},
			{"over 1 MiB", map[string]string{"decision": "signed", "method": "upload", "signature": big}, []string{"signature=too_large"}},
			{"wider than 4096", map[string]string{"decision": "signed", "method": "upload", "signature": wide}, []string{"signature=invalid"}},
			{"taller than 4096", map[string]string{"decision": "signed", "method": "upload", "signature": tall}, []string{"signature=invalid"}},
			{"no typed name", map[string]string{"decision": "signed", "method": "render", "signature": "  "}, []string{"signature=required"}},
			{"typed name with a control character", map[string]string{"decision": "signed", "method": "render", "signature": "Sam\u0007"}, []string{"signature=invalid"}},
			{"reason when signing", map[string]string{"decision": "signed", "method": "render", "signature": "Sam", "reason": "why not"}, []string{"reason=not_allowed"}},
			{"reason too long", map[string]string{"decision": "rejected", "reason": strings.Repeat("x", maxReason+1)}, []string{"reason=invalid"}},
			{"two at once", map[string]string{"decision": "signed", "method": "upload", "signature": "!!!", "reason": "x"}, []string{"signature=invalid", "reason=not_allowed"}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				d := decodeProblem(t, f.decide(tok, tc.body), http.StatusBadRequest, "invalid_request")
				var got []string
				for _, e := range d.Errors {
					got = append(got, e.Field+"="+e.Code)
				}
				if !slices.Equal(got, tc.fields) {
					t.Errorf("fields %v, want %v", got, tc.fields)
				}
				f.unchanged(t, before, "an invalid decision")
			})
		}

		// A drawing that shows nothing is refused (a signer who draws needs
		// the draw method).
		f2 := f.create(`{"templateId":"PAGE-1","name":"Draw","signers":[{"fullName":"Dora","accessKind":"url","otpMethod":"none","signerSigningMethods":["draw"]}]}`)
		before = f.digest()
		d := decodeProblem(t, f.decide(f2.token(0), map[string]string{"decision": "signed", "method": "draw", "signature": blankPNG}), http.StatusBadRequest, "invalid_request")
		if d.Errors[0].Code != "blank" {
			t.Errorf("blank drawing: %+v", d)
		}
		f.unchanged(t, before, "a blank drawing")

		bodies := []struct {
			name, contentType, body string
			status                  int
			code                    string
		}{
			{"unknown field", "application/json", `{"decision":"signed","stamp":"x"}`, 400, "invalid_request"},
			{"wrong type", "application/json", `{"decision":true}`, 400, "invalid_request"},
			{"two values", "application/json", `{"decision":"rejected"}{}`, 400, "invalid_request"},
			{"not JSON", "application/json", `{"decision"`, 400, "invalid_request"},
			{"plain text", "text/plain", `decision=rejected`, 415, "unsupported_media_type"},
			{"over 2 MiB", "application/json", `{"decision":"signed","signature":"` + strings.Repeat("A", maxDecisionBody) + `"}`, 413, "payload_too_large"},
		}
		for _, tc := range bodies {
			t.Run(tc.name, func(t *testing.T) {
				decodeProblem(t, f.page(http.MethodPost, "/sign/"+tok+"/decision", tc.contentType, tc.body), tc.status, tc.code)
				f.unchanged(t, before, "a refused body")
			})
		}

		if v := f.view(tok); v.Contract.Status != "sent" || v.Signer.Decision != "" || !v.CanDecide {
			t.Fatalf("an invalid decision changed the contract: %+v", v)
		}
		// A JPEG-free PNG upload by URL-encoded form works after all that.
		w := f.page(http.MethodPost, "/sign/"+tok+"/decision", "application/x-www-form-urlencoded",
			"decision=signed&method=upload&signature="+strings.NewReplacer("+", "%2B", "/", "%2F", "=", "%3D").Replace(drawing(t)))
		if w.Code != http.StatusSeeOther {
			t.Fatalf("form: %d %s", w.Code, w.Body)
		}
		if got := f.contract(c.ID); got["status"] != "signed" {
			t.Fatalf("status %v", got["status"])
		}
	})
}

// TestRouting checks the paths, methods and error bodies of the pages.
func TestRouting(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(oneSigner)
		tok := c.token(0)
		unknown := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
		before := f.digest()
		tests := []struct {
			name, method, path string
			accept             string
			status             int
			code, allow        string
		}{
			{"unknown token", "GET", "/sign/" + unknown, "application/json", 404, "not_found", ""},
			{"malformed token", "GET", "/sign/abc", "application/json", 404, "not_found", ""},
			{"unknown action", "POST", "/sign/" + tok + "/cancel", "application/json", 404, "not_found", ""},
			{"deeper path", "GET", "/sign/" + tok + "/otp/x", "application/json", 404, "not_found", ""},
			{"put page", "PUT", "/sign/" + tok, "application/json", 405, "method_not_allowed", "GET, HEAD"},
			{"get otp", "GET", "/sign/" + tok + "/otp", "application/json", 405, "method_not_allowed", "POST"},
			{"otp of unknown token", "POST", "/sign/" + unknown + "/otp", "", 404, "not_found", ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				w := f.page(tc.method, tc.path, "", "", "Accept", tc.accept)
				decodeProblem(t, w, tc.status, tc.code)
				if got := w.Header().Get("Allow"); got != tc.allow {
					t.Errorf("Allow %q, want %q", got, tc.allow)
				}
				f.unchanged(t, before, tc.method+" "+tc.path)
			})
		}
		// A person gets a page, not JSON.
		w := f.page("GET", "/sign/"+unknown, "", "", "Accept", "text/html")
		if w.Code != 404 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), "This signing link is not valid") {
			t.Fatalf("HTML 404: %d %s", w.Code, w.Body)
		}
		// HEAD does not count as opening the page.
		if w := f.page("HEAD", "/sign/"+tok, "", ""); w.Code != 200 {
			t.Fatalf("HEAD: %d", w.Code)
		}
		if s := f.contract(c.ID)["signers"].([]any)[0].(map[string]any); s["openedTimestamp"] != nil {
			t.Errorf("HEAD opened the page: %v", s)
		}
		f.unchanged(t, before, "HEAD")
		// A form error shows the signer's page with the message and status.
		w = f.page("POST", "/sign/"+tok+"/decision", "application/x-www-form-urlencoded", "decision=signed&method=render&signature=")
		if w.Code != 400 || !strings.Contains(w.Body.String(), "Please check what you entered") || !strings.Contains(w.Body.String(), `id="form-render"`) {
			t.Fatalf("form error page: %d %s", w.Code, w.Body)
		}
		f.unchanged(t, before, "a form error")
	})
}

// TestOTPStorage checks that passwords are stored hashed, expire after
// ten minutes, and that a signer without a password method cannot ask
// for one.
func TestOTPStorage(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"Otp","signers":[{"fullName":"Oli","accessKind":"url","email":"oli@example.com"}]}`)
		tok := c.token(0)
		if w := f.requestOTP(tok); w.Code != http.StatusAccepted {
			t.Fatalf("otp: %d %s", w.Code, w.Body)
		}
		code := f.otpMail("oli@example.com", 0)
		if len(code) != 6 {
			t.Fatalf("code %q", code)
		}
		// Stored: the hash and salt, never the code.
		stored := storedOTPBytes(t, f.db)
		if len(stored) != 1 || bytes.Contains(stored[0], []byte(code)) {
			t.Errorf("stored passwords %q hold the code %s", stored, code)
		}
		rec := f.otp(c.Signers[0].ID)
		if rec == nil || len(rec.Hash) != 32 || len(rec.Salt) != 16 || !rec.Sent.Equal(t0) ||
			!rec.Expires.Equal(t0.Add(otpValidity)) || rec.Failures != 0 {
			t.Fatalf("stored record %+v", rec)
		}
		f.clock.Advance(otpValidity)
		before := f.digest()
		d := decodeProblem(t, f.decide(tok, map[string]string{"decision": "rejected", "otp": code}), http.StatusBadRequest, "invalid_request")
		if d.Errors[0].Code != "otp_expired" {
			t.Errorf("expired password: %+v", d)
		}
		d = decodeProblem(t, f.decide(tok, map[string]string{"decision": "rejected"}), http.StatusBadRequest, "invalid_request")
		if d.Errors[0].Field != "otp" || d.Errors[0].Code != "required" {
			t.Errorf("no password: %+v", d)
		}
		// Neither counts as a wrong try.
		f.unchanged(t, before, "an expired or missing password")
		// A fresh password works once.
		if w := f.requestOTP(tok); w.Code != http.StatusAccepted {
			t.Fatalf("otp: %d %s", w.Code, w.Body)
		}
		code = f.otpMail("oli@example.com", 1)
		if w := f.decide(tok, map[string]string{"decision": "rejected", "otp": code}); w.Code != http.StatusOK {
			t.Fatalf("reject: %d %s", w.Code, w.Body)
		}
		if n := f.count(storedOTPs); n != 0 {
			t.Errorf("%d passwords left after the contract became final", n)
		}
	})
}

// TestExpiry checks that a contract is expired from its expiration time
// on, refuses decisions, and that the sweeper writes it down.
func TestExpiry(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"Soon","expirationTimestamp":"2026-11-22T11:15:00.000Z","signers":[{"fullName":"Kai","accessKind":"url","email":"kai@example.com"}]}`)
		tok := c.token(0)
		f.clock.Advance(time.Hour)
		before := f.digest()
		v := f.view(tok)
		if v.Contract.Status != "expired" || v.CanDecide || !strings.Contains(v.Blocked, "expired") {
			t.Fatalf("view %+v", v)
		}
		if v.Signer.OpenedTimestamp != "" {
			t.Errorf("opening an expired contract was recorded: %+v", v.Signer)
		}
		decodeProblem(t, f.requestOTP(tok), http.StatusConflict, "conflict")
		decodeProblem(t, f.decide(tok, map[string]string{"decision": "rejected", "otp": "123456"}), http.StatusConflict, "conflict")
		f.unchanged(t, before, "the page, a password request or a decision of an expired contract")
		n, err := f.svc.Contracts().SweepExpired(t.Context(), 0)
		if err != nil || n != 1 {
			t.Fatalf("sweep: %d, %v", n, err)
		}
		swept := f.digest()
		if swept == before {
			t.Error("the sweep stored nothing")
		}
		if n, _ := f.svc.Contracts().SweepExpired(t.Context(), 0); n != 0 {
			t.Errorf("second sweep wrote %d", n)
		}
		f.unchanged(t, swept, "a second sweep")
		if got := f.contract(c.ID); got["status"] != "expired" {
			t.Errorf("status %v", got["status"])
		}
	})
}

// TestDelete checks that deleting a contract takes its links, PDFs,
// passwords, signatures and pending notifications with it.
func TestDelete(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"Gone","signers":[
			{"fullName":"Dee","accessKind":"url","otpMethod":"none"},
			{"fullName":"Eli","accessKind":"url","email":"eli@example.com"}]}`)
		if w := f.decide(c.token(0), map[string]string{"decision": "signed", "method": "render", "signature": "Dee"}); w.Code != http.StatusOK {
			t.Fatalf("sign: %d %s", w.Code, w.Body)
		}
		if f.count(storedSignatures) != 1 {
			t.Fatal("no stored signature")
		}
		// Eli's password waits in the outbox while the worker is stopped.
		f.worker.Stop()
		if w := f.requestOTP(c.token(1)); w.Code != http.StatusAccepted {
			t.Fatalf("otp: %d %s", w.Code, w.Body)
		}
		if f.outboxEmpty() {
			t.Fatal("nothing queued")
		}
		if w := f.apiDo(http.MethodDelete, contracts.Prefix+"/"+c.ID, ""); w.Code != http.StatusNoContent {
			t.Fatalf("delete: %d %s", w.Code, w.Body)
		}
		if !f.outboxEmpty() || f.count(storedOTPs) != 0 || f.count(storedSignatures) != 0 {
			t.Errorf("left behind: outbox empty %v, passwords %d, signatures %d", f.outboxEmpty(), f.count(storedOTPs), f.count(storedSignatures))
		}
		for _, tok := range []string{c.token(0), c.token(1)} {
			decodeProblem(t, f.page(http.MethodGet, "/sign/"+tok, "", "", "Accept", "application/json"), 404, "not_found")
		}

		// A completed contract's PDFs go too.
		done := f.create(`{"templateId":"PAGE-1","name":"Done","signers":[{"fullName":"Dee","accessKind":"url","otpMethod":"none"}]}`)
		if w := f.decide(done.token(0), map[string]string{"decision": "signed", "method": "render", "signature": "Dee"}); w.Code != http.StatusOK {
			t.Fatalf("sign: %d %s", w.Code, w.Body)
		}
		got := f.sealed(done.ID)
		urls := []string{got["finalizedPdf"].(map[string]any)["url"].(string), got["certificatePdf"].(map[string]any)["url"].(string)}
		if w := f.apiDo(http.MethodDelete, contracts.Prefix+"/"+done.ID, ""); w.Code != http.StatusNoContent {
			t.Fatalf("delete: %d", w.Code)
		}
		for _, u := range urls {
			decodeProblem(t, f.apiDo(http.MethodGet, u, ""), 404, "not_found")
		}
		if n := f.count(storedAttachments); n != 0 {
			t.Errorf("%d attachments left", n)
		}
	})
}
