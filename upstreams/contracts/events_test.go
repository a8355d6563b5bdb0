package contracts

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/eventstest"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// personal is what fullBody says of its signers and watchers, none of
// which an event may carry.
var personal = []string{"Ann Tenant", "ann@example.com", "Lou Landlord", "+41446681800", "Wit Ness",
	"Agency", "desk@agency.example", `"signers"`, `"watchers"`, "tokenHash", "sealedToken", "accessUrl"}

// wantEvent is what a test expects of one event.
type wantEvent struct {
	typ string
	at  time.Time
	// status is the data's status; archived whether it has an
	// archivalTimestamp; signer the index of the signer in signerId (-1:
	// none).
	status   string
	archived bool
	signer   int
}

// searchView is the Contract Object of id as search returns it, read
// through the API.
func searchView(t *testing.T, f *fixture, name string) map[string]any {
	t.Helper()
	page := searchPageOf(t, f, "placement=any&statuses=any&substring="+strings.ReplaceAll(name, " ", "+"))
	if len(page.Contracts) != 1 {
		t.Fatalf("search for %q finds %d contracts", name, len(page.Contracts))
	}
	return page.Contracts[0]
}

// checkEvents compares got with want, every event being of the contract
// named id, created by owner. view, when set, is what search shows of it
// at the end; each event's data, without signerId, must equal the search
// view at the time of the event, so the last one must equal view.
func checkEvents(t *testing.T, got []events.Event, want []wantEvent, id, owner string, signers []string, view map[string]any) {
	t.Helper()
	if !slices.Equal(eventstest.Types(got), typesOf(want)) {
		t.Fatalf("events %v, want %v", eventstest.Types(got), typesOf(want))
	}
	for i, e := range got {
		w := want[i]
		if e.Owner != owner {
			t.Errorf("%s: owner %q, want %q", e.Type, e.Owner, owner)
		}
		if !e.At.Equal(w.at) {
			t.Errorf("%s: at %v, want %v", e.Type, e.At, w.at)
		}
		for _, p := range personal {
			if strings.Contains(string(e.Data), p) {
				t.Errorf("%s: data holds %q: %s", e.Type, p, e.Data)
			}
		}
		d := eventstest.Data(t, e)
		if d["id"] != id || d["status"] != w.status {
			t.Errorf("%s: id %v status %v, want %s %s", e.Type, d["id"], d["status"], id, w.status)
		}
		if _, ok := d["archivalTimestamp"]; ok != w.archived {
			t.Errorf("%s: archivalTimestamp present %v, want %v", e.Type, ok, w.archived)
		}
		sid, hasSigner := d["signerId"]
		switch {
		case w.signer < 0 && hasSigner:
			t.Errorf("%s: signerId %v, want none", e.Type, sid)
		case w.signer >= 0 && sid != signers[w.signer]:
			t.Errorf("%s: signerId %v, want %s", e.Type, sid, signers[w.signer])
		}
		delete(d, "signerId")
		if view != nil && i == len(got)-1 && !reflect.DeepEqual(d, view) {
			t.Errorf("%s: data\n%v\nwant the search view\n%v", e.Type, d, view)
		}
	}
}

func typesOf(want []wantEvent) []string {
	out := make([]string, len(want))
	for i, w := range want {
		out[i] = w.typ
	}
	return out
}

