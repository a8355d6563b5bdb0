package traffic

import (
	"testing"
	"time"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// newLimiter is a Limiter of policies, as a holder's meter holds it.
func newLimiter(policies ...RateLimit) *Limiter {
	l := &Limiter{}
	l.Adopt(policies)
	return l
}

// sec is s seconds after t0, in unix ns (the limiter's clock).
func sec(s float64) int64 { return t0.UnixNano() + int64(s*float64(time.Second)) }

// TestSlidingWindow checks the two-counter estimate on a fake clock:
// what is let through, what a refusal says, and that a steady flow at
// twice the limit is held to the limit in every window.
func TestSlidingWindow(t *testing.T) {
	t.Run("limit within one window", func(t *testing.T) {
		l := newLimiter(RateLimit{Name: "burst", Limit: 3, WindowSeconds: 1})
		for i, want := range []bool{true, true, true, false, false} {
			if got := l.Take(sec(0.1), alone).Violated == 0; got != want {
				t.Errorf("request %d: let through %v, want %v", i+1, got, want)
			}
		}
	})
	t.Run("the previous window weighs by what is left of it", func(t *testing.T) {
		l := newLimiter(RateLimit{Name: "minute", Limit: 10, WindowSeconds: 60})
		for range 10 {
			if r := l.Take(sec(59), alone); r.Violated != 0 {
				t.Fatal("refused within the limit")
			}
		}
		// 15 s into the next window, the previous 10 count 7.5: let
		// through while the estimate is below 10, three more.
		for i, want := range []bool{true, true, true, false} {
			if got := l.Take(sec(75), alone).Violated == 0; got != want {
				t.Errorf("request %d at 75 s: let through %v, want %v", i+1, got, want)
			}
		}
		// Two windows on, nothing of the first is left.
		if r := l.Take(sec(180), alone); r.Violated != 0 {
			t.Error("refused two windows later")
		}
	})
	t.Run("retry after", func(t *testing.T) {
		l := newLimiter(RateLimit{Name: "minute", Limit: 10, WindowSeconds: 60})
		for range 10 {
			l.Take(sec(30), alone)
		}
		r := l.Take(sec(30), alone)
		if r.Violated != 1 {
			t.Fatalf("violated %b, want the first policy", r.Violated)
		}
		// Full until the window ends at 60 s; just after, 10·(1-f) falls
		// below 10: the next whole second from 30 s is 31.
		if r.RetryAfter != 31 {
			t.Errorf("Retry-After %d, want 31", r.RetryAfter)
		}
		if l.Take(sec(30+30), alone).Violated == 0 {
			t.Error("let through before Retry-After")
		}
		if l.Take(sec(30+31), alone).Violated != 0 {
			t.Error("refused at Retry-After")
		}
	})
	t.Run("which policies refuse", func(t *testing.T) {
		l := newLimiter(RateLimit{Name: "burst", Limit: 2, WindowSeconds: 1}, RateLimit{Name: "minute", Limit: 3, WindowSeconds: 60})
		l.Take(sec(0), alone)
		l.Take(sec(0), alone)
		if r := l.Take(sec(0.5), alone); r.Violated != 0b01 {
			t.Errorf("violated %b, want burst alone", r.Violated)
		}
		l.Take(sec(2.5), alone)
		if r := l.Take(sec(4.5), alone); r.Violated != 0b10 {
			t.Errorf("violated %b, want minute alone", r.Violated)
		}
	})
	// The measured promise on one instance: twice the limit for 10
	// windows lets through limit × 10 ± 5 %.
	for _, tc := range []struct {
		limit, window int64
	}{{20, 1}, {600, 60}, {5, 10}, {1000, 1}} {
		t.Run("twice the limit", func(t *testing.T) {
			l := newLimiter(RateLimit{Name: "p", Limit: tc.limit, WindowSeconds: tc.window})
			n := 2 * tc.limit * 10
			step := float64(tc.window*10) / float64(n)
			through := 0
			for i := range n {
				if l.Take(sec(float64(i)*step), alone).Violated == 0 {
					through++
				}
			}
			want := float64(tc.limit * 10)
			if r := float64(through) / want; r < 0.95 || r > 1.05 {
				t.Errorf("limit %d per %d s: %d let through, want %.0f ± 5%%", tc.limit, tc.window, through, want)
			}
		})
	}
	t.Run("headers", func(t *testing.T) {
		l := newLimiter(RateLimit{Name: "burst", Limit: 20, WindowSeconds: 1}, RateLimit{Name: "minute", Limit: 600, WindowSeconds: 60})
		for range 15 {
			l.Take(sec(0.5), alone)
		}
		i, r, reset, _ := l.Closest(sec(0.5), alone)
		var b []byte
		b = AppendRateLimit(b, "", l.policies[i].Name, r, reset)
		if string(b) != `"burst";r=5;t=2` {
			t.Errorf("RateLimit %s", b)
		}
		if h := PolicyHeader("", nil, nil); h != "" {
			t.Errorf("no policies: %q", h)
		}
		if h := PolicyHeader("", []RateLimit{{"burst", 20, 1}, {"minute", 600, 60}}, &Quota{100000, QuotaMonth}); h != `"burst";q=20;w=1, "minute";q=600;w=60, "quota";q=100000;w=2592000` {
			t.Errorf("RateLimit-Policy %s", h)
		}
	})
	t.Run("a policy that stays keeps its counts", func(t *testing.T) {
		l := newLimiter(RateLimit{Name: "burst", Limit: 2, WindowSeconds: 1})
		l.Take(sec(0), alone)
		l.Take(sec(0), alone)
		l.Adopt([]RateLimit{{Name: "burst", Limit: 3, WindowSeconds: 1}, {Name: "new", Limit: 5, WindowSeconds: 1}})
		if l.Take(sec(0.1), alone).Violated != 0 || l.Take(sec(0.1), alone).Violated != 1 {
			t.Error("the raised limit did not keep the two counted")
		}
	})
}

// TestWindowNeverGoesBack: a request whose time is of the window before
// (it began before another moved the window on) counts in the current
// window; it must not empty it.
func TestWindowNeverGoesBack(t *testing.T) {
	l := newLimiter(RateLimit{Name: "s", Limit: 100, WindowSeconds: 1})
	for i := range 1000 {
		l.Take(sec(float64(i)/1000), alone)
	}
	l.Take(sec(1.000001), alone)    // moves to the next window
	l.Closest(sec(0.999999), alone) // an earlier request's header
	l.Take(sec(0.999998), alone)    // and its check
	through := 0
	for i := range 100 {
		if l.Take(sec(1.000002+float64(i)/1e6), alone).Violated == 0 {
			through++
		}
	}
	if through > 2 {
		t.Errorf("%d let through just after 100 in the window before, want at most 2", through)
	}
}

// alone is an instance with no other sharing its limits.
var alone = Sharing{Instances: 1}

// TestRemainingAgreesWithDecision: the RateLimit header's r is 0 only
// when the next request would be refused, and more than 0 only when it
// would pass, whatever the previous window's weight (a curl loop on a
// burst policy saw r=0 on requests that passed).
func TestRemainingAgreesWithDecision(t *testing.T) {
	for _, gap := range []float64{0.05, 0.13, 0.21, 0.3} {
		l := newLimiter(RateLimit{Name: "burst", Limit: 5, WindowSeconds: 1})
		for i := range 40 {
			ns := sec(float64(i) * gap)
			l.Take(ns, alone)
			_, r, _, _ := l.Closest(ns, alone)
			passes := l.Take(ns, alone).Violated == 0
			if passes != (r > 0) {
				t.Fatalf("gap %.2fs, request %d: r=%d but the next request passes: %v", gap, i, r, passes)
			}
			if passes {
				l.Untake(ns)
			}
		}
	}
}

// TestClaimDuringSync: a request let through against the claim while a
// sync is under way (after it took the counts, before it claimed again)
// stays counted: the window's count in the database is always what was
// let through plus what is claimed and unspent.
func TestClaimDuringSync(t *testing.T) {
	l := newLimiter(RateLimit{Name: "m", Limit: 100, WindowSeconds: 60})
	sh := Sharing{Instances: 3, Claims: true}
	ns := sec(1)
	var db int64 // the window's count as the database holds it
	add := func(list []RateCount) {
		for _, c := range list {
			db += c.Count
		}
	}
	through := 0
	pass := func(n int) {
		for range n {
			if l.Take(ns, sh).Violated == 0 {
				through++
			}
		}
	}
	sync := func(during int, retried bool) {
		deltas, demand := l.Pending("k", nil, nil)
		add(deltas)
		pass(during) // requests that come while the sync runs
		read := []RateCount{{"k", "m", 60, ns / int64(60*time.Second), db}}
		if retried {
			// The transaction ran once and was rolled back: what it
			// claimed never reached the database.
			l.Apply(read, ns)
			l.Reclaim("k", ns, sh, demand, nil)
			pass(1)
		}
		l.Apply(read, ns)
		add(l.Reclaim("k", ns, sh, demand, nil))
		pass(during)
		l.CommitClaims()
	}
	pass(1) // the first request of an instance that claimed nothing
	for i, during := range []int{0, 3, 0, 5, 2, 0, 4, 1} {
		sync(during, i%3 == 1)
		pass(10)
		p := l.policies[0]
		if want := int64(through) + p.claim - p.used; db+p.curLocal-p.covered != want {
			t.Fatalf("after a sync with %d during it: the database counts %d and %d are unsent, want %d let through + %d claimed and unspent",
				during, db, p.curLocal-p.covered, through, p.claim-p.used)
		}
	}
}

// TestStandingClaimOfQuietHolder: an instance asked nothing keeps a
// standing claim while the holder was asked anything within
// standingClaimFor, then gives it back and claims nothing (no row to
// write at every sync), until it is asked again.
func TestStandingClaimOfQuietHolder(t *testing.T) {
	l := newLimiter(RateLimit{Name: "m", Limit: 400, WindowSeconds: 3600})
	sh := Sharing{Instances: 2, Claims: true}
	var db int64
	sync := func(ns int64) []RateCount {
		deltas, demand := l.Pending("k", nil, nil)
		for _, c := range deltas {
			db += c.Count
		}
		l.Apply([]RateCount{{"k", "m", 3600, ns / int64(time.Hour), db}}, ns)
		claims := l.Reclaim("k", ns, sh, demand, nil)
		for _, c := range claims {
			db += c.Count
		}
		l.CommitClaims()
		return claims
	}
	claimed := func() int64 { return l.policies[0].claim }

	sync(sec(1))
	if c := claimed(); c != 50 { // a quarter of its half of 400
		t.Fatalf("standing claim %d, want 50", c)
	}
	for s := 2.0; s <= 60; s++ {
		sync(sec(s))
	}
	if c := claimed(); c != 50 {
		t.Errorf("a minute quiet: claim %d, want the standing 50 still", c)
	}
	if rows := sync(sec(62)); claimed() != 0 || db != 0 || len(rows) != 1 || rows[0].Count != -50 {
		t.Errorf("quiet past a minute: claim %d, the database counts %d, rows %v; want the claim given back", claimed(), db, rows)
	}
	if rows := sync(sec(63)); len(rows) != 0 {
		t.Errorf("quiet: a sync writes %v, want nothing", rows)
	}
	if !l.Quiet(sec(63.2)) || l.Quiet(sec(30)) {
		t.Error("Quiet: want true once the claim is given back, and not within the minute")
	}
	// Asked again: the first request gets what an instance that claimed
	// nothing may let through, and the next sync claims by its demand.
	if l.Take(sec(63.5), sh).Violated != 0 {
		t.Fatal("the first request after the quiet is refused")
	}
	if l.Quiet(sec(63.6)) {
		t.Error("Quiet after a request")
	}
	sync(sec(64))
	if c := claimed(); c < 1 {
		t.Errorf("asked again: claim %d, want one by its demand", c)
	}
	// Asked within the minute: a standing claim again, of what is left.
	if sync(sec(65)); claimed() != 49 {
		t.Errorf("asked within the minute: standing claim %d, want 49 (a quarter of its half of the 399 left)", claimed())
	}
}
