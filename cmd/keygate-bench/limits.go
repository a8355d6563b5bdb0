package main

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/token"
)

// The figures of rate limits and quotas: what a key's policies cost a
// request (a), what a rate-limited flood of one key costs another key's
// requests (b), and with several instances on one database, how closely
// they hold a limit and a quota between them (c, accuracy, which
// runInstances runs).

const (
	// floodLimit is the noisy neighbour's limit, per second.
	floodLimit = 50
	// floodClients and neighbourClients are the connections of the flood
	// and of the key that reads beside it.
	floodClients, neighbourClients = 64, 8
)

// policy is one rate-limit policy as the admin API takes it.
func policy(name string, limit, windowSeconds int64) map[string]any {
	return map[string]any{"name": name, "limit": limit, "windowSeconds": windowSeconds}
}

// createKey creates a contracts key through g's admin endpoint, with
// extra attributes (rateLimits, quota), and returns it.
func (g *gatewayProc) createKey(name string, privileges []string, extra map[string]any) (id, token string) {
	k, err := g.CreateKey(string(access.ServiceContracts), name, "user-00", privileges, extra)
	if err != nil {
		fatalf("creating key %s: %v", name, err)
	}
	return k.ID, k.Token
}

// authRespondWith is authRespond with another key's token.
func (g *gatewayProc) authRespondWith(name, token string) loadSpec {
	req := newRequest("GET", g.authAddr, "/webapi/contracts/00000000-0000-4000-8000-000000000000", auth(token), nil, 200)
	return loadSpec{name: name, addr: g.authAddr, next: func(int, int) request { return req }}
}

// limitedAuth is figure (a): webapi_auth + respond with a key of two
// policies and a quota, none of which ever refuses, against the same
// request with the key without any (the one authRespond sends).
func (g *gatewayProc) limitedAuth(d *dataset) float64 {
	_, token := g.createKey("bench-limited", []string{"get"}, map[string]any{
		"rateLimits": []any{policy("burst", 1e9, 1), policy("minute", 1e9, 60)},
		"quota":      map[string]any{"limit": 1e12, "period": "month"},
	})
	return g.compareFor(*authRounds, *authFor, "key without policies (a)", g.authRespond(d),
		"2 policies + quota (b)", g.authRespondWith("auth-limited", token))
}

// scopedAuth is figure (a) with every scope a key can be counted in:
// webapi_auth + respond with a key of a policy of its own, of a plan with
// a policy, and of a consumer with a policy and a quota (the consumer's
// meter spent beside the key's on every request), none of which ever
// refuses, against the same request with the key without any (the one
// authRespond sends).
func (g *gatewayProc) scopedAuth(d *dataset) float64 {
	var plan, consumer struct {
		ID string `json:"id"`
	}
	if err := g.AdminJSON("POST", "/webapi/plans", map[string]any{"name": "bench-plan",
		"rateLimits": []any{policy("plan-second", 1e9, 1)}}, &plan); err != nil {
		fatalf("creating the plan: %v", err)
	}
	if err := g.AdminJSON("POST", "/webapi/consumers", map[string]any{"name": "bench-consumer",
		"rateLimits": []any{policy("minute", 1e9, 60)},
		"quota":      map[string]any{"limit": 1e12, "period": "month"}}, &consumer); err != nil {
		fatalf("creating the consumer: %v", err)
	}
	_, token := g.createKey("bench-scoped", []string{"get"}, map[string]any{
		"rateLimits": []any{policy("own", 1e9, 60)},
		"planId":     plan.ID,
		"consumerId": consumer.ID,
	})
	return g.compareFor(*authRounds, *authFor, "key without policies (a)", g.authRespond(d),
		"own + plan + consumer (b)", g.authRespondWith("auth-scopes", token))
}