// TestContractEvents runs each operation of the store and the API on a
// contract made from fullBody by alice and checks the events that commit
// with it: exactly the expected ones, with the Contract Object as search
// shows it, none for a refused operation.
func TestContractEvents(t *testing.T) {
	expires := t0.Add(DefaultContractValidity)
	later := t0.Add(time.Hour)
	cases := []struct {
		name string
		// act runs on the contract id made at t0 (signers' ids in sg) and
		// returns the name under which search finds it afterwards, ""
		// when it is gone.
		act  func(t *testing.T, f *fixture, id string, sg []string) string
		want []wantEvent
	}{
		{
			name: "archive",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(later)
				mustStatus(t, f.do(alice, http.MethodPatch, Prefix+"/"+id, ""), http.StatusNoContent)
				return "Flat 3B lease"
			},
			want: []wantEvent{{typ: events.ContractArchived, at: later, status: "sent", archived: true, signer: -1}},
		},
		{
			name: "archive twice tells once",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(later)
				mustStatus(t, f.do(alice, http.MethodPatch, Prefix+"/"+id, ""), http.StatusNoContent)
				f.clock.Set(later.Add(time.Hour))
				mustStatus(t, f.do(alice, http.MethodPatch, Prefix+"/"+id, ""), http.StatusNoContent)
				return "Flat 3B lease"
			},
			want: []wantEvent{{typ: events.ContractArchived, at: later, status: "sent", archived: true, signer: -1}},
		},
		{
			name: "archive refused",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				decodeProblem(t, f.do(alice, http.MethodPatch, Prefix+"/0190d3f2-7b3c-7e4a-9f2b-3c4d5e6f7a8b", ""), http.StatusNotFound, "not_found")
				decodeProblem(t, f.do(alice, http.MethodPatch, Prefix+"/"+id, `{"x":1}`), http.StatusBadRequest, "invalid_request")
				return "Flat 3B lease"
			},
		},
		{
			name: "delete",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(later)
				mustStatus(t, f.do(alice, http.MethodDelete, Prefix+"/"+id, ""), http.StatusNoContent)
				return ""
			},
			want: []wantEvent{{typ: events.ContractDeleted, at: later, status: "sent", signer: -1}},
		},
		{
			name: "delete refused",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				decodeProblem(t, f.do(alice, http.MethodDelete, Prefix+"/0190d3f2-7b3c-7e4a-9f2b-3c4d5e6f7a8b", ""), http.StatusNotFound, "not_found")
				decodeProblem(t, f.do(alice, http.MethodDelete, Prefix+"/not-an-id", ""), http.StatusNotFound, "not_found")
				return "Flat 3B lease"
			},
		},
		{
			name: "sweep tells once",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(expires.Add(time.Minute))
				for want := 1; want >= 0; want-- {
					if n, err := f.store.SweepExpired(ctx(), 0); err != nil || n != want {
						t.Fatalf("sweep wrote %d (%v), want %d", n, err, want)
					}
				}
				return "Flat 3B lease"
			},
			want: []wantEvent{{typ: events.ContractExpired, at: expires, status: "expired", signer: -1}},
		},
		{
			name: "archive writes expiry down before the sweeper",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(expires.Add(time.Minute))
				mustStatus(t, f.do(alice, http.MethodPatch, Prefix+"/"+id, ""), http.StatusNoContent)
				if n, err := f.store.SweepExpired(ctx(), 0); err != nil || n != 0 {
					t.Fatalf("sweep wrote %d (%v) after the archive", n, err)
				}
				return "Flat 3B lease"
			},
			want: []wantEvent{
				{typ: events.ContractExpired, at: expires, status: "expired", archived: true, signer: -1},
				{typ: events.ContractArchived, at: expires.Add(time.Minute), status: "expired", archived: true, signer: -1},
			},
		},
		{
			name: "delete after expiry shows it expired",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(expires)
				mustStatus(t, f.do(alice, http.MethodDelete, Prefix+"/"+id, ""), http.StatusNoContent)
				return ""
			},
			want: []wantEvent{{typ: events.ContractDeleted, at: expires, status: "expired", signer: -1}},
		},
		{
			name: "signer changes through Update",
			act: func(t *testing.T, f *fixture, id string, sg []string) string {
				f.clock.Set(later)
				// The signing lifecycle's moves, made here by hand: a
				// first opening, a change that changes nothing (a
				// reopening writes nothing either), the first signer
				// signs, then the last two decide in one change (no path
				// does that, but the events follow the state, in signer
				// order); completed comes with the sealed documents, when
				// the finalized PDF is stored.
				steps := []func(tx storage.Tx, c *Contract) error{
					func(_ storage.Tx, c *Contract) error { c.Signers[1].OpenedTimestamp = later; return nil },
					func(storage.Tx, *Contract) error { return nil },
					func(_ storage.Tx, c *Contract) error { sign(c, 0, later); return nil },
					func(_ storage.Tx, c *Contract) error {
						sign(c, 1, later.Add(time.Minute))
						sign(c, 2, later.Add(2*time.Minute))
						return nil
					},
					func(tx storage.Tx, c *Contract) (err error) {
						c.FinalizedPDF, err = f.store.PutAttachment(tx, c, "lease-signed.pdf", []byte("%PDF-1.5 sealed"))
						return err
					},
				}
				for _, step := range steps {
					if _, err := f.store.Update(ctx(), id, step); err != nil {
						t.Fatal(err)
					}
				}
				return "Flat 3B lease"
			},
			want: []wantEvent{
				{typ: events.ContractOpened, at: later, status: "sent", signer: 1},
				{typ: events.ContractSigned, at: later, status: "ongoing", signer: 0},
				{typ: events.ContractSigned, at: later.Add(time.Minute), status: "signed", signer: 1},
				{typ: events.ContractSigned, at: later.Add(2 * time.Minute), status: "signed", signer: 2},
				{typ: events.ContractCompleted, at: later.Add(2 * time.Minute), status: "signed", signer: -1},
			},
		},
		{
			name: "rejection",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(later)
				if _, err := f.store.Update(ctx(), id, func(_ storage.Tx, c *Contract) error {
					c.Signers[2].Decision, c.Signers[2].DecisionTimestamp = DecisionRejected, later
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return "Flat 3B lease"
			},
			want: []wantEvent{{typ: events.ContractRejected, at: later, status: "rejected", signer: 2}},
		},
		{
			name: "rolled-back update tells nothing",
			act: func(t *testing.T, f *fixture, id string, _ []string) string {
				f.clock.Set(later)
				boom := errors.New("boom")
				_, err := f.store.Update(ctx(), id, func(_ storage.Tx, c *Contract) error {
					sign(c, 0, later)
					c.ArchivalTimestamp = later
					return boom
				})
				if !errors.Is(err, boom) {
					t.Fatalf("update: %v", err)
				}
				return "Flat 3B lease"
			},
		},
	}
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					db := b.Open(t)
					rec := eventstest.New(t, db)
					f := newFixtureOn(t, db, func(c *Config) { c.Events = rec })
					created := f.create(alice, fullBody)
					id := created["id"].(string)
					var sg []string
					for _, s := range created["signers"].([]any) {
						sg = append(sg, s.(map[string]any)["id"].(string))
					}
					checkEvents(t, rec.Take(t), []wantEvent{{typ: events.ContractCreated, at: t0, status: "sent", signer: -1}},
						id, alice, sg, searchView(t, f, "Flat 3B lease"))

					name := tc.act(t, f, id, sg)
					var view map[string]any
					if name != "" {
						view = searchView(t, f, name)
					}
					checkEvents(t, rec.Take(t), tc.want, id, alice, sg, view)
				})
			}
		})
	}
}

