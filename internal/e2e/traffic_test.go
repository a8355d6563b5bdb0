package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// The promises of traffic control across instances (docs/clients.md, Rate
// limits and quotas), with real processes on one PostgreSQL.

// trafficKey creates a contracts key with extra (rateLimits, quota) on
// the cluster's first instance.
func trafficKey(t *testing.T, c *cluster, name string, extra map[string]any) gatewayproc.Key {
	t.Helper()
	k, err := c.gws[0].CreateKey("contracts", name, "traffic@example.com", []string{"get"}, extra)
	if err != nil {
		t.Fatal(err)
	}
	// Every instance knows the key within a second (NOTIFY). The tests of
	// that promise check it; here it is only what the next steps need.
	for _, g := range c.gws {
		testwait.For(t, testwait.Generous, "the key on every instance", func() bool {
			return status(t, g, k.Token, "/webapi/contracts/"+uuid.NewString()) != http.StatusUnauthorized
		})
	}
	return k
}

// letThrough sends n GETs of key token from clients connections, spread
// over gws in turn, and counts those the key check let through (the
// handler's 404 for an unknown contract) and those it refused by status.
func letThrough(t *testing.T, gws []*gatewayproc.Gateway, token string, n, clients int) (int, map[int]int) {
	t.Helper()
	return letThroughKeys(t, gws, []string{token}, n, clients)
}

// spreadToken is the token of the i-th request spread over gws: each
// token in turn once every instance had one, so that every key reaches
// every instance.
func spreadToken(tokens []string, gws []*gatewayproc.Gateway, i int) string {
	return tokens[(i/len(gws))%len(tokens)]
}