// neighbour is figure (b): a key limited to floodLimit a second floods
// contract creates from floodClients connections while the bench's
// contracts key reads one contract from neighbourClients; the same flood
// with an unknown key (401 each) is the baseline. It returns the flood's
// creates let through per second over all rounds and the median ratio of
// the reader's throughput, limited flood / unknown-key flood. The
// limited flood's creates are real ones (a durable write, an invitation
// mail each): part of what it costs the reader.
//
// refusalRatio isolates what the figure's goal is about, a rate-limit
// refusal against a bad-key refusal: the reader beside a flood whose key
// is over its limit for the whole run (every request 429, no create)
// against the unknown-key flood.
func (g *gatewayProc) neighbour(d *dataset) (createsPerSec, ratio, refusalRatio float64) {
	h := auth(token.New()) // well formed, in no store: looked up and refused
	h.Set("Content-Type", "application/json")
	unknown := newRequest("POST", g.apiAddr, "/webapi/contracts", h, contractBody(d.templates[0], 1), 401)
	reader := g.getContract(d)

	// run floods with req from floodClients connections while the reader
	// reads, from the start of a second: the limiter's windows are
	// aligned to the clock, and a key's first window lets its whole limit
	// through at once (the creates per second count from that window's
	// start).
	run := func(name string, flood request) (floodRes, readRes result) {
		alignTo(time.Second)
		if *profile != "" && name == *profileOf {
			done := g.captureProfile(*profile, *runFor)
			defer func() { <-done; *profile = "" }()
		}
		cpu0 := g.cpuTime()
		defer func() { floodRes.cpu = g.cpuTime() - cpu0 }()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			floodRes, err = load(g.apiAddr, floodClients, *runFor, false, func(int, int) request { return flood })
			if err != nil && floodRes.failures == 0 {
				fatalf("flood: %v", err)
			}
		}()
		var err error
		readRes, err = load(reader.addr, neighbourClients, *runFor, false, reader.next)
		wg.Wait()
		if err != nil || readRes.failures > 0 {
			fatalf("reader: %d unexpected statuses, %v", readRes.failures, err)
		}
		if floodRes.failures > 0 {
			fatalf("flood: %d unexpected statuses", floodRes.failures)
		}
		return floodRes, readRes
	}

	var ratios, refusalRatios []float64
	var created int64
	var windows time.Duration
	for i := 0; i < *rounds; i++ {
		// A key of its own each round: a round starts with no count.
		_, token := g.createKey(fmt.Sprintf("bench-flood-%d", i+1), []string{"create"}, map[string]any{
			"rateLimits": []any{policy("flood", floodLimit, 1)},
		})
		h := auth(token)
		h.Set("Content-Type", "application/json")
		limited := newRequest("POST", g.apiAddr, "/webapi/contracts", h, contractBody(d.templates[0], 1), 201)
		limited.alt = 429

		// A key over its limit all along: one create a day, spent first.
		_, spentToken := g.createKey(fmt.Sprintf("bench-spent-%d", i+1), []string{"create"}, map[string]any{
			"rateLimits": []any{policy("day", 1, 86400)},
		})
		sh := auth(spentToken)
		sh.Set("Content-Type", "application/json")
		first := newRequest("POST", g.apiAddr, "/webapi/contracts", sh, contractBody(d.templates[0], 1), 201)
		c, err := dial(g.apiAddr)
		if err != nil {
			fatalf("spending the refused flood's limit: %v", err)
		}
		if status, err := c.do(first); err != nil || status != 201 {
			fatalf("spending the refused flood's limit: %d %v", status, err)
		}
		c.c.Close()
		refused := newRequest("POST", g.apiAddr, "/webapi/contracts", sh, contractBody(d.templates[0], 1), 429)

		uf, ur := run("flood-unknown", unknown)
		lf, lr := run("flood-limited", limited)
		rf, rr := run("flood-refused", refused)
		r := lr.rps() / ur.rps()
		ratios = append(ratios, r)
		refusalRatios = append(refusalRatios, rr.rps()/ur.rps())
		created += lf.requests
		// From the start of the window the flood began in: a key's first
		// window lets its whole limit through, however late in it the
		// first request comes.
		windows += lf.start.Add(lf.elapsed).Sub(lf.start.Truncate(time.Second))
		// The gateway's CPU per request of the flood and the reader.
		ucpu := float64(uf.cpu.Microseconds()) / float64(uf.requests+ur.requests)
		lcpu := float64(lf.cpu.Microseconds()) / float64(lf.requests+lf.alts+lr.requests)
		rcpu := float64(rf.cpu.Microseconds()) / float64(rf.requests+rr.requests)
		fmt.Printf("  round %d: B beside unknown-key flood %6.0f req/s (flood %6.0f 401/s, %4.1f µs/req)   beside limited flood %6.0f req/s (flood %3.0f 201/s + %6.0f 429/s, %4.1f µs/req)   ratio %.3f   beside an all-429 flood %6.0f req/s (%4.1f µs/req)   ratio %.3f\n",
			i+1, ur.rps(), uf.rps(), ucpu, lr.rps(), lf.rps(), float64(lf.alts)/lf.elapsed.Seconds(), lcpu, r, rr.rps(), rcpu, rr.rps()/ur.rps())
	}
	return float64(created) / windows.Seconds(), median(ratios), median(refusalRatios)
}

