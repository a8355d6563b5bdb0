package signing

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

// Hostile input at the signing edges: names that try to add mail headers,
// markup in stored text, and parallel tries at the one-time password.

// A line break (or other control character) in any name or address that
// ends up in a mail header is refused at creation, and nothing is stored
// or sent.
func TestHostileMailHeaderNamesRefused(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		before := f.digest()
		const inject = "Legal\r\nBcc: x@evil.example"
		signer := func(name, email string) map[string]any {
			return map[string]any{"fullName": name, "accessKind": "email", "email": email}
		}
		watcher := func(name, email string) map[string]any {
			return map[string]any{"name": name, "email": email, "notificationKinds": "created"}
		}
		tests := []struct {
			name, field string
			contract    map[string]any
		}{
			{"contract name", "name", map[string]any{"name": inject, "signers": []any{signer("Ann", "ann@example.com")}}},
			{"contract name with LF only", "name", map[string]any{"name": "NDA\nBcc: x@evil.example", "signers": []any{signer("Ann", "ann@example.com")}}},
			{"signer name", "signers[0].fullName", map[string]any{"name": "NDA", "signers": []any{signer(inject, "ann@example.com")}}},
			{"signer e-mail", "signers[0].email", map[string]any{"name": "NDA", "signers": []any{signer("Ann", "ann@example.com\r\nBcc: x@evil.example")}}},
			{"signer e-mail with a display name", "signers[0].email", map[string]any{"name": "NDA", "signers": []any{signer("Ann", `"Ann" <ann@example.com>`)}}},
			{"watcher name", "watchers[0].name", map[string]any{"name": "NDA", "signers": []any{signer("Ann", "ann@example.com")},
				"watchers": []any{watcher(inject, "w@example.com")}}},
			{"watcher e-mail", "watchers[0].email", map[string]any{"name": "NDA", "signers": []any{signer("Ann", "ann@example.com")},
				"watchers": []any{watcher("W", "w@example.com\nBcc: x@evil.example")}}},
			{"over-long contract name", "name", map[string]any{"name": strings.Repeat("n", 256), "signers": []any{signer("Ann", "ann@example.com")}}},
			{"over-long e-mail", "signers[0].email", map[string]any{"name": "NDA", "signers": []any{signer("Ann", strings.Repeat("a", 250)+"@example.com")}}},
			{"NUL in a name", "signers[0].fullName", map[string]any{"name": "NDA", "signers": []any{signer("An\x00n", "ann@example.com")}}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				tc.contract["templateId"] = "PAGE-1"
				body, err := json.Marshal(tc.contract)
				if err != nil {
					t.Fatal(err)
				}
				d := decodeProblem(t, f.apiDo(http.MethodPost, contracts.Prefix, string(body)), http.StatusBadRequest, "invalid_request")
				found := false
				for _, e := range d.Errors {
					found = found || e.Field == tc.field
				}
				if !found {
					t.Fatalf("errors %+v, want one for %s", d.Errors, tc.field)
				}
				f.unchanged(t, before, "a refused contract")
			})
		}
		w := f.apiDo(http.MethodGet, contracts.Prefix, "")
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"totalCount":0`) {
			t.Fatalf("after refused creates: %d %s", w.Code, w.Body)
		}
		if !f.outboxEmpty() {
			t.Fatal("a refused contract queued mail")
		}
	})
}

// Non-ASCII names reach the recipient intact, RFC 2047 encoded, and to
// the watcher alone.
func TestHostileNonASCIINamesInMail(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		name := "Mietvertrag für Zoë Ångström – 契約 “quoted”"
		f.create(`{"templateId":"PAGE-1","name":` + jsonString(t, name) + `,
			"signers":[{"fullName":"Zoë Ångström","accessKind":"url","otpMethod":"none"}],
			"watchers":[{"name":"Jürgen Ølsen","email":"juergen@example.com","notificationKinds":"created"}]}`)
		f.settle()
		ms := f.smtp.To("juergen@example.com", "Contract created")
		if len(ms) != 1 {
			t.Fatalf("%d mails to the watcher", len(ms))
		}
		m := ms[0]
		if m.Subject != "Contract created: “"+name+"”" {
			t.Errorf("Subject %q", m.Subject)
		}
		if len(m.Rcpt) != 1 || m.Rcpt[0] != "juergen@example.com" {
			t.Errorf("envelope recipients %v", m.Rcpt)
		}
		if !strings.Contains(m.Text, "Hello Jürgen Ølsen,") || !strings.Contains(m.Text, "Zoë Ångström") {
			t.Errorf("text %q", m.Text)
		}
	})
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Markup in the contract name, the signer's name and the template comes
// out of the signing page escaped, and the page's CSP nonce appears only
// on its own script, never next to stored text.
func TestHostileSigningPageEscapes(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		const (
			script = `</title><script>alert(1)</script>`
			img    = `"><img src=x onerror=alert(1)>`
			jsURL  = `<a href="javascript:alert(1)">x</a>`
		)
		if _, err := f.tpl.Put(contracts.Template{ID: "EVIL", CollectionID: "C", Title: script + img, Body: jsURL + "\n" + script + "\n" + img}); err != nil {
			t.Fatal(err)
		}
		c := f.create(`{"templateId":"EVIL","name":` + jsonString(t, script+img) + `,
			"signers":[{"fullName":` + jsonString(t, img+script) + `,"accessKind":"url","otpMethod":"none","signerSigningMethods":["render"]}]}`)
		tok := c.token(0)
		pages := []struct {
			name string
			w    func() *http.Response
		}{
			{"page", func() *http.Response { return f.page(http.MethodGet, "/sign/"+tok, "", "").Result() }},
			{"page with a hostile notice", func() *http.Response {
				return f.page(http.MethodGet, "/sign/"+tok+"?notice="+url.QueryEscape(script), "", "").Result()
			}},
			{"form error echoing input", func() *http.Response {
				form := url.Values{"decision": {"signed"}, "method": {"render"}, "signature": {script + "\x01"}}
				return f.page(http.MethodPost, "/sign/"+tok+"/decision", "application/x-www-form-urlencoded", form.Encode(), "Accept", "text/html").Result()
			}},
		}
		nonceRE := regexp.MustCompile(`'nonce-([^']+)'`)
		for _, p := range pages {
			t.Run(p.name, func(t *testing.T) {
				resp := p.w()
				b := new(strings.Builder)
				_, _ = fmt.Fprint(b, readAll(t, resp))
				body := b.String()
				if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
					t.Fatalf("%d %v", resp.StatusCode, resp.Header)
				}
				for _, bad := range []string{"<img", `href="javascript:`, "</title><script>", "<script>alert"} {
					if strings.Contains(body, bad) {
						t.Errorf("page holds %q unescaped", bad)
					}
				}
				if n := strings.Count(body, "<script"); n > 1 {
					t.Errorf("%d script elements, want at most the page's own", n)
				}
				m := nonceRE.FindStringSubmatch(resp.Header.Get("Content-Security-Policy"))
				if m == nil {
					t.Fatalf("no nonce in %q", resp.Header.Get("Content-Security-Policy"))
				}
				if n := strings.Count(body, m[1]); n != strings.Count(body, "<script") {
					t.Errorf("nonce appears %d times for %d scripts", n, strings.Count(body, "<script"))
				}
			})
		}
	})
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// Parallel wrong passwords get no more guesses than sequential ones: of
// many sent at once, exactly otpMaxFailures are checked (and counted), and
// the right password is refused afterwards.
func TestHostileParallelOTPTries(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"NDA","signers":[{"fullName":"Ann","accessKind":"email","email":"ann@example.com","signerSigningMethods":["render"]}]}`)
		tok := c.token(0)
		if w := f.requestOTP(tok); w.Code != http.StatusAccepted {
			t.Fatalf("otp: %d %s", w.Code, w.Body)
		}
		code := f.otpMail("ann@example.com", 0)
		const n = 30
		statuses := make([]int, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wrong := fmt.Sprintf("%06d", i)
			if wrong == code {
				wrong = "999999"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				statuses[i] = f.decide(tok, map[string]string{"decision": "signed", "method": "render", "signature": "Ann", "otp": wrong}).Code
			}()
		}
		close(start)
		wg.Wait()
		wrongs := 0
		for _, s := range statuses {
			switch s {
			case http.StatusBadRequest:
				wrongs++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("status %d", s)
			}
		}
		if wrongs != otpMaxFailures-1 {
			t.Errorf("%d tries answered wrong_otp, want %d", wrongs, otpMaxFailures-1)
		}
		failures := -1
		if rec := f.otp(c.Signers[0].ID); rec != nil {
			failures = rec.Failures
		}
		if failures != otpMaxFailures {
			t.Errorf("%d guesses were checked, want %d", failures, otpMaxFailures)
		}
		before := f.digest()
		decodeProblem(t, f.decide(tok, map[string]string{"decision": "signed", "method": "render", "signature": "Ann", "otp": code}),
			http.StatusTooManyRequests, "rate_limited")
		f.unchanged(t, before, "the right password after the void one")
	})
}

// Parallel requests for a password send one; the rest wait their minute.
func TestHostileParallelOTPRequests(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"NDA","signers":[{"fullName":"Ann","accessKind":"email","email":"ann@example.com"}]}`)
		tok := c.token(0)
		const n = 20
		statuses := make([]int, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				statuses[i] = f.requestOTP(tok).Code
			}()
		}
		close(start)
		wg.Wait()
		sent := 0
		for _, s := range statuses {
			switch s {
			case http.StatusAccepted:
				sent++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("status %d", s)
			}
		}
		f.settle()
		if mails := len(f.smtp.To("ann@example.com", "Your one-time password")); sent != 1 || mails != 1 {
			t.Fatalf("%d accepted, %d mails sent; want 1 and 1", sent, mails)
		}
	})
}

