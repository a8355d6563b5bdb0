package keystore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// TestChangesOfTwoInstances: two instances share a database, and b has
// not heard of a's changes (no notification, no resync). A change b then
// makes is made on what a stored, never over it: a's disable, roll,
// consumer quota and plan limit all stay, b's own change is kept beside
// them, and nothing a deleted comes back. Each case fails where b stores
// its stale copy.
func TestChangesOfTwoInstances(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		a := e.keys
		k := mustCreate(t, a, `{`+validContracts+`}`)
		rolled := mustCreate(t, a, `{`+validContracts+`}`)
		gone := mustCreate(t, a, `{`+validContracts+`}`)
		p := mustPlan(t, a, `{"name":"tier","quota":{"limit":1000,"period":"day"}}`)
		c := mustConsumer(t, a, `{"name":"acme"}`)
		goneConsumer := mustConsumer(t, a, `{"name":"left"}`)
		b := e.reopen(t)

		if _, err := a.Update(k.ID, input(t, `{"enabled":false}`)); err != nil {
			t.Fatal(err)
		}
		roll, err := a.Roll(rolled.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(gone.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.UpdateConsumer(c.ID, consumerInput(t, `{"quota":{"limit":10,"period":"day"}}`)); err != nil {
			t.Fatal(err)
		}
		if err := a.DeleteConsumer(goneConsumer.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.UpdatePlan(p.ID, planInput(t, `{"quota":{"limit":10,"period":"day"}}`)); err != nil {
			t.Fatal(err)
		}

		// b's changes, each on a record a changed since b read it.
		if got, err := b.Update(k.ID, input(t, `{"description":"from b"}`)); err != nil || got.Enabled || got.Description != "from b" {
			t.Errorf("b's change of the key a disabled: %+v, %v", got, err)
		}
		if got, err := b.Update(rolled.ID, input(t, `{"name":"renamed"}`)); err != nil || got.Name != "renamed" || got.TokenPrefix != roll.TokenPrefix {
			t.Errorf("b's change of the key a rolled: %+v, %v", got, err)
		}
		if _, err := b.Update(gone.ID, input(t, `{"description":"from b"}`)); err != ErrNotFound {
			t.Errorf("b's change of the key a deleted: %v, want ErrNotFound", err)
		}
		if got, err := b.UpdateConsumer(c.ID, consumerInput(t, `{"description":"from b"}`)); err != nil || got.Quota == nil || got.Quota.Limit != 10 || got.Description != "from b" {
			t.Errorf("b's change of the consumer a gave a quota: %+v, %v", got, err)
		}
		if _, err := b.UpdateConsumer(goneConsumer.ID, consumerInput(t, `{"description":"from b"}`)); err != ErrConsumerNotFound {
			t.Errorf("b's change of the consumer a deleted: %v, want ErrConsumerNotFound", err)
		}
		if got, err := b.UpdatePlan(p.ID, planInput(t, `{"description":"from b"}`)); err != nil || got.Quota == nil || got.Quota.Limit != 10 || got.Description != "from b" {
			t.Errorf("b's change of the plan a lowered: %+v, %v", got, err)
		}

		// What is stored, as a third instance reads it.
		third := e.reopen(t)
		if got, err := third.Get(k.ID); err != nil || got.Enabled || got.Description != "from b" {
			t.Errorf("stored key: %+v, %v; want disabled, with b's description", got, err)
		}
		if d := checkAt(third, roll.Token, e.clock.Now().Add(time.Second)); !d.Authorized() {
			t.Errorf("the rolled token after b's change: %+v", d)
		}
		if _, err := third.Get(gone.ID); err != ErrNotFound {
			t.Errorf("the deleted key: %v, want ErrNotFound", err)
		}
		if got, err := third.GetConsumer(c.ID); err != nil || got.Quota == nil || got.Quota.Limit != 10 || got.Description != "from b" {
			t.Errorf("stored consumer: %+v, %v", got, err)
		}
		if _, err := third.GetConsumer(goneConsumer.ID); err != ErrConsumerNotFound {
			t.Errorf("the deleted consumer: %v, want ErrConsumerNotFound", err)
		}
		if got, err := third.GetPlan(p.ID); err != nil || got.Quota == nil || got.Quota.Limit != 10 || got.Description != "from b" {
			t.Errorf("stored plan: %+v, %v", got, err)
		}
		// Each version has a time of its own, even within a millisecond
		// (the test's clock stands still).
		if got, _ := third.Get(k.ID); !got.LastModificationTime.After(k.LastModificationTime.Add(time.Millisecond)) {
			t.Errorf("two changes in one instant: lastModificationTime %v after %v", got.LastModificationTime, k.LastModificationTime)
		}
	})
}

// TestExpiryMarkKept: the key.expiring mark that one instance sets (no
// change of the key's, so no new lastModificationTime) stays through a
// change another makes from a copy read before it: the warning is not
// sent again.
func TestExpiryMarkKept(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		a := e.keys
		nva := e.clock.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
		k := mustCreate(t, a, `{`+validContracts+`,"notValidAfter":"`+nva+`"}`)
		b := e.reopen(t)
		const window = 7 * 24 * time.Hour
		if n, err := a.WarnExpiring(e.clock.Now(), window); err != nil || n != 1 {
			t.Fatalf("WarnExpiring = %d, %v; want 1", n, err)
		}
		if _, err := b.Update(k.ID, input(t, `{"description":"from b"}`)); err != nil {
			t.Fatal(err)
		}
		if n, err := e.reopen(t).WarnExpiring(e.clock.Now(), window); err != nil || n != 0 {
			t.Errorf("after b's change, WarnExpiring = %d, %v; want 0: the mark was wiped", n, err)
		}
		// A new end of validity is a new warning.
		later := e.clock.Now().Add(72 * time.Hour).UTC().Format(time.RFC3339)
		if _, err := b.Update(k.ID, input(t, `{"notValidAfter":"`+later+`"}`)); err != nil {
			t.Fatal(err)
		}
		if n, err := e.reopen(t).WarnExpiring(e.clock.Now(), window); err != nil || n != 1 {
			t.Errorf("after a new notValidAfter, WarnExpiring = %d, %v; want 1", n, err)
		}

		// A copy carrying an older mark does not undo a newer one: c read
		// the key marked for its first end of validity, and the warning
		// for the second went out before c's change.
		k2 := mustCreate(t, a, `{`+validContracts+`,"notValidAfter":"`+nva+`"}`)
		if n, err := a.WarnExpiring(e.clock.Now(), window); err != nil || n != 1 {
			t.Fatalf("WarnExpiring of the second key = %d, %v; want 1", n, err)
		}
		if _, err := a.Update(k2.ID, input(t, `{"notValidAfter":"`+later+`"}`)); err != nil {
			t.Fatal(err)
		}
		c := e.reopen(t)
		if n, err := a.WarnExpiring(e.clock.Now(), window); err != nil || n != 1 {
			t.Fatalf("WarnExpiring for the second end = %d, %v; want 1", n, err)
		}
		if _, err := c.Update(k2.ID, input(t, `{"description":"from c"}`)); err != nil {
			t.Fatal(err)
		}
		if n, err := e.reopen(t).WarnExpiring(e.clock.Now(), window); err != nil || n != 0 {
			t.Errorf("after c's change, WarnExpiring = %d, %v; want 0: an older mark replaced the newer", n, err)
		}
	})
}

