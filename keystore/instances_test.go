package keystore

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/token"
)

// followingInstance is a second instance on e's PostgreSQL database, with
// a connection pool of its own, following the changes of others as a
// gateway does until the test ends. Its resync comes every hour: only
// the notifications can bring changes in time.
func followingInstance(t *testing.T, e *env) *Keys {
	t.Helper()
	db2, err := pgdb.Open(context.Background(), pgdb.Config{DSN: pgtest.Shared(t).DSN, Schema: e.db.(*pgdb.DB).Schema(), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(NewPostgresBackend(db2), e.sealer, e.clock.Now)
	if err != nil {
		db2.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		other.Follow(ctx, time.Hour, func(err error) { t.Errorf("follow: %v", err) })
	}()
	t.Cleanup(func() { cancel(); <-done; db2.Close() })
	return other
}

// Two key stores on one database behave as two gateway instances: each
// adds its own uses, so the stored count is the sum, and the later last
// use wins; a resync brings the other's changes and counts.
func TestInstancesAddUsage(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		other := e.reopen(t)
		k := mustCreate(t, e.keys, `{`+validContracts+`}`)
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		ea, eb := e.keys.Lookup(token.HashOf(k.Token)), other.Lookup(token.HashOf(k.Token))
		if ea == nil || eb == nil {
			t.Fatal("the key is not on both instances")
		}
		later := t0.Add(time.Hour)
		for i := 0; i < 3; i++ {
			e.keys.Use(ea, later)
		}
		for i := 0; i < 4; i++ {
			other.Use(eb, t0.Add(time.Minute))
		}
		for _, ks := range []*Keys{e.keys, other} {
			if n, err := ks.FlushUsage(); err != nil || n != 1 {
				t.Fatalf("FlushUsage = %d, %v", n, err)
			}
		}
		// The second flush took back the sum; the first learns it by resync.
		if g, _ := other.Get(k.ID); g.UsageCount != 7 || !g.LastUsageTime.Equal(later) {
			t.Errorf("flushed second: count %d, last %v; want 7, %v", g.UsageCount, g.LastUsageTime, later)
		}
		if err := e.keys.Resync(); err != nil {
			t.Fatal(err)
		}
		if g, _ := e.keys.Get(k.ID); g.UsageCount != 7 || !g.LastUsageTime.Equal(later) {
			t.Errorf("after resync: count %d, last %v; want 7, %v", g.UsageCount, g.LastUsageTime, later)
		}
		// A use counted while nothing is flushed shows beside the stored sum.
		other.Use(eb, t0)
		if g, _ := other.Get(k.ID); g.UsageCount != 8 {
			t.Errorf("unflushed use: count %d, want 8", g.UsageCount)
		}
		if g, _ := e.reopen(t).Get(k.ID); g.UsageCount != 7 {
			t.Errorf("stored: count %d, want 7", g.UsageCount)
		}
	})
}

// Resync makes memory what the database holds after another instance
// created, changed and deleted keys, without any notification.
func TestResyncFollowsOtherInstance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		other := e.reopen(t)
		gone := mustCreate(t, e.keys, `{`+validContracts+`}`)
		changed := mustCreate(t, e.keys, `{`+validContracts+`}`)
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		added := mustCreate(t, e.keys, `{`+validShare+`}`)
		e.clock.Advance(time.Second)
		if _, err := e.keys.Update(changed.ID, mustInput(t, `{"privileges":["get","search"]}`)); err != nil {
			t.Fatal(err)
		}
		if err := e.keys.Delete(gone.ID); err != nil {
			t.Fatal(err)
		}
		// Before the resync, the other instance still has the old state.
		if other.Lookup(token.HashOf(gone.Token)) == nil || other.Lookup(token.HashOf(added.Token)) != nil {
			t.Fatal("the other instance changed without a resync")
		}
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		if other.Lookup(token.HashOf(gone.Token)) != nil {
			t.Error("a key deleted elsewhere still checks here")
		}
		if other.Lookup(token.HashOf(added.Token)) == nil {
			t.Error("a key created elsewhere is unknown here")
		}
		if g, err := other.Get(changed.ID); err != nil || len(g.Privileges) != 2 {
			t.Errorf("changed key here: %+v, %v", g.Privileges, err)
		}
	})
}

