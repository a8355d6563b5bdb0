package keystore

import (
	"context"

	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/keystore/traffic"
	"github.com/keygate/keygate/upstreams/contracts"
)

// TestRateLimitInput: every bad field of every policy and of the quota
// is named at once; nothing is stored.
func TestRateLimitInput(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"too many", `"rateLimits":[{"name":"a","limit":1,"windowSeconds":1},{"name":"b","limit":1,"windowSeconds":1},{"name":"c","limit":1,"windowSeconds":1},{"name":"d","limit":1,"windowSeconds":1},{"name":"e","limit":1,"windowSeconds":1}]`,
			[]string{"rateLimits:too_many"}},
		{"every field", `"rateLimits":[{"name":"Burst!","limit":0,"windowSeconds":86401},{"limit":1.5,"windowSeconds":null},{"name":"quota","limit":1000000001,"windowSeconds":0.5}]`,
			[]string{"rateLimits[0].name:invalid", "rateLimits[0].limit:out_of_range", "rateLimits[0].windowSeconds:out_of_range",
				"rateLimits[1].name:required", "rateLimits[1].limit:invalid", "rateLimits[1].windowSeconds:required",
				"rateLimits[2].name:reserved", "rateLimits[2].limit:out_of_range", "rateLimits[2].windowSeconds:invalid"}},
		{"duplicate and long names", `"rateLimits":[{"name":"a","limit":1,"windowSeconds":1},{"name":"a","limit":1,"windowSeconds":2},{"name":"` + strings.Repeat("x", 21) + `","limit":1,"windowSeconds":1}]`,
			[]string{"rateLimits[1].name:duplicate", "rateLimits[2].name:invalid"}},
		{"quota", `"quota":{"limit":0,"period":"week"}`, []string{"quota.limit:out_of_range", "quota.period:invalid"}},
		{"wrong types, every one named", `"rateLimits":[{"name":"ok","limit":1,"windowSeconds":1},{"name":7,"limit":"10","windowSeconds":1e309}],"quota":{"limit":true,"period":5}`,
			[]string{"rateLimits[1].name:invalid", "rateLimits[1].limit:invalid", "rateLimits[1].windowSeconds:out_of_range", "quota.limit:invalid", "quota.period:invalid"}},
		{"unknown fields within", `"rateLimits":[{"name":"a","limit":1,"windowSeconds":1,"extra":true},"x"],"quota":{"limit":1,"period":"hour","Limit":2}`,
			[]string{"rateLimits[0].extra:unknown_field", "rateLimits[1]:invalid", "quota.Limit:unknown_field"}},
		{"too many, and a bad one among them", `"rateLimits":[{"name":"a","limit":1,"windowSeconds":1},{"name":"b","limit":1,"windowSeconds":1},{"name":"c","limit":1,"windowSeconds":1},{"name":"d","limit":1,"windowSeconds":1},{"name":"e","limit":0,"windowSeconds":1}]`,
			[]string{"rateLimits:too_many", "rateLimits[4].limit:out_of_range"}},
		{"thousands, refused as a whole", `"rateLimits":[` + strings.Repeat(`{"name":"","limit":0},`, 5000) + `{}]`, []string{"rateLimits:too_many"}},
		{"quota not an object", `"quota":[1]`, []string{"quota:invalid"}},
		{"quota without fields", `"quota":{}`, []string{"quota.limit:required", "quota.period:required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, storetest.OpenBolt(t))
			_, err := e.keys.Create(input(t, `{`+validContracts+`,`+tc.body+`}`))
			if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, tc.want) {
				t.Errorf("errors %v\nwant   %v", got, tc.want)
			}
			if n := len(e.keys.List("")); n != 0 {
				t.Errorf("%d keys stored", n)
			}
		})
	}
}

// checkAt runs the key check of token at now.
func checkAt(keys *Keys, token string, now time.Time) Decision {
	return Authorize(&Request{Service: access.ServiceContracts, Authorization: []string{"Bearer " + token},
		ClientIP: netip.MustParseAddr("192.0.2.1"), Method: http.MethodGet, Path: "/webapi/contracts/x", Now: now},
		&contracts.Operations, keys.Lookup)
}