func sign(c *Contract, i int, at time.Time) {
	c.Signers[i].Decision, c.Signers[i].DecisionTimestamp = DecisionSigned, at
}

func mustStatus(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
}

// TestDeletedEventIsTheContractAsItWas compares contract.deleted's data
// with what search showed just before the delete.
func TestDeletedEventIsTheContractAsItWas(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		rec := eventstest.New(t, db)
		f := newFixtureOn(t, db, func(c *Config) { c.Events = rec })
		id := f.create(bob, fullBody)["id"].(string)
		f.clock.Set(t0.Add(time.Hour))
		mustStatus(t, f.do(bob, http.MethodPatch, Prefix+"/"+id, ""), http.StatusNoContent)
		f.clock.Set(t0.Add(DefaultContractValidity)) // effective expiry, not written down
		before := searchView(t, f, "Flat 3B lease")
		rec.Take(t)
		mustStatus(t, f.do(bob, http.MethodDelete, Prefix+"/"+id, ""), http.StatusNoContent)
		got := rec.Take(t)
		checkEvents(t, got, []wantEvent{{typ: events.ContractDeleted, at: t0.Add(DefaultContractValidity), status: "expired", archived: true, signer: -1}},
			id, bob, nil, before)
	})
}

// TestCreateEventsRefused: a create that is refused, or whose
// transaction fails, tells nothing.
func TestCreateEventsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mod    func(*Config)
		body   string
		status int
	}{
		{"invalid body", nil, `{"templateId":"PAGE-1","name":"","signers":[]}`, http.StatusBadRequest},
		{"unknown template", nil, `{"templateId":"PAGE-9","name":"N","signers":[{"fullName":"S","accessKind":"url"}]}`, http.StatusBadRequest},
		{"hook fails", func(c *Config) {
			c.OnCreate = func(storage.Tx, *Contract, Origin) error { return errors.New("outbox unavailable") }
		}, fullBody, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, db storage.DB) {
				rec := eventstest.New(t, db)
				f := newFixtureOn(t, db, func(c *Config) {
					c.Events = rec
					if tc.mod != nil {
						tc.mod(c)
					}
				})
				mustStatus(t, f.do(alice, http.MethodPost, Prefix, tc.body), tc.status)
				if got := rec.All(t); len(got) != 0 {
					t.Errorf("events %v", eventstest.Types(got))
				}
			})
		})
	}
}

type sinkFunc func(storage.Tx, events.Event) error

func (f sinkFunc) Emit(tx storage.Tx, e events.Event) error { return f(tx, e) }

// failingSink refuses every event, as an outbox that cannot write.
type failingSink struct{}

func (failingSink) Emit(storage.Tx, events.Event) error { return errors.New("outbox full") }

