package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keygate/keygate/internal/testwait"
)

// TestSeveralInstancesWebhooks: three gateways on one PostgreSQL database
// deliver each webhook message exactly once, whichever instance queued it
// and whichever takes it, retries included (clients.md, Webhooks;
// storage.md, Several instances on one database).
func TestSeveralInstancesWebhooks(t *testing.T) {
	c := startCluster(t, 3)
	var mu sync.Mutex
	requests := map[string]int{} // webhook-id → requests
	successes := map[string]int{}
	total := 0
	var verifyErr error
	var secret string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		wh, _ := standardwebhooks.NewWebhook(secret)
		if err := wh.Verify(body, r.Header); err != nil && verifyErr == nil {
			verifyErr = err
		}
		id := r.Header.Get("webhook-id")
		requests[id]++
		total++
		// Every seventh request fails: its message is retried, by any
		// instance.
		if total%7 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		successes[id]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)

	var sub struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := c.gws[0].AdminJSON("POST", "/webapi/webhooks", map[string]any{"url": recv.URL + "/hooks",
		"events": []string{"contract.signed"}}, &sub); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	secret = sub.Secret
	mu.Unlock()

	const n = 30
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct {
				MessageID string `json:"messageId"`
			}
			if err := c.gws[i%3].AdminJSON("POST", "/webapi/webhooks/"+sub.ID+"/test", nil, &out); err != nil {
				t.Error(err)
			}
			ids[i] = out.MessageID
		}()
	}
	wg.Wait()
	testwait.For(t, testwait.Generous, "every message delivered", func() bool {
		return c.query(t, "SELECT count(*) FROM keygate.webhook_deliveries") == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if verifyErr != nil {
		t.Errorf("a delivery does not verify: %v", verifyErr)
	}
	for i, id := range ids {
		if successes[id] != 1 {
			t.Errorf("message %d (%s): %d successful deliveries, %d requests", i, id, successes[id], requests[id])
		}
	}
	if len(requests) != n {
		t.Errorf("%d message ids received, want %d", len(requests), n)
	}
	// The log, read through another instance, holds every attempt once.
	var log []struct {
		MessageID string `json:"messageId"`
		Status    int    `json:"status"`
	}
	if err := c.gws[2].AdminJSON("GET", "/webapi/webhooks/"+sub.ID+"/deliveries?limit=1000", nil, &log); err != nil {
		t.Fatal(err)
	}
	if len(log) != total {
		t.Errorf("%d attempts logged, %d requests received", len(log), total)
	}
	t.Logf("%d messages, %d requests (%s)", n, total, fmt.Sprint(total-n, " retried"))
}