// TestRespelledVersion: a stored lastModificationTime spelled otherwise
// than encoding/json spells it (a record edited by hand, "…00.000Z") is
// the same version: a change over it is taken, not refused as stale.
func TestRespelledVersion(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		k := mustCreate(t, e.keys, `{`+validContracts+`}`)
		spelled := k.LastModificationTime.UTC().Format("2006-01-02T15:04:05.000000Z")
		if spelled == k.LastModificationTime.UTC().Format(time.RFC3339Nano) {
			t.Fatalf("the test's spelling %s is encoding/json's own", spelled)
		}
		id, err := idBytes(k.ID)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		err = db.Update(ctx, func(tx storage.Tx) error {
			if db.Backend() == boltdb.Name {
				b := boltdb.Of(tx).Bucket(bucketKeys)
				var rec map[string]any
				if err := json.Unmarshal(b.Get(id), &rec); err != nil {
					return err
				}
				rec["lastModificationTime"] = spelled
				v, err := json.Marshal(rec)
				if err != nil {
					return err
				}
				return b.Put(id, v)
			}
			_, err := pgdb.Of(tx).Exec(ctx, `UPDATE keys SET record = jsonb_set(record, '{lastModificationTime}', to_jsonb($2::text)) WHERE id = $1`, id, spelled)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.reopen(t).Update(k.ID, input(t, `{"description":"after"}`)); err != nil {
			t.Fatalf("a change over the respelled version: %v", err)
		}
		if got, _ := e.reopen(t).Get(k.ID); got.Description != "after" {
			t.Errorf("description %q, want after", got.Description)
		}
	})
}