// TestQuota: exactly the quota is let through, on two instances of one
// database as on one; the period's end resets it; key.quota_exhausted
// goes out once a period; a clean stop gives the unspent block back.
func TestQuota(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sink := &sinkRecorder{}
		e.keys.EmitTo(sink)
		other := e.reopen(t)
		other.EmitTo(sink)
		k := mustCreate(t, e.keys, `{"service":"contracts","name":"q","owner":"alice","privileges":["get"],"quota":{"limit":250,"period":"hour"}}`)
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		now := e.clock.Now()
		through := 0
		for i := range 400 {
			keys := []*Keys{e.keys, other}[i%2]
			d := checkAt(keys, k.Token, now)
			switch d.Reason {
			case "":
				through++
			case problem.CodeQuotaExceeded:
				if d.Status != http.StatusTooManyRequests || !slices.Equal(d.Violated, []string{"quota"}) || d.RetryAfter != 3600 {
					t.Fatalf("refusal %d %v retry %d", d.Status, d.Violated, d.RetryAfter)
				}
			default:
				t.Fatalf("refused %s", d.Reason)
			}
		}
		if through != 250 {
			t.Errorf("%d let through, want the quota's 250", through)
		}
		// The view: all of it used, resetting at the next hour.
		if err := e.keys.ReadQuotas(k.ID); err != nil {
			t.Fatal(err)
		}
		g, _ := e.keys.Get(k.ID)
		if g.QuotaUsed == nil || *g.QuotaUsed != 250 || !g.QuotaResetsAt.Equal(now.Truncate(time.Hour).Add(time.Hour)) {
			t.Errorf("quotaUsed %v resets %v", g.QuotaUsed, g.QuotaResetsAt)
		}
		n := 0
		for _, ev := range sink.got {
			if ev.Type == events.KeyQuotaExhausted {
				n++
				var data map[string]any
				if err := json.Unmarshal(ev.Data, &data); err != nil || data["id"] != k.ID || ev.Owner != "alice" || strings.Contains(string(ev.Data), k.Token) {
					t.Errorf("event %s", ev.Data)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d key.quota_exhausted events, want 1", n)
		}
		// The next hour starts afresh.
		next := now.Truncate(time.Hour).Add(time.Hour)
		if d := checkAt(e.keys, k.Token, next); d.Reason != "" {
			t.Errorf("next hour: refused %s", d.Reason)
		}
		// A clean stop gives back the block the instance holds: the
		// other instance can spend it.
		gaveBack, err := func() (int64, error) { e.clock.Set(next); return e.keys.ReturnQuota() }()
		if err != nil || gaveBack != 1 {
			t.Fatalf("ReturnQuota = %d, %v; want the block of 2 less the one spent", gaveBack, err)
		}
		through = 1
		for range 300 {
			if checkAt(other, k.Token, next.Add(time.Minute)).Reason == "" {
				through++
			}
		}
		if through != 250 {
			t.Errorf("next hour: %d let through, want 250", through)
		}
	})
}