// alignTo sleeps until the clock is at a whole multiple of w.
func alignTo(w time.Duration) {
	now := time.Now()
	time.Sleep(now.Truncate(w).Add(w).Sub(now))
}

// pacedResult counts the answers of a paced run.
type pacedResult struct {
	ok, limited int // 200s and 429s
}

// paced sends n copies of the request reqs[i%len(reqs)] gives (one per
// target, each on its own connections), the i-th at start + i/rate,
// from the next whole multiple of align on. Only 200 and 429 are
// expected; anything else ends the bench. A request waits for a free
// connection when all of its target's are busy, and goes as soon as one
// is: the pace is held as long as the gateway keeps up.
func paced(reqs []targetReq, rate float64, n int, align time.Duration) pacedResult {
	const connsPerTarget = 8
	queues := make([]chan request, len(reqs))
	answers := make(chan int, n)
	var wg sync.WaitGroup
	for t, r := range reqs {
		queues[t] = make(chan request, n)
		for c := 0; c < connsPerTarget; c++ {
			conn, err := dial(r.addr)
			if err != nil {
				fatalf("paced: %v", err)
			}
			wg.Add(1)
			go func(q <-chan request) {
				defer wg.Done()
				defer conn.c.Close()
				for req := range q {
					status, err := conn.do(req)
					if err != nil {
						fatalf("paced: %v", err)
					}
					answers <- status
				}
			}(queues[t])
		}
	}
	alignTo(align)
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; i < n; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		t := i % len(reqs)
		queues[t] <- reqs[t].req
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	close(answers)
	var res pacedResult
	for status := range answers {
		switch status {
		case 200:
			res.ok++
		case 429:
			res.limited++
		default:
			fatalf("paced: status %d, want 200 or 429", status)
		}
	}
	return res
}

// targetReq is one request and the address it goes to.
type targetReq struct {
	addr string
	req  request
}

const (
	// accLimit per accWindow is the limit of the accuracy figures, sent
	// at twice the limit for accWindows windows.
	accLimit   = 100
	accWindow  = time.Second
	accWindows = 10
	// accQuota is the quota of the quota figure, sent accQuotaSends
	// requests at accQuotaRate a second.
	accQuota      = 1000
	accQuotaSends = 3000
	accQuotaRate  = 600
)

