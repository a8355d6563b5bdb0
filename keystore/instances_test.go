package keystore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
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
		ea, eb := e.keys.Lookup(HashToken(k.Token)), other.Lookup(HashToken(k.Token))
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
		if other.Lookup(HashToken(gone.Token)) == nil || other.Lookup(HashToken(added.Token)) != nil {
			t.Fatal("the other instance changed without a resync")
		}
		if err := other.Resync(); err != nil {
			t.Fatal(err)
		}
		if other.Lookup(HashToken(gone.Token)) != nil {
			t.Error("a key deleted elsewhere still checks here")
		}
		if other.Lookup(HashToken(added.Token)) == nil {
			t.Error("a key created elsewhere is unknown here")
		}
		if g, err := other.Get(changed.ID); err != nil || len(g.Privileges) != 2 {
			t.Errorf("changed key here: %+v, %v", g.Privileges, err)
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
	testwait.For(t, testwait.Generous, "a key created before it listened", func() bool { return other.Lookup(HashToken(before.Token)) != nil })
	k := mustCreate(t, e.keys, `{`+validContracts+`}`)
	testwait.For(t, testwait.Generous, "the create", func() bool { return other.Lookup(HashToken(k.Token)) != nil })
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
		return other.Lookup(HashToken(rolled.Token)) != nil && other.Lookup(HashToken(k.Token)) != nil
	})
	if err := e.keys.Delete(k.ID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "the delete", func() bool { return other.Lookup(HashToken(k.Token)) == nil })

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
	testwait.For(t, testwait.Generous, "a key announced by \"*\"", func() bool { return other.Lookup(HashToken(silent.Token)) != nil })
}

func mustInput(t *testing.T, body string) *KeyInput {
	t.Helper()
	in := new(KeyInput)
	if err := json.Unmarshal([]byte(body), in); err != nil {
		t.Fatal(err)
	}
	return in
}