// TestUsageOverTime: requests count per hour and outcome in memory,
// reach storage with the usage flush from two instances, and read back
// by hour and by day; old hours are purged.
func TestUsageOverTime(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		other := e.reopen(t)
		k := mustCreate(t, e.keys, `{"service":"contracts","name":"u","owner":"alice","privileges":["get"],"rateLimits":[{"name":"burst","limit":2,"windowSeconds":1}]}`)
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		use := func(keys *Keys, at time.Time, n int) {
			for range n {
				d := checkAt(keys, k.Token, at)
				if d.Authorized() {
					keys.Use(d.Entry, at)
				} else {
					keys.Refused(d.Entry, d.Reason, at)
				}
			}
		}
		h0 := t0.Truncate(time.Hour)
		use(e.keys, h0.Add(10*time.Minute), 5)    // 2 ok, 3 rate_limited
		use(other, h0.Add(20*time.Minute), 1)     // 1 ok (its own window)
		use(e.keys, h0.Add(90*time.Minute), 1)    // the next hour
		use(e.keys, h0.Add(-24*time.Hour), 1)     // yesterday
		use(e.keys, h0.Add(-100*24*time.Hour), 1) // beyond 90 days
		for _, keys := range []*Keys{e.keys, other} {
			if _, err := keys.FlushUsage(); err != nil {
				t.Fatal(err)
			}
		}
		use(e.keys, h0.Add(95*time.Minute), 1) // not flushed yet: still shown

		s, err := e.keys.UsageOver(k.ID, h0, h0.Add(2*time.Hour), false)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Buckets) != 2 || s.Buckets[0].OK != 3 || s.Buckets[0].Refused[problem.CodeRateLimited] != 3 ||
			s.Buckets[1].OK != 2 || len(s.Buckets[1].Refused) != 0 {
			t.Errorf("by hour: %+v", s.Buckets)
		}
		day := h0.Truncate(24 * time.Hour)
		s, err = other.UsageOver(k.ID, day.Add(-24*time.Hour), day.Add(24*time.Hour), true)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Buckets) != 2 || s.Buckets[0].OK != 1 || s.Buckets[1].OK != 4 || s.Buckets[1].Refused[problem.CodeRateLimited] != 3 {
			t.Errorf("by day, from the other instance: %+v", s.Buckets)
		}
		if err := e.backend.PurgeUsage(context.Background(), h0.Add(-90*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if hours, err := e.backend.UsageHours(context.Background(), k.ID, h0.Add(-200*24*time.Hour), h0.Add(3*time.Hour)); err != nil || len(hours) != 4 {
			t.Errorf("after the purge: %+v, %v; want the 4 rows of the last 90 days", hours, err)
		}
		// A deleted key's hours go with it.
		if err := e.keys.Delete(k.ID); err != nil {
			t.Fatal(err)
		}
		if hours, err := e.backend.UsageHours(context.Background(), k.ID, h0.Add(-200*24*time.Hour), h0.Add(3*time.Hour)); err != nil || len(hours) != 0 {
			t.Errorf("after delete: %+v, %v", hours, err)
		}
	})
}

// TestRateSharing: instances on one PostgreSQL learn each other's
// counts at each sync, and the limit holds over both.
func TestRateSharing(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		k := mustCreate(t, e.keys, `{"service":"contracts","name":"r","owner":"alice","privileges":["get"],"rateLimits":[{"name":"minute","limit":10,"windowSeconds":60}]}`)
		if _, ok := e.backend.(traffic.RateSharer); !ok {
			// One process (bbolt): a sync shares nothing and keeps the
			// counts in memory as they are.
			now := time.Now()
			through := 0
			for i := range 12 {
				if i == 6 {
					if err := e.keys.SyncRates(now); err != nil {
						t.Fatal(err)
					}
				}
				if checkAt(e.keys, k.Token, now).Reason == "" {
					through++
				}
			}
			if through != 10 {
				t.Errorf("one process: %d let through across a sync, want the limit of 10", through)
			}
			return
		}
		other := e.reopen(t)
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		syncBoth := func() {
			for _, keys := range []*Keys{e.keys, other} {
				if err := keys.SyncRates(now); err != nil {
					t.Fatal(err)
				}
			}
		}
		spend := func(keys *Keys) int {
			through := 0
			for range 10 {
				if checkAt(keys, k.Token, now).Reason == "" {
					through++
				}
			}
			return through
		}
		// Both have synced: each knows of the other. Between two syncs
		// each spends only what it claimed at the last (an instance asked
		// nothing before may let one through while the limit has room),
		// so that the two together never pass the limit, and have passed
		// it within a few syncs.
		syncBoth()
		syncBoth()
		first := spend(e.keys)
		if first != 1 {
			t.Errorf("the first instance let through %d before it claimed anything, want 1", first)
		}
		through := first
		for round := range 6 {
			syncBoth()
			through += spend(other) + spend(e.keys)
			if through > 10 {
				t.Fatalf("round %d: %d let through, over the limit of 10", round, through)
			}
		}
		if through != 10 {
			t.Errorf("%d let through in six syncs, want the limit of 10", through)
		}
	})
}