// A resync decodes only records whose revision memory does not hold:
// the revision memory computes is the one each backend reads from the
// stored record, after every kind of write, so an unchanged key is never
// decoded again; and a change of the key.expiring mark alone, which
// keeps lastModificationTime, still reaches memory.
func TestResyncRevisions(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		nva := e.clock.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
		created := mustCreate(t, e.keys, `{`+validContracts+`}`)
		updated := mustCreate(t, e.keys, `{`+validContracts+`,"notValidAfter":"`+nva+`"}`)
		rolled := mustCreate(t, e.keys, `{`+validShare+`}`)
		if _, err := e.keys.Update(updated.ID, mustInput(t, `{"description":"changed"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.keys.Roll(rolled.ID, time.Hour); err != nil {
			t.Fatal(err)
		}
		other := e.reopen(t)
		if n, err := e.keys.WarnExpiring(e.clock.Now(), 7*24*time.Hour); err != nil || n != 1 {
			t.Fatalf("WarnExpiring = %d, %v; want 1", n, err)
		}
		rows := map[string]Revision{}
		if err := e.backend.Load(context.Background(), func(row *KeyRow) error {
			rows[row.ID] = row.Revision
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{created.ID, updated.ID, rolled.ID} {
			if got := e.keys.entry(id).snap.Load().revision(); got != rows[id] {
				t.Errorf("key %s: memory's revision %+v, stored %+v", id, got, rows[id])
			}
		}
		// The other instance read the key before its mark: a resync brings it.
		if w := other.entry(updated.ID).snap.Load().warnedFor; w != nil {
			t.Fatalf("mark before the resync: %v", w)
		}
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		if w := other.entry(updated.ID).snap.Load().warnedFor; w == nil || w.Format(time.RFC3339) != nva {
			t.Errorf("mark after the resync: %v, want %s", w, nva)
		}
	})
}

// On PostgreSQL an instance that follows the database hears each change
// of another, on its own pool, without waiting for a resync.
func TestFollowHearsOtherInstance(t *testing.T) {
	db := storetest.OpenPostgres(t)
	e := newEnv(t, db)
	other := followingInstance(t, e)

	// The first resync runs once LISTEN is in place; a key created before
	// arrives through it, one created after through a notification.
	before := mustCreate(t, e.keys, `{`+validContracts+`}`)
	testwait.For(t, testwait.Generous, "a key created before it listened", func() bool { return other.Lookup(token.HashOf(before.Token)) != nil })
	k := mustCreate(t, e.keys, `{`+validContracts+`}`)
	testwait.For(t, testwait.Generous, "the create", func() bool { return other.Lookup(token.HashOf(k.Token)) != nil })
	if _, err := e.keys.Update(k.ID, mustInput(t, `{"privileges":["get","search"]}`)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "the update", func() bool {
		g, _ := other.Get(k.ID)
		return len(g.Privileges) == 2
	})
	if _, err := e.keys.Update(k.ID, mustInput(t, `{"enabled":false}`)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "the disable", func() bool {
		g, _ := other.Get(k.ID)
		return !g.Enabled
	})
	rolled, err := e.keys.Roll(k.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "the roll", func() bool {
		return other.Lookup(token.HashOf(rolled.Token)) != nil && other.Lookup(token.HashOf(k.Token)) != nil
	})
	if err := e.keys.Delete(k.ID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "the delete", func() bool { return other.Lookup(token.HashOf(k.Token)) == nil })

	// A change of many keys at once (caddy webapi migrate) notifies "*":
	// every key is read again. The key is stored by a backend that
	// notifies elsewhere, so only the "*" can bring it.
	quiet, err := Open(&PostgresBackend{db: db.(*pgdb.DB), channel: "keygate_keys.elsewhere"}, e.sealer, e.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	silent := mustCreate(t, quiet, `{`+validContracts+`}`)
	if _, err := db.(*pgdb.DB).Pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", db.(*pgdb.DB).Channel(keysTopic), resyncAll); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "a key announced by \"*\"", func() bool { return other.Lookup(token.HashOf(silent.Token)) != nil })
}

func mustInput(t *testing.T, body string) *KeyInput {
	t.Helper()
	in := new(KeyInput)
	if err := json.Unmarshal([]byte(body), in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestRateLimitAcrossInstances: three instances on one PostgreSQL, each
// syncing every 100 ms of a simulated clock (staggered), hold a key's
// rate limit to the limit + 10 % in every sliding window, for a burst
// shorter than the sync interval and for a flood of many windows, spread
// over all or sent to one; and let through at least 90 % of it.
func TestRateLimitAcrossInstances(t *testing.T) {
	const sync = 100 * time.Millisecond
	for _, tc := range []struct {
		name          string
		limit, window int64 // per window seconds
		rate          int   // requests a second sent
		run           time.Duration
		spread        bool // over the three, or all to the first
		minThrough    int  // over the whole run
	}{
		{"burst spread", 100, 10, 5000, 300 * time.Millisecond, true, 90},
		// Shorter than one sync: only the idle instances' standing claims
		// (a quarter of each one's share) and no more.
		{"burst within one sync", 100, 10, 20000, 50 * time.Millisecond, true, 24},
		// A short burst to one instance gets less than the limit: the
		// idle ones still hold their small claims, and the busy one's
		// claim grows with each sync.
		{"burst to one", 100, 10, 5000, 300 * time.Millisecond, false, 45},
		{"flood spread", 300, 10, 2000, 30 * time.Second, true, 900 * 9 / 10},
		{"flood to one", 300, 10, 2000, 30 * time.Second, false, 900 * 9 / 10},
		{"twice the limit spread", 50, 1, 100, 10 * time.Second, true, 500 * 9 / 10},
		{"twice the limit to one", 50, 1, 100, 10 * time.Second, false, 500 * 9 / 10},
		{"flood of second windows", 50, 1, 1000, 10 * time.Second, true, 500 * 8 / 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, storetest.OpenPostgres(t))
			gws := []*Keys{e.keys, e.reopen(t), e.reopen(t)}
			k := mustCreate(t, e.keys, fmt.Sprintf(`{"service":"contracts","name":"r","owner":"alice","privileges":["get"],"rateLimits":[{"name":"w","limit":%d,"windowSeconds":%d}]}`, tc.limit, tc.window))
			// The instances have been running: each knows the others.
			start := t0.Truncate(time.Duration(tc.window) * time.Second).Add(time.Hour)
			for _, g := range gws {
				if err := g.Resync(); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				for _, g := range gws {
					if err := g.SyncRates(start.Add(-sync)); err != nil {
						t.Fatal(err)
					}
				}
			}
			step := time.Second / time.Duration(tc.rate)
			nextSync := make([]time.Time, len(gws))
			for i := range gws {
				nextSync[i] = start.Add(time.Duration(i) * sync / time.Duration(len(gws)))
			}
			// A burst comes 4 s into a window, so the previous one is
			// empty; the instances sync all along.
			if tc.run < time.Second {
				for at := start; at.Before(start.Add(4 * time.Second)); at = at.Add(sync / 3) {
					for j, g := range gws {
						if !at.Before(nextSync[j]) {
							if err := g.SyncRates(nextSync[j]); err != nil {
								t.Fatal(err)
							}
							nextSync[j] = nextSync[j].Add(sync)
						}
					}
				}
				start = start.Add(4 * time.Second)
			}
			var passed []time.Time
			for i := 0; time.Duration(i)*step < tc.run; i++ {
				now := start.Add(time.Duration(i) * step)
				for j, g := range gws {
					if !now.Before(nextSync[j]) {
						if err := g.SyncRates(nextSync[j]); err != nil {
							t.Fatal(err)
						}
						nextSync[j] = nextSync[j].Add(sync)
					}
				}
				g := gws[0]
				if tc.spread {
					g = gws[i%len(gws)]
				}
				if checkAt(g, k.Token, now).Reason == "" {
					passed = append(passed, now)
				}
			}
			// The most let through in any sliding window, looked at every
			// 100 ms.
			w := time.Duration(tc.window) * time.Second
			most := 0
			for from := start.Add(-w); from.Before(start.Add(tc.run)); from = from.Add(sync) {
				n := 0
				for _, p := range passed {
					if !p.Before(from) && p.Before(from.Add(w)) {
						n++
					}
				}
				most = max(most, n)
			}
			t.Logf("%d let through, at most %d in a window of %s (limit %d)", len(passed), most, w, tc.limit)
			if testing.Verbose() {
				per := map[int64]int{}
				for _, p := range passed {
					per[p.Sub(start).Milliseconds()/1000]++
				}
				t.Logf("per second: %v", per)
			}
			if float64(most) > float64(tc.limit)*1.1 {
				t.Errorf("%d let through in one window, want at most the limit %d + 10%%", most, tc.limit)
			}
			if len(passed) < tc.minThrough {
				t.Errorf("%d let through, want at least %d", len(passed), tc.minThrough)
			}
		})
	}
}

// TestDelayedSyncAfterRoll: syncs held up for seconds by load, across
// the turn of a window, do not make the instances claim the room of the
// seconds to come: a burst right after the turn keeps the sliding window
// within the limit + 10 %.
func TestDelayedSyncAfterRoll(t *testing.T) {
	e := newEnv(t, storetest.OpenPostgres(t))
	gws := []*Keys{e.keys, e.reopen(t), e.reopen(t)}
	k := mustCreate(t, e.keys, `{"service":"contracts","name":"r","owner":"alice","privileges":["get"],"rateLimits":[{"name":"w","limit":100,"windowSeconds":10}]}`)
	turn := t0.Truncate(10 * time.Second).Add(time.Hour)
	syncAll := func(at time.Time) {
		for _, g := range gws {
			if err := g.SyncRates(at); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, g := range gws {
		if err := g.Resync(); err != nil {
			t.Fatal(err)
		}
	}
	var passed []time.Time
	burst := func(at time.Time, n int) {
		for i := range n {
			if checkAt(gws[i%3], k.Token, at).Reason == "" {
				passed = append(passed, at)
			}
		}
	}
	// The end of one window: the limit spent, syncing every 100 ms.
	for at := turn.Add(-3 * time.Second); at.Before(turn.Add(-2 * time.Second)); at = at.Add(100 * time.Millisecond) {
		syncAll(at)
		burst(at, 60)
	}
	// Then no sync for 2 s, across the turn; the first ones come just
	// after it, and a burst with them.
	syncAll(turn.Add(50 * time.Millisecond))
	for at := turn.Add(50 * time.Millisecond); at.Before(turn.Add(time.Second)); at = at.Add(100 * time.Millisecond) {
		burst(at, 60)
		syncAll(at.Add(100 * time.Millisecond))
	}
	n := 0
	for _, p := range passed {
		if p.After(turn.Add(time.Second - 10*time.Second)) {
			n++
		}
	}
	if n > 110 {
		t.Errorf("%d let through in the 10 s to the second after the turn, want at most the limit 100 + 10%%", n)
	}
	t.Logf("%d let through in all, %d in the sliding window", len(passed), n)
}

// TestQuietHolderSeesOthers: a key quiet on one instance for over a
// minute is skipped by that instance's syncs (nothing of it in their
// transactions), yet takes what the others count for it: once another
// instance spent the limit, the quiet one lets nothing more through.
func TestQuietHolderSeesOthers(t *testing.T) {
	e := newEnv(t, storetest.OpenPostgres(t))
	a, b := e.keys, e.reopen(t)
	k := mustCreate(t, a, `{"service":"contracts","name":"q","owner":"alice","privileges":["get"],"rateLimits":[{"name":"h","limit":10,"windowSeconds":3600}]}`)
	start := t0.Truncate(time.Hour).Add(time.Hour)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	sync := func(now time.Time) {
		t.Helper()
		for _, g := range []*Keys{a, b} {
			if err := g.SyncRates(now); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, g := range []*Keys{a, b} {
		if err := g.Resync(); err != nil {
			t.Fatal(err)
		}
	}
	for s := time.Duration(0); s <= 2*time.Minute; s += time.Second {
		sync(at(s))
	}
	if m := a.meterOf(k.ID); !m.limits.Quiet(at(2 * time.Minute).UnixNano()) {
		t.Fatal("a key asked nothing for two minutes is not quiet")
	}
	// Quiet, it is off the list a sync looks at.
	if l := a.syncing.listed(); len(l) != 0 {
		t.Fatalf("%d holders listed for the sync after two quiet minutes, want none", len(l))
	}
	through := 0
	now := at(2*time.Minute + time.Second)
	for i := range 40 {
		now = now.Add(100 * time.Millisecond)
		if checkAt(b, k.Token, now).Reason == "" {
			through++
		}
		if i%5 == 4 {
			sync(now)
		}
	}
	sync(now.Add(100 * time.Millisecond))
	if through != 10 {
		t.Fatalf("%d let through on the busy instance, want the limit 10", through)
	}
	if d := checkAt(a, k.Token, now.Add(200*time.Millisecond)); d.Reason == "" {
		t.Errorf("the quiet instance let an 11th through: it did not take the busy one's counts")
	}
	// Asked again, it is listed for the next sync, which sends its demand.
	if l := a.syncing.listed(); len(l) != 1 || l[0] != a.meterOf(k.ID) {
		t.Errorf("after a request, the sync's list holds %d holders, want the key", len(l))
	}
}