// letThroughKeys is letThrough with the tokens of several keys, each in
// turn on every instance (spreadToken).
func letThroughKeys(t *testing.T, gws []*gatewayproc.Gateway, tokens []string, n, clients int) (int, map[int]int) {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	refused := map[int]int{}
	through := 0
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				g := gws[int(i)%len(gws)]
				r, err := crashDo("GET", g.Site+"/webapi/contracts/"+uuid.NewString(), spreadToken(tokens, gws, int(i)), nil)
				mu.Lock()
				switch {
				case err != nil:
					refused[0]++
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
	return through, refused
}

// byKeyCheck tells a refusal of the key check from the API handler's
// reply (404 for the unknown contract, or 503 with the database away).
func byKeyCheck(r crashReply) bool {
	switch r.status {
	case http.StatusNotFound:
		return false
	case http.StatusServiceUnavailable:
		return strings.Contains(string(r.body), "quota cannot be checked")
	}
	return true
}

// paced sends GETs of token at rate per second for d, spread over gws in
// turn, and counts those let through. steady says whether the requests
// reached the gateway at the pace asked for (see pacedKeys).
func paced(t *testing.T, gws []*gatewayproc.Gateway, token string, rate int, d time.Duration) (through, refused int, steady bool) {
	t.Helper()
	return pacedKeys(t, gws, []string{token}, rate, d)
}

// pacedKeys is paced with the tokens of several keys, each in turn on
// every instance (spreadToken). The run is steady unless more than one
// request in a hundred was answered over 20 ms after its time: on a
// loaded machine requests reach the gateway in bunches, and a sliding
// window refuses a bunch's excess that an idle stretch after it cannot
// make up, so fewer are let through than the limit for reasons of the
// machine's. The answer's time is the measure, not the sending's: under
// load requests sent on time still arrive late (the client's transport
// and the gateway wait for a CPU). A gateway slow to answer on an idle
// machine would switch the lower bound off too; the log says so.
func pacedKeys(t *testing.T, gws []*gatewayproc.Gateway, tokens []string, rate int, d time.Duration) (through, refused int, steady bool) {
	t.Helper()
	// Start as a window (of whole seconds) starts: a run that began
	// within one would have a first window with nothing before it.
	testwait.NextWindow(time.Second, 0)
	interval := time.Second / time.Duration(rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	var in, out, late atomic.Int64
	first := time.Now().Add(interval)
	end := time.Now().Add(d)
	n := 0
	for ; time.Now().Before(end); n++ {
		<-tick.C
		g, token := gws[n%len(gws)], spreadToken(tokens, gws, n)
		due := first.Add(time.Duration(n) * interval)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := crashDo("GET", g.Site+"/webapi/contracts/"+uuid.NewString(), token, nil)
			if time.Since(due) > 20*time.Millisecond {
				late.Add(1)
			}
			switch {
			case err != nil:
				t.Error(err)
			case r.status == http.StatusNotFound:
				in.Add(1)
			case r.status == http.StatusTooManyRequests:
				out.Add(1)
			default:
				t.Errorf("status %d: %s", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	l := late.Load()
	t.Logf("%d of %d requests answered over 20 ms after their time", l, n)
	return int(in.Load()), int(out.Load()), l*100 <= int64(n)
}

// checkLetThrough judges through against want ± margin: never more, and,
// when the requests came at a steady pace, never less.
func checkLetThrough(t *testing.T, name string, through int, want, margin float64, steady bool) {
	t.Helper()
	switch r := float64(through) / want; {
	case r > 1+margin:
		t.Errorf("%s: %d let through, want at most %.0f + %.0f%%", name, through, want, margin*100)
	case r < 1-margin && steady:
		t.Errorf("%s: %d let through, want at least %.0f - %.0f%%", name, through, want, margin*100)
	case r < 1-margin:
		t.Logf("%s: %d let through at an unsteady pace (a loaded machine): the lower bound is not checked", name, through)
	}
}

func TestTrafficAcrossInstances(t *testing.T) {
	c := startCluster(t, 3)

	t.Run("quota of 1000 over three instances", func(t *testing.T) {
		k := trafficKey(t, c, "quota", map[string]any{"quota": map[string]any{"limit": 1000, "period": "day"}})
		// trafficKey's probes spent one unit on each instance.
		through, refused := letThrough(t, c.gws, k.Token, 3000, 12)
		through += len(c.gws)
		t.Logf("quota 1000: %d let through, refused %v", through, refused)
		if through > 1000 || through < 990 {
			t.Errorf("%d let through, want 990 to 1000", through)
		}
		if refused[http.StatusTooManyRequests] != 3000+len(c.gws)-through {
			t.Errorf("refused %v, want every other request 429", refused)
		}
		// The database holds what was leased; an instance that did not
		// serve the key shows it.
		if used := c.query(t, "SELECT sum(used)::bigint FROM keygate.key_quota WHERE key_id = $1", k.ID); used > 1000 || used < int64(through) {
			t.Errorf("key_quota.used = %d, want %d to 1000", used, through)
		}
		var view struct {
			QuotaUsed     *int64     `json:"quotaUsed"`
			QuotaResetsAt *time.Time `json:"quotaResetsAt"`
		}
		if err := c.gws[2].AdminJSON("GET", "/webapi/keys/"+k.ID, nil, &view); err != nil {
			t.Fatal(err)
		}
		if view.QuotaUsed == nil || *view.QuotaUsed < int64(through) || *view.QuotaUsed > 1000 || view.QuotaResetsAt == nil {
			t.Errorf("quotaUsed %v quotaResetsAt %v, want %d to 1000 and the next midnight", view.QuotaUsed, view.QuotaResetsAt, through)
		}
	})

	t.Run("rate limit held on one instance and spread", func(t *testing.T) {
		const limit, rate, windows = 50, 100, 10
		for _, tc := range []struct {
			name   string
			gws    []*gatewayproc.Gateway
			margin float64
		}{
			{"one instance", c.gws[:1], 0.05},
			{"three instances", c.gws, 0.10},
		} {
			k := trafficKey(t, c, "rate "+tc.name, map[string]any{"rateLimits": []map[string]any{{"name": "second", "limit": limit, "windowSeconds": 1}}})
			time.Sleep(2 * time.Second) // the probes' windows have passed
			through, refused, steady := paced(t, tc.gws, k.Token, rate, windows*time.Second)
			want := float64(limit * windows)
			t.Logf("%s: %d of %d let through (limit × windows = %.0f, ratio %.3f)", tc.name, through, through+refused, want, float64(through)/want)
			checkLetThrough(t, tc.name, through, want, tc.margin, steady)
		}
	})

	t.Run("burst spread over three instances", func(t *testing.T) {
		// A burst much shorter than the sync interval, from many
		// connections, over every instance: each spends only what it
		// claimed, so together they hold the limit (+ 10 %).
		const limit, window = 100, 10 * time.Second
		k := trafficKey(t, c, "burst", map[string]any{"rateLimits": []map[string]any{{"name": "ten", "limit": limit, "windowSeconds": 10}}})
		time.Sleep(500 * time.Millisecond) // the probes' counts are shared
		// The burst begins as a fixed window does, so that it lies within
		// one: across a window's end the two-window estimate lets
		// through up to limit × (the part of the new window passed)
		// more, as documented, which is not what is measured here.
		testwait.NextWindow(window, 200*time.Millisecond)
		start := time.Now()
		through, refused := letThrough(t, c.gws, k.Token, 1500, 300)
		through += len(c.gws) // trafficKey's probes
		took := time.Since(start)
		t.Logf("burst: %d let through in %s, refused %v", through, took.Round(time.Millisecond), refused)
		if took > window-200*time.Millisecond {
			t.Logf("the burst outlasted its window (a loaded machine): the limit is not checked")
			return
		}
		if through > limit*11/10 {
			t.Errorf("%d let through, want at most the limit %d + 10%%", through, limit)
		}
		if refused[http.StatusTooManyRequests] != 1500+len(c.gws)-through {
			t.Errorf("refused %v, want every other request 429", refused)
		}
	})

	t.Run("database outage", func(t *testing.T) {
		rl := trafficKey(t, c, "outage rate", map[string]any{"rateLimits": []map[string]any{{"name": "minute", "limit": 5, "windowSeconds": 60}}})
		probed := time.Now()
		q := trafficKey(t, c, "outage quota", map[string]any{"quota": map[string]any{"limit": 100000, "period": "month"}})
		// The quota key's block on the first instance: 1000 units, of
		// which the probe spent one (leased by the probe itself). The
		// rate-limited key's probes (one on each instance) reach every
		// instance by sync: each instance sends its probe with its first
		// sync begun after the probe, and reads the others' with a sync
		// begun after they are all stored. An instance marks every sync
		// in rate_instances with the time it began (unix ms), as the sync
		// commits.
		syncedSince := func(what string, since time.Time) {
			t.Helper()
			after := since.UnixMilli() + 1 // begun after since, not in its millisecond
			testwait.For(t, testwait.Generous, what, func() bool {
				return c.query(t, "SELECT count(*) FROM keygate.rate_instances WHERE seen_at >= $1", after) >= int64(len(c.gws))
			})
		}
		syncedSince("every instance's probe shared", probed)
		// Two rounds more: every instance has read all the probes, and the
		// claims made from them settle.
		for round := range 2 {
			syncedSince(fmt.Sprintf("every instance synced again (%d)", round+1), time.Now())
		}
		if err := c.pg.Halt(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := c.pg.Resume(); err != nil {
				t.Fatal(err)
			}
		}()
		// Rate limits go on from memory, and still hold across the
		// instances that cannot reach each other: the three probes took
		// three of the 5, and the instances together let through no more
		// than the 2 left (each its whole share of them), then 429.
		through, refused := letThrough(t, c.gws, rl.Token, 30, 1)
		if through > 2 || refused[http.StatusTooManyRequests] != 30-through {
			t.Errorf("rate-limited key with the database away: %d let through, refused %v; want at most the 2 left, then 429", through, refused)
		}
		// The quota key spends its block, then 503: never overspent.
		through, refused = letThrough(t, c.gws[:1], q.Token, 1100, 4)
		t.Logf("quota key with the database away: %d let through, refused %v", through, refused)
		if through != 999 || refused[http.StatusServiceUnavailable] != 101 {
			t.Errorf("%d let through, refused %v; want the block's 999, then 503", through, refused)
		}
	})
}

// TestQuotaCrash: an instance killed while it holds a quota block loses
// at most that block; a clean stop gives its block back.
func TestQuotaCrash(t *testing.T) {
	c := startCluster(t, 2)
	k := trafficKey(t, c, "crash", map[string]any{"quota": map[string]any{"limit": 500, "period": "hour"}})
	// Each instance holds a block of 5 (a hundredth), of which the probe
	// spent one.
	c.gws[1].Kill()
	through, refused := letThrough(t, c.gws[:1], k.Token, 600, 4)
	through += 2 // the probes
	t.Logf("after a crash: %d let through, refused %v", through, refused)
	if through > 500 || through < 496 {
		t.Errorf("%d let through after one instance with a block of 5 crashed, want 496 to 500", through)
	}
	// A clean stop gives the unspent block back.
	if err := c.gws[1].Launch(); err != nil {
		t.Fatal(err)
	}
	if err := c.gws[1].WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	k2 := trafficKey(t, c, "clean stop", map[string]any{"quota": map[string]any{"limit": 500, "period": "hour"}})
	if err := c.gws[1].Stop(); err != nil {
		t.Fatal(err)
	}
	through, _ = letThrough(t, c.gws[:1], k2.Token, 600, 4)
	through += 2
	if through != 500 {
		t.Errorf("%d let through after a clean stop, want all 500", through)
	}
	if err := c.gws[1].Launch(); err != nil {
		t.Fatal(fmt.Errorf("relaunching for the cleanup: %w", err))
	}
}

// TestAuditAtStop: the audit entries of the last requests before a clean
// stop reach the file, buffered_file's included (Caddy does not close log
// writers at exit), and so do the rate-limit refusals that the
// once-a-second entry did not stand for yet.
func TestAuditAtStop(t *testing.T) {
	for _, output := range []string{"buffered_file", "file"} {
		t.Run(output, func(t *testing.T) {
			dir := t.TempDir()
			g := start(t, gatewayproc.Options{Dir: dir, AuditOutput: output})
			k, err := g.CreateKey("contracts", "stop", "o", []string{"get"}, map[string]any{
				"rateLimits": []map[string]any{{"name": "minute", "limit": 1, "windowSeconds": 60}}})
			if err != nil {
				t.Fatal(err)
			}
			statuses := ""
			for range 4 {
				statuses += fmt.Sprint(status(t, g, k.Token, "/webapi/contracts/"+uuid.NewString()), " ")
			}
			if statuses != "404 429 429 429 " {
				t.Fatalf("statuses %s", statuses)
			}
			if err := g.Stop(); err != nil { // at once: the entries are still in memory
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "audit.log"))
			if err != nil {
				t.Fatal(err)
			}
			log := string(b)
			refusals := 0
			for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
				var e struct {
					Msg      string `json:"msg"`
					Reason   string `json:"reason"`
					Refusals int    `json:"refusals"`
				}
				if json.Unmarshal([]byte(line), &e) == nil && e.Reason == "rate_limited" {
					refusals += e.Refusals
				}
			}
			if !strings.Contains(log, `"msg":"key created"`) || !strings.Contains(log, `"msg":"key used"`) || refusals != 3 {
				t.Errorf("after a clean stop the audit log holds %d of the 3 refusals, and:\n%s", refusals, log)
			}
		})
	}
}
