package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestBackend is the conformance suite of the two backends.
func TestBackend(t *testing.T) { storetest.Run(t, testBackend) }

func testBackend(t *testing.T, db storage.DB) {
	ctx := context.Background()
	b := newBackend(t, db)
	update := func(fn func(tx storage.Tx) error) {
		t.Helper()
		if err := db.Update(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	rec := func(id string, created time.Time) *Record {
		return &Record{Subscription: Subscription{ID: id, URL: "https://example.com/" + id, Events: []string{"contract.created"},
			Owners: []string{}, Description: "d " + id, Enabled: true, CreationTime: created, LastModificationTime: created},
			SealedSecret: []byte("sealed-" + id)}
	}

	t.Run("subscriptions", func(t *testing.T) {
		first, second := rec("zz-first", t0), rec("aa-second", t0.Add(time.Second))
		second.SealedPrevious, second.PreviousExpiry = []byte("old"), t0.Add(24*time.Hour)
		second.Owners = []string{"alice", "bob"}
		update(func(tx storage.Tx) error {
			if err := b.PutSubscription(tx, second); err != nil {
				return err
			}
			return b.PutSubscription(tx, first)
		})
		var got *Record
		var list []*Record
		err := db.View(ctx, func(tx storage.Tx) (err error) {
			if got, err = b.GetSubscription(tx, "aa-second"); err != nil {
				return err
			}
			if missing, err := b.GetSubscription(tx, "nope"); err != nil || missing != nil {
				return fmt.Errorf("missing subscription: %v %v", missing, err)
			}
			list, err = b.ListSubscriptions(tx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(second)
		if gotJSON, _ := json.Marshal(got); string(gotJSON) != string(want) {
			t.Errorf("read back\n %s\nwant\n %s", gotJSON, want)
		}
		if len(list) != 2 || list[0].ID != "zz-first" || list[1].ID != "aa-second" {
			t.Errorf("list not oldest first: %v", list)
		}
		// Replace.
		changed := *second
		changed.Enabled, changed.SealedPrevious, changed.PreviousExpiry = false, nil, time.Time{}
		update(func(tx storage.Tx) error { return b.PutSubscription(tx, &changed) })
		_ = db.View(ctx, func(tx storage.Tx) (err error) { got, err = b.GetSubscription(tx, "aa-second"); return err })
		if got.Enabled || got.SealedPrevious != nil || !got.PreviousExpiry.IsZero() || got.Owners[1] != "bob" {
			t.Errorf("replaced: %+v", got)
		}
		update(func(tx storage.Tx) error {
			for _, id := range []string{"zz-first", "aa-second"} {
				if found, err := b.DeleteSubscription(tx, id); err != nil || !found {
					return fmt.Errorf("delete %s: %v %v", id, found, err)
				}
			}
			if found, err := b.DeleteSubscription(tx, "zz-first"); err != nil || found {
				return fmt.Errorf("second delete: %v %v", found, err)
			}
			return nil
		})
	})

	t.Run("events are taken once, in order, and a rollback puts them back", func(t *testing.T) {
		committed := 0
		update(func(tx storage.Tx) error {
			for i := range 3 {
				e := &EventRecord{Type: "share.created", Owner: fmt.Sprint("o", i), At: t0.Add(time.Duration(i) * time.Second),
					Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
				if err := b.AddEvent(tx, e, func() { committed++ }); err != nil {
					return err
				}
			}
			return nil
		})
		if committed == 0 {
			t.Error("committed was not called")
		}
		before := committed
		rollback := errors.New("rolled back")
		err := db.Update(ctx, func(tx storage.Tx) error {
			if err := b.AddEvent(tx, &EventRecord{Type: "share.deleted", At: t0}, func() { committed++ }); err != nil {
				return err
			}
			return rollback
		})
		if !errors.Is(err, rollback) || committed != before {
			t.Fatalf("rolled back add: %v, committed %d→%d", err, before, committed)
		}
		err = db.Update(ctx, func(tx storage.Tx) error {
			evs, err := b.TakeEvents(tx, 2)
			if err != nil || len(evs) != 2 {
				return fmt.Errorf("took %v %v", evs, err)
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		var first, rest []EventRecord
		update(func(tx storage.Tx) (err error) {
			if first, err = b.TakeEvents(tx, 2); err != nil {
				return err
			}
			rest, err = b.TakeEvents(tx, 10)
			return err
		})
		all := append(first, rest...)
		if len(first) != 2 || len(all) != 3 {
			t.Fatalf("took %d then %d", len(first), len(rest))
		}
		for i, e := range all {
			if e.Type != "share.created" || e.Owner != fmt.Sprint("o", i) || !e.At.Equal(t0.Add(time.Duration(i)*time.Second)) ||
				string(e.Data) != fmt.Sprintf(`{"n":%d}`, i) || (i > 0 && e.Seq <= all[i-1].Seq) {
				t.Errorf("event %d: %+v", i, e)
			}
		}
		update(func(tx storage.Tx) error {
			evs, err := b.TakeEvents(tx, 10)
			if len(evs) != 0 {
				return fmt.Errorf("outbox not empty: %v", evs)
			}
			return err
		})
	})

	t.Run("deliveries: taken when due, skipped, rescheduled, deleted", func(t *testing.T) {
		s1, s2 := rec("sub-1", t0), rec("sub-2", t0)
		update(func(tx storage.Tx) error {
			if err := b.PutSubscription(tx, s1); err != nil {
				return err
			}
			if err := b.PutSubscription(tx, s2); err != nil {
				return err
			}
			for i, sub := range []string{"sub-1", "sub-1", "sub-2"} {
				d := &Delivery{SubscriptionID: sub, MessageID: fmt.Sprint("msg_", i), Event: "contract.signed",
					Body: []byte(fmt.Sprintf(`{"i":%d}`, i)), EventAt: t0}
				if err := b.AddDelivery(tx, d, nil); err != nil {
					return err
				}
			}
			return nil
		})
		take := func(skipSubs []string, skipIDs []uint64) (*Delivery, time.Time) {
			t.Helper()
			d, next, err := b.TakeDelivery(ctx, "holder-a", time.Minute, skipSubs, skipIDs)
			if err != nil {
				t.Fatal(err)
			}
			return d, next
		}
		d0, _ := take(nil, nil)
		if d0 == nil || d0.MessageID != "msg_0" || d0.SubscriptionID != "sub-1" || string(d0.Body) != `{"i":0}` ||
			d0.Event != "contract.signed" || !d0.EventAt.Equal(t0) || d0.Attempts != 0 {
			t.Fatalf("first take: %+v", d0)
		}
		d2, _ := take([]string{"sub-1"}, nil)
		if d2 == nil || d2.MessageID != "msg_2" {
			t.Fatalf("take skipping sub-1: %+v", d2)
		}
		d1, _ := take(nil, []uint64{d0.ID, d2.ID})
		if d1 == nil || d1.MessageID != "msg_1" {
			t.Fatalf("take skipping the ones in flight: %+v", d1)
		}
		update(func(tx storage.Tx) error {
			for _, d := range []*Delivery{d1, d2} {
				if err := b.RescheduleDelivery(tx, d.ID, "holder-a", time.Hour); err != nil {
					return err
				}
			}
			return b.RescheduleDelivery(tx, d0.ID, "holder-a", 0)
		})
		again, _ := take(nil, nil)
		if again == nil || again.ID != d0.ID || again.Attempts != 1 || again.MessageID != "msg_0" {
			t.Fatalf("due again: %+v", again)
		}
		none, next := take(nil, []uint64{d0.ID})
		if none != nil || next.Before(time.Now().Add(50*time.Minute)) {
			t.Fatalf("after rescheduling: %+v, next %s", none, next)
		}
		update(func(tx storage.Tx) error { return b.DeleteDelivery(tx, d0.ID) })
		_ = db.View(ctx, func(tx storage.Tx) (err error) { again, err = b.GetDelivery(tx, d0.ID); return err })
		if again != nil {
			t.Errorf("deleted delivery still there")
		}
		// Disabling drops the subscription's deliveries; deleting drops
		// the rest.
		update(func(tx storage.Tx) error { return b.DropDeliveries(tx, "sub-1") })
		_ = db.View(ctx, func(tx storage.Tx) (err error) { again, err = b.GetDelivery(tx, d1.ID); return err })
		if again != nil {
			t.Errorf("dropped delivery still there")
		}
		update(func(tx storage.Tx) error { _, err := b.DeleteSubscription(tx, "sub-2"); return err })
		_ = db.View(ctx, func(tx storage.Tx) (err error) { again, err = b.GetDelivery(tx, d2.ID); return err })
		if again != nil {
			t.Errorf("delivery of a deleted subscription still there")
		}
		update(func(tx storage.Tx) error { _, err := b.DeleteSubscription(tx, "sub-1"); return err })
	})

	if db.Backend() == pgdb.Name {
		t.Run("a leased delivery is another holder's only after the lease", func(t *testing.T) {
			update(func(tx storage.Tx) error {
				if err := b.PutSubscription(tx, rec("sub-l", t0)); err != nil {
					return err
				}
				return b.AddDelivery(tx, &Delivery{SubscriptionID: "sub-l", MessageID: "msg_l", Event: "share.viewed", Body: []byte("{}"), EventAt: t0}, nil)
			})
			// The lease runs from the take's now(), which is after before:
			// until before+lease it is surely held, and no one may take
			// the delivery earlier than that. (The server's clock is this
			// machine's: the tests' server runs on it.)
			const lease = 3 * time.Second
			before := time.Now()
			d, _, err := b.TakeDelivery(ctx, "holder-a", lease, nil, nil)
			if err != nil || d == nil {
				t.Fatalf("take: %v %v", d, err)
			}
			other, _, err := b.TakeDelivery(ctx, "holder-b", time.Minute, nil, nil)
			switch checked := time.Since(before); {
			case err != nil:
				t.Fatal(err)
			case checked < lease && other != nil:
				t.Fatalf("taken twice, %v from the first take's start, lease %v: %+v", checked, lease, other)
			case checked >= lease:
				t.Logf("second take %v after the first, past the %v lease: not checked for a double take", checked, lease)
			}
			// The lease's end, as a dead holder's: then holder-b takes it.
			if other == nil {
				testwait.For(t, testwait.Generous, "the delivery taken after the lease", func() bool {
					other, _, err = b.TakeDelivery(ctx, "holder-b", time.Minute, nil, nil)
					return err != nil || other != nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if waited := time.Since(before); other.ID != d.ID || waited < lease {
				t.Fatalf("taken %v from the first take's start, lease %v: %+v", waited, lease, other)
			}
			// The first holder's late result changes nothing.
			update(func(tx storage.Tx) error { return b.RescheduleDelivery(tx, d.ID, "holder-a", 0) })
			if again, _, _ := b.TakeDelivery(ctx, "holder-c", time.Minute, nil, nil); again != nil {
				t.Fatalf("a stale holder released another's lease")
			}
			update(func(tx storage.Tx) error { _, err := b.DeleteSubscription(tx, "sub-l"); return err })
		})
	}

	t.Run("the log keeps the newest entries, newest first", func(t *testing.T) {
		update(func(tx storage.Tx) error { return b.PutSubscription(tx, rec("sub-log", t0)) })
		for i := 1; i <= 7; i++ {
			a := &Attempt{MessageID: fmt.Sprint("msg_", i), Event: "contract.opened", Attempt: i, Status: 500 + i,
				DurationMs: int64(i), Error: fmt.Sprint("HTTP ", 500+i), Timestamp: t0.Add(time.Duration(i) * time.Second)}
			update(func(tx storage.Tx) error { return b.AddAttempt(tx, "sub-log", a, 5) })
		}
		update(func(tx storage.Tx) error {
			return b.AddAttempt(tx, "no-such-subscription", &Attempt{MessageID: "x", Timestamp: t0}, 5)
		})
		read := func(limit, offset int) []int {
			t.Helper()
			var as []Attempt
			if err := db.View(ctx, func(tx storage.Tx) (err error) { as, err = b.Attempts(tx, "sub-log", limit, offset); return err }); err != nil {
				t.Fatal(err)
			}
			var n []int
			for _, a := range as {
				if a.MessageID != fmt.Sprint("msg_", a.Attempt) || a.Status != 500+a.Attempt || a.Event != "contract.opened" ||
					a.DurationMs != int64(a.Attempt) || a.Error != fmt.Sprint("HTTP ", 500+a.Attempt) ||
					!a.Timestamp.Equal(t0.Add(time.Duration(a.Attempt)*time.Second)) {
					t.Errorf("entry %+v", a)
				}
				n = append(n, a.Attempt)
			}
			return n
		}
		for _, c := range []struct {
			limit, offset int
			want          []int
		}{
			{10, 0, []int{7, 6, 5, 4, 3}},
			{2, 0, []int{7, 6}},
			{2, 2, []int{5, 4}},
			{10, 4, []int{3}},
			{10, 5, nil},
		} {
			if got := read(c.limit, c.offset); !slices.Equal(got, c.want) {
				t.Errorf("limit %d offset %d: %v, want %v", c.limit, c.offset, got, c.want)
			}
		}
		update(func(tx storage.Tx) error { _, err := b.DeleteSubscription(tx, "sub-log"); return err })
		update(func(tx storage.Tx) error { return b.PutSubscription(tx, rec("sub-log", t0)) })
		if got := read(10, 0); got != nil {
			t.Errorf("a deleted subscription's log outlived it: %v", got)
		}
	})
}
