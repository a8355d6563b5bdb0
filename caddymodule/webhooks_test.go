package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/webhook"
)

// hookReceiver records the deliveries an endpoint gets.
type hookReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	bodies  [][]byte
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.headers, h.bodies = append(h.headers, r.Header.Clone()), append(h.bodies, b)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) wait(t *testing.T, n int) ([]http.Header, [][]byte) {
	t.Helper()
	testwait.For(t, testwait.Generous, "webhook deliveries", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.bodies) >= n
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.headers...), append([][]byte(nil), h.bodies...)
}

func webhooksSent(t *testing.T) int { t.Helper(); return webhookOutcomes(t, "sent") }

// webhookOutcomes reads keygate_webhook_deliveries_total{outcome}, 0 while
// no attempt had that outcome.
func webhookOutcomes(t *testing.T, outcome string) int {
	t.Helper()
	return metricValue(t, `keygate_webhook_deliveries_total{outcome="`+outcome+`"}`)
}

// metricValue reads the counter series (name and labels as /metrics
// prints them) from the admin endpoint, 0 while it is not there.
func metricValue(t *testing.T, series string) int {
	t.Helper()
	r := do(t, http.MethodGet, adminURL+"/metrics", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)`).FindSubmatch(r.body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestAdminWebhooks(t *testing.T) { eachBackend(t, testAdminWebhooks) }

func testAdminWebhooks(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	hooks := adminURL + "/webapi/webhooks"
	recv := newHookReceiver(t)
	var secrets []string

	r := do(t, "POST", hooks, map[string]any{"url": recv.URL + "/in?tenant=7", "events": []string{"contract.signed", "share.created"},
		"owners": []string{"alice"}, "description": "CRM"})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sub webhook.Subscription
	r.json(t, &sub)
	secrets = append(secrets, sub.Secret)
	if r.header.Get("Location") != "/webapi/webhooks/"+sub.ID || !strings.HasPrefix(sub.Secret, "whsec_") || len(sub.Secret) != 50 ||
		sub.URL != recv.URL+"/in?tenant=7" || strings.Join(sub.Events, ",") != "contract.signed,share.created" ||
		strings.Join(sub.Owners, ",") != "alice" || sub.Description != "CRM" || !sub.Enabled || sub.CreationTime.IsZero() ||
		r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("created %s (Location %q)", r.body, r.header.Get("Location"))
	}
	one := hooks + "/" + sub.ID

	t.Run("get and list without the secret", func(t *testing.T) {
		for _, u := range []string{one, hooks} {
			r := do(t, "GET", u, nil)
			if r.status != 200 || strings.Contains(string(r.body), sub.Secret) || strings.Contains(string(r.body), `"secret"`) ||
				!strings.Contains(string(r.body), sub.ID) {
				t.Errorf("GET %s: %d %s", u, r.status, r.body)
			}
		}
		var list []webhook.Subscription
		do(t, "GET", hooks, nil).json(t, &list)
		if len(list) != 1 || list[0].ID != sub.ID {
			t.Errorf("list %+v", list)
		}
	})

	t.Run("bad input lists every field and changes nothing", func(t *testing.T) {
		before := do(t, "GET", hooks, nil).body
		for _, c := range []struct {
			name, method, url string
			body              any
			status            int
			fields            string
		}{
			{"create, every rule", "POST", hooks, map[string]any{"url": "http://example.com/x", "events": []string{"contract.signed", "contract.made"},
				"owners": []string{"ok", "bad\u0001"}, "description": strings.Repeat("d", 4001)}, 400, "description,events[1],owners[1],url"},
			{"create without url and events", "POST", hooks, map[string]any{"description": "x"}, 400, "events,url"},
			{"url with user information", "POST", hooks, map[string]any{"url": "https://u:p@example.com/", "events": []string{"share.viewed"}}, 400, "url"},
			{"unknown field", "POST", hooks, map[string]any{"url": "https://example.com/", "events": []string{"share.viewed"}, "secret": "whsec_x"}, 400, ""},
			{"wrong type", "POST", hooks, map[string]any{"url": "https://example.com/", "events": "share.viewed"}, 400, ""},
			{"not JSON", "POST", hooks, "url=https://example.com", 400, ""},
			{"update, bad url and null events", "PATCH", one, map[string]any{"url": "ftp://example.com/", "events": nil, "enabled": nil}, 400, "enabled,events,url"},
			{"update, enabled not a boolean", "PATCH", one, map[string]any{"enabled": "yes"}, 400, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := do(t, c.method, c.url, c.body)
				if r.status != c.status {
					t.Fatalf("%d %s", r.status, r.body)
				}
				p := r.problem(t)
				var fields []string
				for _, e := range p.Errors {
					fields = append(fields, e.Field)
				}
				sort.Strings(fields)
				if c.fields != "" && strings.Join(fields, ",") != c.fields {
					t.Errorf("fields %v, want %s", fields, c.fields)
				}
			})
		}
		plain, err := http.Post(hooks, "text/plain", strings.NewReader(`{"url": "https://example.com/", "events": ["share.viewed"]}`))
		if err != nil {
			t.Fatal(err)
		}
		plain.Body.Close()
		if plain.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("text/plain create: %d", plain.StatusCode)
		}
		if after := do(t, "GET", hooks, nil).body; string(after) != string(before) {
			t.Errorf("refused requests changed the subscriptions:\n%s\n%s", before, after)
		}
	})

	t.Run("unknown ids, methods, parameters", func(t *testing.T) {
		missing := hooks + "/00000000-0000-4000-8000-000000000000"
		for _, c := range []struct {
			method, url string
			body        any
			status      int
			allow       string
		}{
			{"GET", missing, nil, 404, ""},
			{"PATCH", missing, map[string]any{"enabled": false}, 404, ""},
			{"DELETE", missing, nil, 404, ""},
			{"POST", missing + "/rotate-secret", nil, 404, ""},
			{"POST", missing + "/test", nil, 404, ""},
			{"GET", missing + "/deliveries", nil, 404, ""},
			{"PUT", one, map[string]any{}, 405, "GET, PATCH, DELETE"},
			{"GET", one + "/rotate-secret", nil, 405, "POST"},
			{"DELETE", hooks, nil, 405, "GET, POST"},
			{"GET", one + "/deliveries?limit=0", nil, 400, ""},
			{"GET", one + "/deliveries?limit=1001", nil, 400, ""},
			{"GET", one + "/deliveries?limit=x", nil, 400, ""},
			{"GET", one + "/deliveries?offset=-1", nil, 400, ""},
			{"GET", one + "/deliveries?status=500", nil, 400, ""},
			{"GET", hooks + "?enabled=true", nil, 400, ""},
		} {
			r := do(t, c.method, c.url, c.body)
			if r.status != c.status || r.header.Get("Allow") != c.allow {
				t.Errorf("%s %s: %d Allow %q %s, want %d %q", c.method, c.url, r.status, r.header.Get("Allow"), r.body, c.status, c.allow)
				continue
			}
			r.problem(t)
		}
	})

	t.Run("update", func(t *testing.T) {
		r := do(t, "PATCH", one, map[string]any{"events": []string{"contract.signed", "contract.completed"}, "owners": nil, "description": "CRM 2"})
		var got webhook.Subscription
		r.json(t, &got)
		if r.status != 200 || strings.Join(got.Events, ",") != "contract.signed,contract.completed" || len(got.Owners) != 0 ||
			got.Description != "CRM 2" || got.URL != sub.URL || !got.Enabled || got.Secret != "" || !got.LastModificationTime.After(sub.CreationTime) {
			t.Errorf("update: %d %s", r.status, r.body)
		}
		// {} changes nothing, not even the modification time.
		var same webhook.Subscription
		r = do(t, "PATCH", one, map[string]any{})
		r.json(t, &same)
		if r.status != 200 || !same.LastModificationTime.Equal(got.LastModificationTime) || same.Description != "CRM 2" {
			t.Errorf("PATCH {}: %d %s", r.status, r.body)
		}
	})

	t.Run("rotate-secret answers the new secret; both sign", func(t *testing.T) {
		r := do(t, "POST", one+"/rotate-secret", nil)
		var got webhook.Subscription
		r.json(t, &got)
		if r.status != 200 || !strings.HasPrefix(got.Secret, "whsec_") || got.Secret == sub.Secret || got.PreviousSecretExpiry == nil ||
			got.PreviousSecretExpiry.Sub(time.Now()) < 23*time.Hour {
			t.Fatalf("rotate: %d %s", r.status, r.body)
		}
		secrets = append(secrets, got.Secret)
	})

	t.Run("test delivers a signed webhook.test; the log shows it", func(t *testing.T) {
		sent := webhooksSent(t)
		r := do(t, "POST", one+"/test", nil)
		var out struct{ MessageID string }
		r.json(t, &out)
		if r.status != http.StatusAccepted || !strings.HasPrefix(out.MessageID, "msg_") {
			t.Fatalf("test: %d %s", r.status, r.body)
		}
		headers, bodies := recv.wait(t, 1)
		h, body := headers[0], bodies[0]
		if h.Get("webhook-id") != out.MessageID || len(strings.Split(h.Get("webhook-signature"), " ")) != 2 {
			t.Errorf("headers %v", h)
		}
		for _, s := range secrets {
			wh, _ := standardwebhooks.NewWebhook(s)
			if err := wh.Verify(body, h); err != nil {
				t.Errorf("signature: %v", err)
			}
		}
		var b struct {
			Type string
			Data map[string]string
		}
		json.Unmarshal(body, &b)
		if b.Type != "webhook.test" || b.Data["subscriptionId"] != sub.ID {
			t.Errorf("body %s", body)
		}
		var log []map[string]any
		testwait.For(t, testwait.Generous, "the attempt logged", func() bool {
			do(t, "GET", one+"/deliveries?limit=10&offset=0", nil).json(t, &log)
			return len(log) == 1
		})
		keys := make([]string, 0, len(log[0]))
		for k := range log[0] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != "attempt,durationMs,error,event,messageId,status,timestamp" || log[0]["messageId"] != out.MessageID ||
			log[0]["status"] != float64(204) || log[0]["attempt"] != float64(1) || log[0]["event"] != "webhook.test" || log[0]["error"] != "" {
			t.Errorf("log %v", log)
		}
		testwait.For(t, testwait.Generous, "the sent metric", func() bool { return webhooksSent(t) == sent+1 })
	})

	t.Run("a disabled subscription takes no test", func(t *testing.T) {
		if r := do(t, "PATCH", one, map[string]any{"enabled": false}); r.status != 200 {
			t.Fatalf("disable: %d %s", r.status, r.body)
		}
		r := do(t, "POST", one+"/test", nil)
		if r.status != http.StatusConflict || r.problem(t).Code != "conflict" {
			t.Errorf("test of a disabled subscription: %d %s", r.status, r.body)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if r := do(t, "DELETE", one, nil); r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
		if r := do(t, "GET", one, nil); r.status != 404 {
			t.Errorf("after delete: %d", r.status)
		}
	})

	t.Run("audited; no secret in any log", func(t *testing.T) {
		logs := g.readLogs(t, "webhook deleted")
		for _, msg := range []string{"webhook created", "webhook updated", "webhook secret rotated", "webhook test queued", "webhook deleted"} {
			if !strings.Contains(logs, `"msg":"`+msg+`"`) {
				t.Errorf("no %q in the audit log", msg)
			}
		}
		if !strings.Contains(logs, `"webhook_id":"`+sub.ID+`"`) {
			t.Error("audit entries do not name the subscription")
		}
		for _, s := range secrets {
			if strings.Contains(logs, s) || strings.Contains(logs, strings.TrimPrefix(s, "whsec_")) {
				t.Error("a secret is in the logs")
			}
		}
		if m := do(t, "GET", adminURL+"/metrics", nil); strings.Contains(string(m.body), sub.ID) {
			t.Error("the metrics name a subscription")
		}
	})
}

// TestWebhookTargets: a subscription may not target this gateway (its
// admin endpoint, whatever its spelling, or a listener) nor, unless the
// operator allows it, a private or link-local network: 400 naming url on
// create and PATCH, nothing changed. One that targets the gateway after a
// reload (its listener moved there) is refused when the delivery
// connects, logged as "target not allowed", not retried, and the gateway
// goes on.
func TestWebhookTargets(t *testing.T) { eachBackend(t, testWebhookTargets) }

func testWebhookTargets(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	hooks := adminURL + "/webapi/webhooks"
	admin, site := caddymodule.TestAdminPort, caddymodule.TestSitePort
	later := site + 1 // a listener of the config loaded below
	refused := []string{
		fmt.Sprintf("http://127.0.0.1:%d/stop", admin),
		fmt.Sprintf("http://localhost:%d/stop", admin),
		fmt.Sprintf("http://[::1]:%d/load", admin),
		fmt.Sprintf("http://127.0.0.2:%d/stop", admin),
		fmt.Sprintf("http://127.0.0.1:%d/webapi/contracts", site),
		"https://169.254.169.254/latest/meta-data/",
		"https://10.0.0.1/hook",
		"https://[fd00::1]/hook",
	}
	for _, u := range refused {
		r := do(t, "POST", hooks, map[string]any{"url": u, "events": []string{"contract.signed"}})
		p := r.problem(t)
		if r.status != 400 || p.Code != "invalid_request" || len(p.Errors) != 1 || p.Errors[0].Field != "url" ||
			!strings.HasPrefix(p.Errors[0].Message, "target not allowed: ") {
			t.Errorf("POST %s: %d %s", u, r.status, r.body)
		}
	}
	r := do(t, "POST", hooks, map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/hook", later), "events": []string{"contract.signed"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sub webhook.Subscription
	r.json(t, &sub)
	for _, u := range refused[:3] {
		if r := do(t, "PATCH", hooks+"/"+sub.ID, map[string]any{"url": u}); r.status != 400 || r.problem(t).Errors[0].Field != "url" {
			t.Errorf("PATCH to %s: %d %s", u, r.status, r.body)
		}
	}
	var got webhook.Subscription
	do(t, "GET", hooks+"/"+sub.ID, nil).json(t, &got)
	if got.URL != sub.URL {
		t.Errorf("after refused PATCHes the url is %s", got.URL)
	}

	// The gateway now listens where the subscription points.
	failed, retried := webhookOutcomes(t, "failed"), webhookOutcomes(t, "retry")
	g.tester.InitServer(g.config(echoSite)+fmt.Sprintf("\nhttp://localhost:%d {\n\trespond \"the gateway itself\" 200\n}\n", later), "caddyfile")
	if r := do(t, "POST", hooks+"/"+sub.ID+"/test", nil); r.status != http.StatusAccepted {
		t.Fatalf("test: %d %s", r.status, r.body)
	}
	var log []webhook.Attempt
	testwait.For(t, testwait.Generous, "the attempt logged", func() bool {
		do(t, "GET", hooks+"/"+sub.ID+"/deliveries", nil).json(t, &log)
		return len(log) == 1
	})
	want := fmt.Sprintf("target not allowed: 127.0.0.1:%d is this gateway's own address", later)
	if log[0].Status != 0 || log[0].Attempt != 1 || !strings.HasPrefix(log[0].Error, want) {
		t.Errorf("log %+v, want an error starting %q", log[0], want)
	}
	if logs := g.readLogs(t, "target not allowed"); !strings.Contains(logs, "webhook delivery given up: target not allowed") {
		t.Errorf("the refusal is not logged: %s", logs)
	}
	// Given up at once, not retried; and the gateway goes on answering.
	testwait.For(t, testwait.Generous, "the failed metric", func() bool { return webhookOutcomes(t, "failed") == failed+1 })
	if n := webhookOutcomes(t, "retry"); n != retried {
		t.Errorf("%d retries", n-retried)
	}
	if r := do(t, "GET", siteURL+"/webapi/contracts", nil); r.status != http.StatusUnauthorized {
		t.Errorf("the gateway after the refused delivery: %d %s", r.status, r.body)
	}
}
