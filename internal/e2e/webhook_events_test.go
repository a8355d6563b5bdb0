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

	"github.com/keygate/keygate/internal/testwait"
)

// TestSeveralInstancesContractEvents: contracts created through three
// gateways on one PostgreSQL database each give one contract.created
// message, delivered once in all, whichever instance wrote the event,
// fanned it out or made each attempt, retries included (clients.md,
// Webhooks; storage.md, Several instances on one database).
func TestSeveralInstancesContractEvents(t *testing.T) {
	c := startCluster(t, 3)
	if err := c.gws[0].AddTemplate("PAGE-1", "LEGAL", "NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	key := clusterKey(t, c, "events", "get", "create")

	var mu sync.Mutex
	messages := map[string]map[string]bool{} // contract id → webhook-ids
	successes := map[string]int{}            // webhook-id → 2xx answers
	total := 0
	var problems []string
	var secret string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		wh, _ := standardwebhooks.NewWebhook(secret)
		if err := wh.Verify(body, r.Header); err != nil {
			problems = append(problems, fmt.Sprintf("does not verify: %v", err))
		}
		var e struct {
			Type string
			Data struct{ ID string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Type != "contract.created" || e.Data.ID == "" {
			problems = append(problems, fmt.Sprintf("body %s", body))
		}
		id := r.Header.Get("webhook-id")
		if messages[e.Data.ID] == nil {
			messages[e.Data.ID] = map[string]bool{}
		}
		messages[e.Data.ID][id] = true
		total++
		// Every fifth request fails: its message is retried, by any
		// instance.
		if total%5 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		successes[id]++
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(recv.Close)

	var sub struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := c.gws[1].AdminJSON("POST", "/webapi/webhooks", map[string]any{"url": recv.URL + "/hooks",
		"events": []string{"contract.created"}}, &sub); err != nil {
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

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	for i, id := range ids {
		msgs := messages[id]
		if len(msgs) != 1 {
			t.Errorf("contract %d (%s): %d messages, want 1", i, id, len(msgs))
		}
		for m := range msgs {
			if successes[m] != 1 {
				t.Errorf("contract %d (%s): message %s delivered %d times", i, id, m, successes[m])
			}
		}
	}
	if len(messages) != n {
		t.Errorf("messages for %d contracts, want %d", len(messages), n)
	}
	// The log, read through the instance that did not take the
	// subscription, holds every attempt once.
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
	t.Logf("%d contracts on 3 instances, %d requests (%d retried)", n, total, total-n)
}
