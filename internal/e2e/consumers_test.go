package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// The promises of a consumer's limits across instances (docs/clients.md,
// Rate limits and quotas; docs/administrators.md, Consumers and plans):
// a consumer's rate limits and quota bind all its keys together, counted
// under the consumer's id as a key's are, so they hold over several keys
// spread over several instances as a key's hold over the instances.

// consumerKeys creates a consumer of body on the cluster's first
// instance and n contracts keys of it (trafficKey: each known to every
// instance, whose probes spent one request of each key on each
// instance). It returns the consumer's id and the keys.
func consumerKeys(t *testing.T, c *cluster, body map[string]any, n int) (string, []gatewayproc.Key) {
	t.Helper()
	var consumer struct {
		ID string `json:"id"`
	}
	if err := c.gws[0].AdminJSON("POST", "/webapi/consumers", body, &consumer); err != nil {
		t.Fatal(err)
	}
	keys := make([]gatewayproc.Key, n)
	for i := range keys {
		keys[i] = trafficKey(t, c, fmt.Sprintf("%s %d", body["name"], i+1), map[string]any{"consumerId": consumer.ID})
	}
	return consumer.ID, keys
}

func tokensOf(keys []gatewayproc.Key) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Token)
	}
	return out
}

// refusedAs is the violatedPolicies of a key-check refusal.
func refusedAs(t *testing.T, r crashReply) []string {
	t.Helper()
	var p struct {
		ViolatedPolicies []string `json:"violatedPolicies"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	return p.ViolatedPolicies
}

func TestConsumersAcrossInstances(t *testing.T) {
	c := startCluster(t, 3)

	t.Run("a consumer's rate limit over three keys, on one instance and spread", func(t *testing.T) {
		// The key test's measure (TestTrafficAcrossInstances): twice the
		// limit for 10 windows, each request with the next of the
		// consumer's three keys.
		const limit, rate, windows = 50, 100, 10
		for _, tc := range []struct {
			name   string
			gws    []*gatewayproc.Gateway
			margin float64
		}{
			{"one instance", c.gws[:1], 0.05},
			{"three instances", c.gws, 0.10},
		} {
			cid, keys := consumerKeys(t, c, map[string]any{"name": "rate " + tc.name,
				"rateLimits": []map[string]any{{"name": "second", "limit": limit, "windowSeconds": 1}}}, 3)
			time.Sleep(2 * time.Second) // the probes' windows have passed
			through, refused, steady := pacedKeys(t, tc.gws, tokensOf(keys), rate, windows*time.Second)
			want := float64(limit * windows)
			t.Logf("%s: %d of %d let through over %d keys (limit × windows = %.0f, ratio %.3f)", tc.name, through, through+refused, len(keys), want, float64(through)/want)
			checkLetThrough(t, tc.name, through, want, tc.margin, steady)
			// A refusal names the consumer's policy.
			r, err := crashDo("GET", tc.gws[0].Site+"/webapi/contracts/"+uuid.NewString(), keys[0].Token, nil)
			for i := 0; err == nil && r.status != http.StatusTooManyRequests && i < 2*limit; i++ {
				r, err = crashDo("GET", tc.gws[0].Site+"/webapi/contracts/"+uuid.NewString(), keys[i%len(keys)].Token, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := refusedAs(t, r); r.status != http.StatusTooManyRequests || !slices.Equal(got, []string{"consumer:second"}) {
				t.Errorf("consumer %s: a refusal %d naming %v, want 429 naming consumer:second", cid, r.status, got)
			}
		}
	})

	t.Run("a burst of a consumer's keys spread over three instances", func(t *testing.T) {
		// The key test's burst: shorter than the sync interval, from many
		// connections, over every instance and now every key of the
		// consumer: the instances together hold the limit (+ 10 %).
		const limit, window = 100, 10 * time.Second
		_, keys := consumerKeys(t, c, map[string]any{"name": "burst",
			"rateLimits": []map[string]any{{"name": "ten", "limit": limit, "windowSeconds": 10}}}, 3)
		probes := len(keys) * len(c.gws)
		time.Sleep(500 * time.Millisecond) // the probes' counts are shared
		// Within one fixed window, as the key test's burst.
		testwait.NextWindow(window, 200*time.Millisecond)
		start := time.Now()
		through, refused := letThroughKeys(t, c.gws, tokensOf(keys), 1500, 300)
		through += probes // counted as if in this window
		took := time.Since(start)
		t.Logf("burst over %d keys: %d let through (the %d probes included) in %s, refused %v", len(keys), through, probes, took.Round(time.Millisecond), refused)
		if took > window-200*time.Millisecond {
			t.Logf("the burst outlasted its window (a loaded machine): the limit is not checked")
			return
		}
		if through > limit*11/10 {
			t.Errorf("%d let through, want at most the limit %d + 10%%", through, limit)
		}
		if refused[http.StatusTooManyRequests] != 1500+probes-through {
			t.Errorf("refused %v, want every other request 429", refused)
		}
	})

	t.Run("a plan change holds on every instance within 1 s", func(t *testing.T) {
		var plan struct {
			ID string `json:"id"`
		}
		if err := c.gws[0].AdminJSON("POST", "/webapi/plans", map[string]any{"name": "silver",
			"rateLimits": []map[string]any{{"name": "plan-minute", "limit": 1000, "windowSeconds": 60}}}, &plan); err != nil {
			t.Fatal(err)
		}
		own := trafficKey(t, c, "of the plan", map[string]any{"planId": plan.ID})
		_, ofConsumer := consumerKeys(t, c, map[string]any{"name": "of the plan", "planId": plan.ID}, 1)
		header := func(g *gatewayproc.Gateway, token string) string {
			r, err := crashDo("GET", g.Site+"/webapi/contracts/"+uuid.NewString(), token, nil)
			if err != nil {
				t.Fatal(err)
			}
			return r.header.Get("RateLimit-Policy")
		}
		type probe struct {
			instance int
			token    string
			want     string
		}
		var probes []probe
		for i, g := range c.gws {
			for _, p := range []probe{
				{i, own.Token, `"plan-minute";q=1000;w=60`},
				{i, ofConsumer[0].Token, `"consumer:plan-minute";q=1000;w=60`},
			} {
				if got := header(g, p.token); got != p.want {
					t.Fatalf("instance %d before the change: RateLimit-Policy %q, want %q", i, got, p.want)
				}
				p.want = strings.Replace(p.want, "q=1000", "q=2000", 1)
				probes = append(probes, p)
			}
		}
		if err := c.gws[1].AdminJSON("PATCH", "/webapi/plans/"+plan.ID, map[string]any{
			"rateLimits": []map[string]any{{"name": "plan-minute", "limit": 2000, "windowSeconds": 60}}}, nil); err != nil {
			t.Fatal(err)
		}
		replied := time.Now()
		// Every instance, each key in turn, until each shows the new
		// limit. The change is committed before the PATCH's reply, so a
		// probe sent more than 1 s after that reply must see it; one sent
		// earlier may show the old limit, however late its answer comes
		// back (the server may have answered it at once).
		for _, p := range probes {
			what := "the plan's key"
			if p.token != own.Token {
				what = "the key of the plan's consumer"
			}
			seenWithin(t, replied, time.Second, fmt.Sprintf("instance %d, %s: %s", p.instance, what, p.want), func() bool {
				return header(c.gws[p.instance], p.token) == p.want
			})
		}
	})

	t.Run("deletes and references against another instance's memory", func(t *testing.T) {
		// A consumer whose key was created on another instance a moment
		// ago, before the deleting instance may have heard of it: the
		// database refuses (409 naming id), and the key goes on.
		var consumer struct {
			ID string `json:"id"`
		}
		if err := c.gws[0].AdminJSON("POST", "/webapi/consumers", map[string]any{"name": "holder"}, &consumer); err != nil {
			t.Fatal(err)
		}
		var plan struct {
			ID string `json:"id"`
		}
		if err := c.gws[0].AdminJSON("POST", "/webapi/plans", map[string]any{"name": "held",
			"rateLimits": []map[string]any{{"name": "held-minute", "limit": 100, "windowSeconds": 60}}}, &plan); err != nil {
			t.Fatal(err)
		}
		// The instance that creates the key checks the references in
		// its memory: wait until the two reach it.
		for _, g := range c.gws[1:] {
			testwait.For(t, testwait.Generous, "the consumer and plan on every instance", func() bool {
				return g.AdminJSON("GET", "/webapi/consumers/"+consumer.ID, nil, nil) == nil &&
					g.AdminJSON("GET", "/webapi/plans/"+plan.ID, nil, nil) == nil
			})
		}
		k, err := c.gws[1].CreateKey("contracts", "held", "o", []string{"get"}, map[string]any{"consumerId": consumer.ID, "planId": plan.ID})
		if err != nil {
			t.Fatal(err)
		}
		conflict := func(what string, err error) {
			t.Helper()
			var se *gatewayproc.StatusError
			if !errors.As(err, &se) || se.Status != http.StatusConflict || !strings.Contains(se.Body, `"field":"id"`) {
				t.Errorf("%s: %v, want 409 naming id", what, err)
			}
		}
		conflict("deleting the consumer on instance 2", c.gws[2].AdminJSON("DELETE", "/webapi/consumers/"+consumer.ID, nil, nil))
		conflict("deleting the plan on instance 2", c.gws[2].AdminJSON("DELETE", "/webapi/plans/"+plan.ID, nil, nil))
		for i, g := range c.gws {
			testwait.For(t, testwait.Generous, fmt.Sprintf("the key on instance %d", i), func() bool {
				return status(t, g, k.Token, "/webapi/contracts/"+uuid.NewString()) == http.StatusNotFound
			})
			if err := g.AdminJSON("GET", "/webapi/consumers/"+consumer.ID, nil, nil); err != nil {
				t.Errorf("instance %d: the consumer after the refused delete: %v", i, err)
			}
		}

		// A consumer deleted on one instance, and at once a key naming it
		// created on another, which may not have heard of the delete yet:
		// refused by its memory or by the database, 400 naming
		// consumerId either way, and nothing stored.
		var gone struct {
			ID string `json:"id"`
		}
		if err := c.gws[0].AdminJSON("POST", "/webapi/consumers", map[string]any{"name": "gone"}, &gone); err != nil {
			t.Fatal(err)
		}
		for _, g := range c.gws[1:] {
			testwait.For(t, testwait.Generous, "the consumer on every instance", func() bool {
				return g.AdminJSON("GET", "/webapi/consumers/"+gone.ID, nil, nil) == nil
			})
		}
		if err := c.gws[2].AdminJSON("DELETE", "/webapi/consumers/"+gone.ID, nil, nil); err != nil {
			t.Fatal(err)
		}
		_, err = c.gws[1].CreateKey("contracts", "orphan", "o", []string{"get"}, map[string]any{"consumerId": gone.ID})
		var se *gatewayproc.StatusError
		if !errors.As(err, &se) || se.Status != http.StatusBadRequest || !strings.Contains(se.Body, `"field":"consumerId"`) {
			t.Errorf("a key naming a consumer deleted on another instance: %v, want 400 naming consumerId", err)
		}
		if n := c.query(t, "SELECT count(*) FROM keygate.keys WHERE record->>'name' = 'orphan'"); n != 0 {
			t.Errorf("%d orphan keys stored", n)
		}
	})

	// Last: it kills an instance.
	t.Run("a consumer's quota over three keys and instances, one killed", func(t *testing.T) {
		const quota, sends, clients = 1000, 3000, 12
		cid, keys := consumerKeys(t, c, map[string]any{"name": "quota",
			"quota": map[string]any{"limit": quota, "period": "day"}}, 3)
		probes := len(keys) * len(c.gws) // each spent a unit of the consumer's quota
		// The kill comes when about half the quota is spent: every
		// instance has been busy, each holding a block of the consumer's
		// quota.
		const killAt = quota / 2
		through, cutOff, unreached, refused := floodKilling(t, c.gws, tokensOf(keys), sends, clients, 2, killAt)
		through += probes
		t.Logf("consumer quota %d over %d keys, instance 2 killed after %d of %d requests: %d let through (%d probes included), %d cut off by the kill, %d found it gone, refused %v",
			quota, len(keys), killAt, sends, through, probes, cutOff, unreached, refused)
		if through > quota {
			t.Errorf("%d let through, want at most the quota %d", through, quota)
		}
		// What the killed instance held is lost: its block (a hundredth)
		// and, when it had asked for the next with less than half of one
		// left, that remainder; the requests the kill cut off may have
		// spent theirs.
		block := int64(quota / 100)
		if lost := int64(quota - through - cutOff); lost > block+block/2 {
			t.Errorf("%d let through and %d cut off: %d lost, want at most the killed instance's holding (%d)", through, cutOff, lost, block+block/2)
		} else {
			t.Logf("lost with the killed instance: %d (a block is %d)", lost, block)
		}
		if n := refused[http.StatusTooManyRequests]; n != sends+probes-through-cutOff-unreached {
			t.Errorf("refused %v, want every other request 429", refused)
		}
		// The database holds what was leased, never more than the quota.
		if used := c.query(t, "SELECT coalesce(sum(used), 0)::bigint FROM keygate.key_quota WHERE key_id = $1", cid); used > quota || used < int64(through) {
			t.Errorf("key_quota.used of the consumer = %d, want %d to %d", used, through, quota)
		}
		var view struct {
			QuotaUsed *int64 `json:"quotaUsed"`
		}
		if err := c.gws[1].AdminJSON("GET", "/webapi/consumers/"+cid, nil, &view); err != nil {
			t.Fatal(err)
		}
		if view.QuotaUsed == nil || *view.QuotaUsed < int64(through) || *view.QuotaUsed > quota {
			t.Errorf("quotaUsed %v on a survivor, want %d to %d", view.QuotaUsed, through, quota)
		}
		// Every key of the consumer is refused on each survivor, naming
		// the consumer's quota.
		for i, g := range c.gws[:2] {
			for _, k := range keys {
				r, err := crashDo("GET", g.Site+"/webapi/contracts/"+uuid.NewString(), k.Token, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := refusedAs(t, r); r.status != http.StatusTooManyRequests || !slices.Equal(got, []string{"consumer:quota"}) {
					t.Errorf("instance %d, key %s after the quota: %d naming %v, want 429 naming consumer:quota", i, k.Name, r.status, got)
				}
			}
		}
	})
}

// floodKilling is letThroughKeys that kills gws[victim] with SIGKILL as
// the killAt-th request is taken, and sends the rest to the others only,
// as a load balancer does once an instance stops answering. It returns
// the requests let through, those cut off by the kill (sent to the
// victim before it was gone, no whole reply: each may have been let
// through and spent its unit), those that found it gone (connection
// refused: they reached nothing) and those refused by status.
func floodKilling(t *testing.T, gws []*gatewayproc.Gateway, tokens []string, n, clients, victim, killAt int) (through, cutOff, unreached int, refused map[int]int) {
	t.Helper()
	var survivors []*gatewayproc.Gateway
	for i, g := range gws {
		if i != victim {
			survivors = append(survivors, g)
		}
	}
	var next atomic.Int64
	var killed atomic.Bool
	var mu sync.Mutex
	refused = map[int]int{}
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if i == killAt {
					killed.Store(true)
					gws[victim].Kill()
				}
				g := gws[i%len(gws)]
				if killed.Load() {
					g = survivors[i%len(survivors)]
				}
				r, err := crashDo("GET", g.Site+"/webapi/contracts/"+uuid.NewString(), spreadToken(tokens, gws, i), nil)
				mu.Lock()
				switch {
				case errors.Is(err, syscall.ECONNREFUSED):
					unreached++
				case err != nil:
					cutOff++
				case byKeyCheck(r):
					refused[r.status]++
				default:
					through++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return through, cutOff, unreached, refused
}
