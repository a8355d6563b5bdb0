package command_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

func TestWebhooksCommandLine(t *testing.T) {
	var received atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		received.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()
	cliGateway(t, t.TempDir(), "ok", "webhook_timeout 5s", "webhook_allow_networks 127.0.0.1")

	secret, _, err := runCLI(t, "webhooks", "add", "--url", recv.URL+"/hook", "--events", "contract.signed,share.viewed",
		"--owners", "alice,bob", "--description", "from the CLI")
	if err != nil {
		t.Fatal(err)
	}
	secret = strings.TrimSpace(secret)
	if !strings.HasPrefix(secret, "whsec_") || len(secret) != 50 {
		t.Fatalf("add printed %q, want the secret alone", secret)
	}

	list, _, err := runCLI(t, "webhooks", "list")
	if err != nil || !strings.Contains(list, recv.URL+"/hook") || !strings.Contains(list, "contract.signed,share.viewed") ||
		!strings.Contains(list, "alice,bob") || strings.Contains(list, secret) {
		t.Fatalf("list: %v\n%s", err, list)
	}
	id := strings.Fields(strings.Split(list, "\n")[1])[0]

	shown, _, err := runCLI(t, "webhooks", "show", id)
	if err != nil || !strings.Contains(shown, "from the CLI") || strings.Contains(shown, secret) {
		t.Fatalf("show: %v\n%s", err, shown)
	}
	updated, _, err := runCLI(t, "webhooks", "update", id, "--owners", "none", "--enabled", "false", "--json")
	if err != nil || !strings.Contains(updated, `"enabled": false`) || !strings.Contains(updated, `"owners": []`) {
		t.Fatalf("update: %v\n%s", err, updated)
	}
	if _, _, err := runCLI(t, "webhooks", "update", id, "--enabled", "maybe"); err == nil || !strings.Contains(err.Error(), "true or false") {
		t.Fatalf("--enabled maybe: %v", err)
	}
	if _, _, err := runCLI(t, "webhooks", "test", id); err == nil || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("test of a disabled subscription: %v", err)
	}
	if _, _, err := runCLI(t, "webhooks", "update", id, "--enabled", "true"); err != nil {
		t.Fatal(err)
	}

	rotated, _, err := runCLI(t, "webhooks", "rotate-secret", id)
	rotated = strings.TrimSpace(rotated)
	if err != nil || !strings.HasPrefix(rotated, "whsec_") || rotated == secret {
		t.Fatalf("rotate-secret: %v %q", err, rotated)
	}

	msg, _, err := runCLI(t, "webhooks", "test", id)
	msg = strings.TrimSpace(msg)
	if err != nil || !strings.HasPrefix(msg, "msg_") {
		t.Fatalf("test: %v %q", err, msg)
	}
	testwait.For(t, testwait.Generous, "the test delivery", func() bool {
		out, _, err := runCLI(t, "webhooks", "deliveries", id, "--limit", "5")
		return err == nil && strings.Contains(out, msg) && strings.Contains(out, "webhook.test")
	})
	if received.Load() != 1 {
		t.Errorf("%d deliveries received", received.Load())
	}
	asJSON, _, err := runCLI(t, "webhooks", "deliveries", id, "--json")
	if err != nil || !strings.Contains(asJSON, `"messageId": "`+msg+`"`) || !strings.Contains(asJSON, `"status": 200`) {
		t.Fatalf("deliveries --json: %v\n%s", err, asJSON)
	}
	if _, _, err := runCLI(t, "webhooks", "deliveries", id, "--limit", "5000"); err == nil || !strings.Contains(err.Error(), "limit:") {
		t.Fatalf("--limit 5000: %v", err)
	}

	_, _, err = runCLI(t, "webhooks", "add", "--url", "http://example.com/", "--events", "contract.signed,contract.made")
	if err == nil || !strings.Contains(err.Error(), "url:") || !strings.Contains(err.Error(), "events[1]:") {
		t.Fatalf("bad add: %v", err)
	}

	if _, stderr, err := runCLI(t, "webhooks", "remove", id); err != nil || !strings.Contains(stderr, "removed") {
		t.Fatalf("remove: %v %s", err, stderr)
	}
	if _, _, err := runCLI(t, "webhooks", "show", id); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("show removed: %v", err)
	}
}