// TestSinkFailureFailsTheChange: the event is part of the change, so a
// Sink that cannot take it undoes the change.
func TestSinkFailureFailsTheChange(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		var sink struct {
			sync.Mutex
			events.Sink
		}
		sink.Sink = events.Discard
		f := newFixtureOn(t, db, func(c *Config) {
			c.Events = sinkFunc(func(tx storage.Tx, e events.Event) error {
				sink.Lock()
				defer sink.Unlock()
				return sink.Emit(tx, e)
			})
		})
		id := f.createNamed(alice, "PAGE-1", "Kept")
		sink.Lock()
		sink.Sink = failingSink{}
		sink.Unlock()

		decodeProblem(t, f.do(alice, http.MethodPost, Prefix, fullBody), http.StatusInternalServerError, "internal")
		decodeProblem(t, f.do(alice, http.MethodPatch, Prefix+"/"+id, ""), http.StatusInternalServerError, "internal")
		decodeProblem(t, f.do(alice, http.MethodDelete, Prefix+"/"+id, ""), http.StatusInternalServerError, "internal")
		f.clock.Set(t0.Add(DefaultContractValidity))
		if _, err := f.store.SweepExpired(ctx(), 0); err == nil {
			t.Error("sweep succeeded without its events")
		}
		page := searchPageOf(t, f, "placement=any")
		if *page.TotalCount != 1 || page.Contracts[0]["id"] != id {
			t.Fatalf("search finds %s", page.raw["contracts"])
		}
		if _, archived := page.Contracts[0]["archivalTimestamp"]; archived {
			t.Error("archived without its event")
		}
		if n, _ := f.store.SweepExpired(ctx(), 0); n != 0 {
			// Still failing: nothing may have been written.
			t.Errorf("sweep wrote %d", n)
		}
		if n := f.bucketLen(bucketByExpiry); n != 1 {
			t.Errorf("expiry index holds %d, want the contract still due", n)
		}
	})
}

// TestCreatedEventsUnderBatchRetries creates contracts at once while
// some creates of the same batches fail inside the transaction (an
// unknown template is found there), which makes the others' functions
// run again: exactly one contract.created per contract that exists, with
// its data, and none for the failed ones.
func TestCreatedEventsUnderBatchRetries(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		rec := eventstest.New(t, db)
		f := newFixtureOn(t, db, func(c *Config) { c.Events = rec })
		const workers, each = 8, 6
		var wg sync.WaitGroup
		var mu sync.Mutex
		made := map[string]string{} // id → owner
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					tpl := []string{"PAGE-1", "PAGE-2", "PAGE-404"}[(w+i)%3]
					owner := fmt.Sprintf("owner-%d", w%3)
					c, err := f.store.Create(ctx(), owner, &CreateRequest{TemplateID: tpl, Name: fmt.Sprintf("C %d/%d", w, i),
						Signers: []SignerRequest{{FullName: "S", AccessKind: "url"}}})
					if tpl == "PAGE-404" {
						if err == nil {
							t.Error("create from an unknown template succeeded")
						}
						continue
					}
					if err != nil {
						t.Error(err)
						continue
					}
					mu.Lock()
					made[c.ID] = owner
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		got := rec.All(t)
		if len(got) != len(made) || len(made) != searchCount(t, f, "") {
			t.Fatalf("%d events for %d contracts made, %d found", len(got), len(made), searchCount(t, f, ""))
		}
		collection := map[string]string{"PAGE-1": "SPACE-A", "PAGE-2": "SPACE-B"}
		seen := map[string]bool{}
		for _, e := range got {
			d := eventstest.Data(t, e)
			id, _ := d["id"].(string)
			if e.Type != events.ContractCreated || made[id] != e.Owner || seen[id] {
				t.Errorf("event %s of %s by %s (made by %q, seen %v)", e.Type, id, e.Owner, made[id], seen[id])
			}
			seen[id] = true
			if d["collectionId"] != collection[d["templateId"].(string)] || d["createdById"] != e.Owner {
				t.Errorf("data %s", e.Data)
			}
		}
	})
}

// BenchmarkEventData is the cost that a create adds to its batch
// transaction for contract.created: rendering the data once (into a Sink
// that keeps nothing).
func BenchmarkEventData(b *testing.B) {
	s := &Store{events: events.Discard}
	c := &Contract{ID: "0190d3f2-7b3c-7e4a-9f2b-3c4d5e6f7a8b", TemplateID: "PAGE-1", CollectionID: "SPACE-A",
		Name: "Flat 3B lease", CreatedByID: "alice", CreationTimestamp: t0, ExpirationTimestamp: t0.Add(DefaultContractValidity),
		Status: StatusSent, Signers: make([]Signer, 3)}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.emit(nil, events.ContractCreated, c, t0, ""); err != nil {
			b.Fatal(err)
		}
	}
}