// TestHourlyTurn: counts land in their request's hour, also for a request
// that began before the hour turned and is counted after.
func TestHourlyTurn(t *testing.T) {
	var h hourly
	at := func(hr int, min float64) int64 {
		return t0.Truncate(time.Hour).Add(time.Duration(hr)*time.Hour + time.Duration(min*float64(time.Minute))).UnixNano()
	}
	h.add(0, at(0, 10))
	h.add(7, at(0, 59.9))
	h.add(0, at(1, 0))
	h.add(0, at(0, 59.99)) // late: still the first hour's
	h.add(0, at(1, 30))
	got := map[string]uint64{}
	for _, c := range h.take() {
		got[c.Hour.Format("15")+" "+c.Outcome] += c.Count
	}
	h0 := t0.Truncate(time.Hour)
	want := map[string]uint64{h0.Format("15") + " ok": 2, h0.Format("15") + " rate_limited": 1, h0.Add(time.Hour).Format("15") + " ok": 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	if rest := h.take(); len(rest) != 0 {
		t.Errorf("taken twice: %v", rest)
	}
}

// TestQuotaPeriodChange: an hour spent, then a day quota: the day is
// counted apart from the hour that began with it, and gets its own
// key.quota_exhausted; a new instance (a restart) lists what was used.
func TestQuotaPeriodChange(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sink := &sinkRecorder{}
		e.keys.EmitTo(sink)
		midnight := t0.Truncate(24 * time.Hour).Add(24 * time.Hour)
		e.clock.Set(midnight.Add(30 * time.Minute))
		k := mustCreate(t, e.keys, `{"service":"contracts","name":"p","owner":"alice","privileges":["get"],"quota":{"limit":5,"period":"hour"}}`)
		spend := func(keys *Keys, n int) int {
			through := 0
			for range n {
				if checkAt(keys, k.Token, e.clock.Now()).Reason == "" {
					through++
				}
			}
			return through
		}
		if n := spend(e.keys, 8); n != 5 {
			t.Fatalf("hour: %d let through, want 5", n)
		}
		if _, err := e.keys.Update(k.ID, mustInput(t, `{"quota":{"limit":10,"period":"day"}}`)); err != nil {
			t.Fatal(err)
		}
		if n := spend(e.keys, 12); n != 10 {
			t.Errorf("day after the hour: %d let through, want 10", n)
		}
		n := 0
		for _, ev := range sink.got {
			if ev.Type == events.KeyQuotaExhausted {
				n++
			}
		}
		if n != 2 {
			t.Errorf("%d key.quota_exhausted, want one for the hour and one for the day", n)
		}
		// A restart: the list shows the day's use once read back.
		other := e.reopen(t)
		if err := other.ReadQuotas(""); err != nil {
			t.Fatal(err)
		}
		if l := other.List(""); len(l) != 1 || l[0].QuotaUsed == nil || *l[0].QuotaUsed != 10 {
			t.Errorf("listed after a restart: %+v", l)
		}
	})
}

// quotaRig is a key with a quota, on one or two instances of one store
// that hear of its changes by a resync, as a notification would make
// them: the tests of a quota's changes.
type quotaRig struct {
	t   *testing.T
	e   *env
	gws []*Keys
	key Key
}

