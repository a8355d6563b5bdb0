package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// hookReceiver is a webhook endpoint of the instance tests: it verifies
// each request with its subscription's secret, answers every failEvery-th
// request 503 (so that message is retried, by any instance) and the
// others 204, and keeps, per webhook-id, the requests, the 2xx answers and
// the body.
type hookReceiver struct {
	srv       *httptest.Server
	failEvery int
	subID     string

	mu        sync.Mutex
	secret    string
	total     int
	requests  map[string]int
	successes map[string]int
	bodies    map[string][]byte
	problems  []string
}

func newHookReceiver(t *testing.T, failEvery int) *hookReceiver {
	h := &hookReceiver{failEvery: failEvery, requests: map[string]int{}, successes: map[string]int{}, bodies: map[string][]byte{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		wh, _ := standardwebhooks.NewWebhook(h.secret)
		if err := wh.Verify(body, r.Header); err != nil {
			h.problems = append(h.problems, fmt.Sprintf("a delivery does not verify: %v", err))
		}
		id := r.Header.Get("webhook-id")
		h.requests[id]++
		h.bodies[id] = body
		h.total++
		if h.total%h.failEvery == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		h.successes[id]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// subscribe subscribes the receiver to events through gw.
func (h *hookReceiver) subscribe(t *testing.T, gw *gatewayproc.Gateway, events ...string) {
	t.Helper()
	var sub struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := gw.AdminJSON("POST", "/webapi/webhooks", map[string]any{"url": h.srv.URL + "/hooks", "events": events}, &sub); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.secret, h.subID = sub.Secret, sub.ID
	h.mu.Unlock()
}

// check reports what failed to verify, and that the delivery log, read
// through gw, holds every attempt once. The caller holds h.mu.
func (h *hookReceiver) check(t *testing.T, gw *gatewayproc.Gateway) {
	t.Helper()
	for _, p := range h.problems {
		t.Error(p)
	}
	var log []struct {
		MessageID string `json:"messageId"`
		Status    int    `json:"status"`
	}
	if err := gw.AdminJSON("GET", "/webapi/webhooks/"+h.subID+"/deliveries?limit=1000", nil, &log); err != nil {
		t.Fatal(err)
	}
	if len(log) != h.total {
		t.Errorf("%d attempts logged, %d requests received", len(log), h.total)
	}
}

// TestSeveralInstancesWebhooks: three gateways on one PostgreSQL database
// deliver each webhook message exactly once, whichever instance queued it
// and whichever takes it, retries included (clients.md, Webhooks;
// docs/operators.md, Several instances on one database).
func TestSeveralInstancesWebhooks(t *testing.T) {
	c := startCluster(t, 3)
	recv := newHookReceiver(t, 7)
	recv.subscribe(t, c.gws[0], "contract.signed")

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
			if err := c.gws[i%3].AdminJSON("POST", "/webapi/webhooks/"+recv.subID+"/test", nil, &out); err != nil {
				t.Error(err)
			}
			ids[i] = out.MessageID
		}()
	}
	wg.Wait()
	testwait.For(t, testwait.Generous, "every message delivered", func() bool {
		return c.query(t, "SELECT count(*) FROM keygate.webhook_deliveries") == 0
	})
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for i, id := range ids {
		if recv.successes[id] != 1 {
			t.Errorf("message %d (%s): %d successful deliveries, %d requests", i, id, recv.successes[id], recv.requests[id])
		}
	}
	if len(recv.requests) != n {
		t.Errorf("%d message ids received, want %d", len(recv.requests), n)
	}
	// Read through another instance than the one that took it.
	recv.check(t, c.gws[2])
	t.Logf("%d messages, %d requests (%d retried)", n, recv.total, recv.total-n)
}

// TestSeveralInstancesContractEvents: contracts created through three
// gateways on one PostgreSQL database each give one contract.created
// message, delivered once in all, whichever instance wrote the event,
// fanned it out or made each attempt, retries included (clients.md,
// Webhooks; docs/operators.md, Several instances on one database).
func TestSeveralInstancesContractEvents(t *testing.T) {
	c := startCluster(t, 3)
	if err := c.gws[0].AddTemplate("PAGE-1", "LEGAL", "NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	key := clusterKey(t, c, "events", "get", "create")
	recv := newHookReceiver(t, 5)
	recv.subscribe(t, c.gws[1], "contract.created")

	const n = 30
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := crashDo("POST", c.gws[i%3].Site+"/webapi/contracts", key, contractBody(fmt.Sprintf("Across %d", i), "", ""))
			if err != nil || r.status != http.StatusCreated {
				t.Errorf("create %d on instance %d: %v %d %s", i, i%3, err, r.status, r.body)
				return
			}
			var out struct{ ID string }
			json.Unmarshal(r.body, &out)
			ids[i] = out.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	testwait.For(t, testwait.Generous, "every event fanned out and delivered", func() bool {
		return c.query(t, "SELECT count(*) FROM keygate.webhook_events") == 0 &&
			c.query(t, "SELECT count(*) FROM keygate.webhook_deliveries") == 0
	})

	recv.mu.Lock()
	defer recv.mu.Unlock()
	messages := map[string]map[string]bool{} // contract id → webhook-ids
	for m, body := range recv.bodies {
		var e struct {
			Type string
			Data struct{ ID string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Type != "contract.created" || e.Data.ID == "" {
			t.Errorf("body %s", body)
		}
		if messages[e.Data.ID] == nil {
			messages[e.Data.ID] = map[string]bool{}
		}
		messages[e.Data.ID][m] = true
	}
	for i, id := range ids {
		msgs := messages[id]
		if len(msgs) != 1 {
			t.Errorf("contract %d (%s): %d messages, want 1", i, id, len(msgs))
		}
		for m := range msgs {
			if recv.successes[m] != 1 {
				t.Errorf("contract %d (%s): message %s delivered %d times", i, id, m, recv.successes[m])
			}
		}
	}
	if len(messages) != n {
		t.Errorf("messages for %d contracts, want %d", len(messages), n)
	}
	// Read through the instance that did not take the subscription.
	recv.check(t, c.gws[2])
	t.Logf("%d contracts on 3 instances, %d requests (%d retried)", n, recv.total, recv.total-n)
}