// A decision body gets the shared decoder's rules, with its 2 MiB limit:
// a repeated key, invalid UTF-8 or deep nesting is a 400, a bigger body a
// 413, and none of them is a decision.
func TestHostileDecisionBodies(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"NDA","signers":[{"fullName":"Ann","accessKind":"url","otpMethod":"none","signerSigningMethods":["render"]}]}`)
		tok := c.token(0)
		before := f.digest()
		tests := []struct {
			name, body string
			status     int
			code       string
		}{
			{"repeated decision", `{"decision":"rejected","decision":"signed","method":"render","signature":"Ann"}`, 400, "invalid_request"},
			{"invalid UTF-8", "{\"decision\":\"signed\",\"method\":\"render\",\"signature\":\"An\xffn\"}", 400, "invalid_request"},
			{"deep nesting", `{"decision":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, 400, "invalid_request"},
			{"over 2 MiB", `{"decision":"signed","method":"upload","signature":"` + strings.Repeat("A", 2<<20) + `"}`, 413, "payload_too_large"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				decodeProblem(t, f.page(http.MethodPost, "/sign/"+tok+"/decision", "application/json", tc.body), tc.status, tc.code)
				f.unchanged(t, before, "a refused body")
			})
		}
		if v := f.view(tok); v.Signer.Decision != "" || !v.CanDecide {
			t.Fatalf("a refused body decided: %+v", v.Signer)
		}
	})
}