// newQuotaRig creates the key of body on the first of instances
// instances, all of them resynced.
func newQuotaRig(t *testing.T, db storage.DB, instances int, body string) *quotaRig {
	e := newEnv(t, db)
	r := &quotaRig{t: t, e: e, gws: []*Keys{e.keys}}
	for range instances - 1 {
		r.gws = append(r.gws, e.reopen(t))
	}
	r.key = mustCreate(t, e.keys, body)
	for _, g := range r.gws {
		if err := g.Resync(); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// spend sends n requests of the key, over the instances in turn, and
// returns how many were let through.
func (r *quotaRig) spend(n int) int {
	through := 0
	for i := range n {
		if checkAt(r.gws[i%len(r.gws)], r.key.Token, r.e.clock.Now()).Reason == "" {
			through++
		}
	}
	return through
}

// change updates the key on the first instance a second on, so that the
// others' resync sees it, and resyncs them; it returns the reply.
func (r *quotaRig) change(body string) Key {
	r.t.Helper()
	r.e.clock.Set(r.e.clock.Now().Add(time.Second))
	updated, err := r.e.keys.Update(r.key.ID, mustInput(r.t, body))
	if err != nil {
		r.t.Fatal(err)
	}
	for _, g := range r.gws[1:] {
		if err := g.Resync(); err != nil {
			r.t.Fatal(err)
		}
	}
	return updated
}

// givenBack waits until the key's period of kind p holds used units: the
// blocks' unspent units go back in the background.
func (r *quotaRig) givenBack(p traffic.QuotaPeriod, used int64) {
	r.t.Helper()
	span := p.Span(r.e.clock.Now())
	testwait.For(r.t, testwait.Generous, "the blocks given back", func() bool {
		got, err := r.e.backend.QuotaUsed(context.Background(), r.key.ID, span)
		return err == nil && got == used
	})
}

// TestQuotaLowered: a lower limit holds at once on every instance that
// has heard of it: the blocks leased under the old limit are taken back
// and their unspent units returned, so no instance spends past the new
// limit; one still above what was used lets through exactly the rest.
func TestQuotaLowered(t *testing.T) {
	for _, tc := range []struct {
		name            string
		instances       int
		before, lowerTo int64
		wantAfter       int
	}{
		{"below what was used, one instance", 1, 500, 100, 0},
		{"below what was used, two instances", 2, 1500, 1000, 0},
		{"above what was used, two instances", 2, 1500, 2000, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, db storage.DB) {
				r := newQuotaRig(t, db, tc.instances, `{"service":"contracts","name":"q","owner":"alice","privileges":["get"],"quota":{"limit":100000,"period":"month"}}`)
				if n := r.spend(int(tc.before)); n != int(tc.before) {
					t.Fatalf("%d let through under 100000, want %d", n, tc.before)
				}
				updated := r.change(fmt.Sprintf(`{"quota":{"limit":%d,"period":"month"}}`, tc.lowerTo))
				// The reply leaves out the block taken back (another
				// instance's counts as used until it hears of the change).
				if tc.instances == 1 && (updated.QuotaUsed == nil || *updated.QuotaUsed != tc.before) {
					t.Errorf("quotaUsed in the reply: %v, want the %d spent", updated.QuotaUsed, tc.before)
				}
				r.givenBack(traffic.QuotaMonth, tc.before)
				if n := r.spend(3000); n != tc.wantAfter {
					t.Errorf("%d let through after the limit was lowered to %d, want %d", n, tc.lowerTo, tc.wantAfter)
				}
			})
		})
	}
}

// TestQuotaRemovedThenSet: a quota taken away gives back the block
// leased under it, and one set afterwards leases afresh under its own
// limit: the way from a plan's quota to a holder's own (the clash rule
// refuses both at once) never spends what the old limit leased. On each
// instance, before and after it hears of the changes.
func TestQuotaRemovedThenSet(t *testing.T) {
	for _, tc := range []struct {
		name      string
		instances int
		set       string // the quota set afterwards
		wantAfter int
	}{
		{"set below what was used, one instance", 1, `{"limit":5,"period":"day"}`, 0},
		{"set below what was used, two instances", 2, `{"limit":5,"period":"day"}`, 0},
		{"set above what was used, two instances", 2, `{"limit":30,"period":"day"}`, 10},
		// The day's use is not the hour's.
		{"another kind of period, one instance", 1, `{"limit":5,"period":"hour"}`, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, db storage.DB) {
				r := newQuotaRig(t, db, tc.instances, `{"service":"contracts","name":"r","owner":"alice","privileges":["get"],"quota":{"limit":100000,"period":"day"}}`)
				if n := r.spend(20); n != 20 {
					t.Fatalf("%d let through under 100000, want 20", n)
				}
				r.change(`{"quota":null}`)
				// The day holds the 20 spent, not the blocks leased under
				// 100000.
				r.givenBack(traffic.QuotaDay, 20)
				if n := r.spend(5); n != 5 {
					t.Fatalf("%d let through without a quota, want 5", n)
				}
				r.change(`{"quota":` + tc.set + `}`)
				if n := r.spend(100); n != tc.wantAfter {
					t.Errorf("%d let through after the quota %s was set, want %d", n, tc.set, tc.wantAfter)
				}
			})
		})
	}
}