// accuracy is figure (c), for several instances on one database: how
// closely they hold a key's rate limit between them, sent all to one
// and spread evenly over all, and a quota spread over all. Each run has
// a key of its own, created on the first instance and used once every
// instance knows it.
func accuracy(gws []*gatewayProc) {
	n := len(gws)
	fmt.Printf("rate-limit accuracy: a key of %d per %s, sent at %d/s for %d windows from a window's start, %d rounds\n",
		accLimit, accWindow, 2*accLimit*int(time.Second/accWindow), accWindows, *rounds)
	sends := 2 * accLimit * accWindows
	rate := float64(2*accLimit) / accWindow.Seconds()
	want := float64(accLimit * accWindows)
	var one, all []float64
	for round := 1; round <= *rounds; round++ {
		token := newKeyOn(gws, fmt.Sprintf("bench-rate-one-%d", round), map[string]any{
			"rateLimits": []any{policy("acc", accLimit, int64(accWindow/time.Second))},
		})
		r1 := paced([]targetReq{{gws[0].authAddr, gws[0].authRespondWith("", token).next(0, 0)}}, rate, sends, accWindow)
		token = newKeyOn(gws, fmt.Sprintf("bench-rate-all-%d", round), map[string]any{
			"rateLimits": []any{policy("acc", accLimit, int64(accWindow/time.Second))},
		})
		var targets []targetReq
		for _, g := range gws {
			targets = append(targets, targetReq{g.authAddr, g.authRespondWith("", token).next(0, 0)})
		}
		rn := paced(targets, rate, sends, accWindow)
		one = append(one, float64(r1.ok)/want)
		all = append(all, float64(rn.ok)/want)
		fmt.Printf("  round %d: one instance %5d let through of %d (%.3f)   spread over %d: %5d (%.3f)\n",
			round, r1.ok, sends, float64(r1.ok)/want, n, rn.ok, float64(rn.ok)/want)
	}
	fmt.Printf("rate limit, one instance:    let through / (L x %d) = %.3f   (goal 1 +- 0.05)\n", accWindows, median(one))
	fmt.Printf("rate limit, spread over %d:   let through / (L x %d) = %.3f   (goal 1 +- 0.10)\n", n, accWindows, median(all))

	fmt.Printf("burst: a key of %d per %ds, %d requests at once from %d connections spread over %d instances, %d rounds\n",
		burstLimit, burstWindow, burstSends, burstConns, n, *rounds)
	var bursts []float64
	for round := 1; round <= *rounds; round++ {
		token := newKeyOn(gws, fmt.Sprintf("bench-burst-%d", round), map[string]any{
			"rateLimits": []any{policy("burst", burstLimit, burstWindow)},
		})
		// The instances have synced since the key came: each knows it.
		time.Sleep(500 * time.Millisecond)
		ok, took := burst(gws, token)
		bursts = append(bursts, float64(ok)/burstLimit)
		fmt.Printf("  round %d: %d let through of %d in %s (%.3f)\n", round, ok, burstSends, took.Round(time.Millisecond), float64(ok)/burstLimit)
	}
	sort.Float64s(bursts)
	fmt.Printf("burst, spread over %d:        let through / L = %.3f (most %.3f)   (goal <= 1.10)\n", n, median(bursts), bursts[len(bursts)-1])

	fmt.Printf("quota accuracy: a key with a quota of %d a month, %d requests at %d/s spread over %d instances\n", accQuota, accQuotaSends, accQuotaRate, n)
	var got []float64
	for round := 1; round <= *rounds; round++ {
		token := newKeyOn(gws, fmt.Sprintf("bench-quota-%d", round), map[string]any{
			"quota": map[string]any{"limit": accQuota, "period": "month"},
		})
		var targets []targetReq
		for _, g := range gws {
			targets = append(targets, targetReq{g.authAddr, g.authRespondWith("", token).next(0, 0)})
		}
		r := paced(targets, accQuotaRate, accQuotaSends, time.Millisecond)
		got = append(got, float64(r.ok))
		fmt.Printf("  round %d: let through %d of %d\n", round, r.ok, accQuotaSends)
	}
	sort.Float64s(got)
	fmt.Printf("quota, spread over %d:        let through %.0f (fewest %.0f, most %.0f)   (goal <= %d and >= %d)\n",
		n, median(got), got[0], got[len(got)-1], accQuota, accQuota-accQuota/100)
}

const (
	// burstLimit per burstWindow seconds is the burst figure's limit,
	// burstSends requests sent at once from burstConns connections.
	burstLimit  = 100
	burstWindow = 10
	burstSends  = 1500
	burstConns  = 300
)

// burst sends burstSends requests of token at once, from burstConns
// connections spread over gws in turn, each sending as soon as its
// previous answer came, and returns how many were let through and how
// long the burst took.
func burst(gws []*gatewayProc, token string) (int, time.Duration) {
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	conns := make([]*conn, burstConns)
	reqs := make([]request, burstConns)
	for i := range conns {
		g := gws[i%len(gws)]
		c, err := dial(g.authAddr)
		if err != nil {
			fatalf("burst: %v", err)
		}
		conns[i], reqs[i] = c, g.authRespondWith("", token).next(0, 0)
	}
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.c.Close()
			for next.Add(1) <= burstSends {
				status, err := c.do(reqs[i])
				switch {
				case err != nil:
					fatalf("burst: %v", err)
				case status == 200:
					ok.Add(1)
				case status != 429:
					fatalf("burst: status %d, want 200 or 429", status)
				}
			}
		}()
	}
	wg.Wait()
	return int(ok.Load()), time.Since(start)
}

// newKeyOn creates a contracts key with extra attributes on the first of
// gws and waits until every one of them knows it; it returns the token.
func newKeyOn(gws []*gatewayProc, name string, extra map[string]any) string {
	id, token := gws[0].createKey(name, []string{"get"}, extra)
	deadline := time.Now().Add(30 * time.Second)
	for _, g := range gws[1:] {
		for {
			err := g.AdminJSON("GET", "/webapi/keys/"+id, nil, nil)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fatalf("key %s not on instance %s: %v", id, g.Admin, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return token
}

// median of xs (sorted in place).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}
