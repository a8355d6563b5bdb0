package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
)

// Backend keeps subscriptions, the event outbox, pending deliveries and
// the delivery log in one database. The methods taking a Tx run in the
// caller's transaction; TakeDelivery runs in one of its own.
// Implementations: NewBoltBackend (bolt.go), NewPostgresBackend
// (postgres.go); one suite (backend_test.go) runs against both.
type Backend interface {
	// PutSubscription creates or replaces subscription r.
	PutSubscription(tx storage.Tx, r *Record) error
	// GetSubscription reads subscription id; nil, nil when there is none.
	GetSubscription(tx storage.Tx, id string) (*Record, error)
	// ListSubscriptions reads every subscription, oldest first.
	ListSubscriptions(tx storage.Tx) ([]*Record, error)
	// DeleteSubscription deletes subscription id with its pending
	// deliveries and its log; false when there was none.
	DeleteSubscription(tx storage.Tx, id string) (bool, error)
	// DropDeliveries deletes the pending deliveries of subscription id.
	DropDeliveries(tx storage.Tx, id string) error

	// AddEvent puts e into the outbox. It is on the path of every change
	// that emits (a create): one write, its sequence number left to the
	// backend. committed, if the backend can, is called once tx has
	// committed; otherwise Watch reports the commit.
	AddEvent(tx storage.Tx, e *EventRecord, committed func()) error
	// TakeEvents removes up to limit events from the outbox and returns
	// them in outbox order. Where several processes share the database,
	// an event is taken by one transaction only (the others skip it), and
	// is back in the outbox if that transaction rolls back.
	TakeEvents(tx storage.Tx, limit int) ([]EventRecord, error)

	// AddDelivery queues d, due at once; the backend gives it an ID
	// (which d need not show). committed as for AddEvent; with nil, the
	// commit wakes no one (and sends no NOTIFY) for d: a transaction that
	// adds many passes committed once, and one wake-up serves them all.
	AddDelivery(tx storage.Tx, d *Delivery, committed func()) error
	// TakeDelivery claims the earliest due delivery for holder until
	// lease has passed, skipping those of the subscriptions in skipSubs
	// and the deliveries in skipIDs (this process's attempts in flight).
	// It returns nil with the time at which the earliest other delivery
	// not skipped falls due (zero if none). A backend serving one
	// process only may ignore holder and lease and read without writing.
	TakeDelivery(ctx context.Context, holder string, lease time.Duration, skipSubs []string, skipIDs []uint64) (*Delivery, time.Time, error)
	// GetDelivery reads delivery id; nil, nil when it no longer exists.
	GetDelivery(tx storage.Tx, id uint64) (*Delivery, error)
	// RescheduleDelivery records a failed attempt of delivery id by
	// holder and makes it due again after delay, releasing the lease;
	// nothing if it is gone or another holder has taken it since.
	RescheduleDelivery(tx storage.Tx, id uint64, holder string, delay time.Duration) error
	// DeleteDelivery removes delivery id (delivered or given up).
	DeleteDelivery(tx storage.Tx, id uint64) error

	// AddAttempt appends a to the log of subscription id (if it still
	// exists), keeping the newest keep entries.
	AddAttempt(tx storage.Tx, id string, a *Attempt, keep int) error
	// Attempts reads the log of subscription id, newest first.
	Attempts(tx storage.Tx, id string, limit, offset int) ([]Attempt, error)

	// Watch calls wake whenever deliveries may have been added by a
	// commit that the backend could not report itself (another
	// process's), until ctx ends; events are fanned out by the process
	// that emitted them, or by any at its next poll. A backend that reports every commit
	// returns at once.
	Watch(ctx context.Context, wake func())
}

// Config is what a Store needs.
type Config struct {
	DB      storage.DB
	Backend Backend
	// Sealer seals the secrets (the master key's).
	Sealer *seal.Sealer
	// Now is the clock of creation times, rotations and the worker's
	// signatures and give-ups [time.Now].
	Now func() time.Time
	// Targets are the addresses deliveries may connect to [public
	// unicast addresses only]; SetTargets changes them.
	Targets *Targets
}

// Store is the subscriptions and their deliveries. It is the events.Sink
// of the stores that emit, and safe for concurrent use.
type Store struct {
	db      storage.DB
	backend Backend
	sealer  *seal.Sealer
	now     func() time.Time
	// wake is signalled after a commit that added events or deliveries.
	wake chan struct{}
	// signalFn is signal as a value made once: Emit hands it to every
	// commit without allocating.
	signalFn func()
	// targets are checked on create, on update and by the worker on
	// every connection; a config's start replaces them.
	targets atomic.Pointer[Targets]
}

// NewStore returns the store of cfg.
func NewStore(cfg Config) (*Store, error) {
	if cfg.DB == nil || cfg.Backend == nil || cfg.Sealer == nil {
		return nil, errors.New("webhook: NewStore needs a database, its backend and a sealer")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Store{db: cfg.DB, backend: cfg.Backend, sealer: cfg.Sealer, now: cfg.Now, wake: make(chan struct{}, 1)}
	s.signalFn = s.signal
	if cfg.Targets == nil {
		cfg.Targets = &Targets{}
	}
	s.SetTargets(cfg.Targets)
	return s, nil
}

// SetTargets makes t the addresses that subscriptions and deliveries may
// reach from now on; t must not change afterwards.
func (s *Store) SetTargets(t *Targets) { s.targets.Store(t) }

// signal wakes the worker without blocking; one pending wake-up is
// enough.
func (s *Store) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Emit implements events.Sink: it writes e into the outbox in the
// caller's transaction. The event is fanned out to the subscriptions
// later, by a worker's transaction of its own, so that the change's
// transaction costs one write whatever the subscriptions.
func (s *Store) Emit(tx storage.Tx, e events.Event) error {
	if !knownType(e.Type) {
		return fmt.Errorf("webhook: unknown event type %q", e.Type)
	}
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return fmt.Errorf("webhook: event %s: data is not JSON", e.Type)
	}
	at := e.At
	if at.IsZero() {
		at = s.now()
	}
	// What PostgreSQL keeps of a time: the body is the same on both.
	at = at.UTC().Truncate(time.Microsecond)
	return s.backend.AddEvent(tx, &EventRecord{Type: e.Type, Owner: e.Owner, At: at, Data: e.Data}, s.signalFn)
}

// sealAAD binds a sealed secret to its subscription; the prefix keeps it
// apart from the other values sealed under the master key. The current
// and previous secrets share it, so that a rotation moves the sealed
// current secret to previous as it is.
func sealAAD(id string) []byte { return append([]byte("webhook_secret\x00"), id...) }

// secrets opens r's secrets that sign at now: the current one, and the
// previous one until its expiry.
func (s *Store) secrets(r *Record, now time.Time) (current string, previous string, err error) {
	plain, err := s.sealer.Open(r.SealedSecret, sealAAD(r.ID))
	if err != nil {
		return "", "", errUnsealable
	}
	if r.SealedPrevious != nil && now.Before(r.PreviousExpiry) {
		if prev, err := s.sealer.Open(r.SealedPrevious, sealAAD(r.ID)); err == nil {
			previous = string(prev)
		}
	}
	return string(plain), previous, nil
}

// errUnsealable is a secret sealed under another master key: the
// attempt fails like a send, so that a restart with the right key within
// the retry window still delivers.
var errUnsealable = errors.New("the subscription's secret does not open with this master key")

// view is r as the admin API shows it, without secret.
func view(r *Record, now time.Time) Subscription {
	sub := r.Subscription
	sub.Secret = ""
	sub.PreviousSecretExpiry = nil
	if r.SealedPrevious != nil && now.Before(r.PreviousExpiry) {
		t := r.PreviousExpiry
		sub.PreviousSecretExpiry = &t
	}
	return sub
}

// Create adds a subscription and returns it with its secret, which is
// never shown again (but on rotation).
func (s *Store) Create(ctx context.Context, in *Input) (Subscription, error) {
	sub, err := applyCreate(in, s.targets.Load())
	if err != nil {
		return Subscription{}, err
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	sub.ID = uuid.NewString()
	sub.CreationTime, sub.LastModificationTime = now, now
	secret := newSecret()
	r := &Record{Subscription: sub, SealedSecret: s.sealer.Seal([]byte(secret), sealAAD(sub.ID))}
	err = s.db.Update(ctx, func(tx storage.Tx) error {
		all, err := s.backend.ListSubscriptions(tx)
		if err != nil {
			return err
		}
		if len(all) >= maxSubscriptions {
			return problem.New(http.StatusConflict, problem.CodeConflict,
				fmt.Sprintf("there are %d subscriptions already, the most there may be", maxSubscriptions))
		}
		return s.backend.PutSubscription(tx, r)
	})
	if err != nil {
		return Subscription{}, err
	}
	sub.Secret = secret
	return sub, nil
}

// List returns every subscription, oldest first, without secrets.
func (s *Store) List(ctx context.Context) ([]Subscription, error) {
	var recs []*Record
	err := s.db.View(ctx, func(tx storage.Tx) (err error) {
		recs, err = s.backend.ListSubscriptions(tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]Subscription, len(recs))
	for i, r := range recs {
		out[i] = view(r, now)
	}
	return out, nil
}

// Get returns subscription id without its secret.
func (s *Store) Get(ctx context.Context, id string) (Subscription, error) {
	var r *Record
	err := s.db.View(ctx, func(tx storage.Tx) (err error) {
		r, err = s.subscription(tx, id)
		return err
	})
	if err != nil {
		return Subscription{}, err
	}
	return view(r, s.now()), nil
}

// subscription reads subscription id in tx; ErrNotFound if there is none.
func (s *Store) subscription(tx storage.Tx, id string) (*Record, error) {
	r, err := s.backend.GetSubscription(tx, id)
	if err == nil && r == nil {
		err = ErrNotFound
	}
	return r, err
}

// Update changes subscription id's editable fields. Disabling it drops
// its pending deliveries.
func (s *Store) Update(ctx context.Context, id string, in *Input) (Subscription, error) {
	var out *Record
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		r, err := s.subscription(tx, id)
		if err != nil {
			return err
		}
		sub, err := applyUpdate(r.Subscription, in, s.targets.Load())
		if err != nil {
			return err
		}
		wasEnabled := r.Enabled
		sub.LastModificationTime = s.now().UTC().Truncate(time.Microsecond)
		next := *r
		next.Subscription = sub
		if err := s.backend.PutSubscription(tx, &next); err != nil {
			return err
		}
		if wasEnabled && !sub.Enabled {
			if err := s.backend.DropDeliveries(tx, id); err != nil {
				return err
			}
		}
		out = &next
		return nil
	})
	if err != nil {
		return Subscription{}, err
	}
	return view(out, s.now()), nil
}

// RotateSecret gives subscription id a new secret, returned with it; the
// one it replaces signs too for RotationOverlap (a previous one still
// signing then stops).
func (s *Store) RotateSecret(ctx context.Context, id string) (Subscription, error) {
	secret := newSecret()
	var out *Record
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		r, err := s.subscription(tx, id)
		if err != nil {
			return err
		}
		now := s.now().UTC().Truncate(time.Microsecond)
		next := *r
		next.SealedPrevious = r.SealedSecret
		next.PreviousExpiry = now.Add(RotationOverlap)
		next.SealedSecret = s.sealer.Seal([]byte(secret), sealAAD(id))
		next.LastModificationTime = now
		if err := s.backend.PutSubscription(tx, &next); err != nil {
			return err
		}
		out = &next
		return nil
	})
	if err != nil {
		return Subscription{}, err
	}
	sub := view(out, s.now())
	sub.Secret = secret
	return sub, nil
}

// ErrDisabled answers a test delivery to a disabled subscription.
var ErrDisabled = problem.New(http.StatusConflict, problem.CodeConflict,
	"the subscription is disabled: enable it to send it a test event")

// Test queues a webhook.test event for subscription id alone and returns
// its message id.
func (s *Store) Test(ctx context.Context, id string) (string, error) {
	now := s.now().UTC().Truncate(time.Microsecond)
	data, err := json.Marshal(map[string]string{"subscriptionId": id})
	if err != nil {
		return "", err
	}
	b, err := newBody(events.WebhookTest, now, data)
	if err != nil {
		return "", err
	}
	d := &Delivery{SubscriptionID: id, MessageID: newMessageID(), Event: events.WebhookTest, Body: b, EventAt: now}
	err = s.db.Update(ctx, func(tx storage.Tx) error {
		r, err := s.subscription(tx, id)
		if err != nil {
			return err
		}
		if !r.Enabled {
			return ErrDisabled
		}
		return s.backend.AddDelivery(tx, d, s.signalFn)
	})
	if err != nil {
		return "", err
	}
	return d.MessageID, nil
}

// Deliveries returns subscription id's delivery log, newest first.
func (s *Store) Deliveries(ctx context.Context, id string, limit, offset int) ([]Attempt, error) {
	var out []Attempt
	err := s.db.View(ctx, func(tx storage.Tx) error {
		if _, err := s.subscription(tx, id); err != nil {
			return err
		}
		var err error
		out, err = s.backend.Attempts(tx, id, limit, offset)
		return err
	})
	if out == nil {
		out = []Attempt{}
	}
	return out, err
}

// Delete removes subscription id with its pending deliveries and log. An
// attempt in flight may still arrive.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.db.Update(ctx, func(tx storage.Tx) error {
		found, err := s.backend.DeleteSubscription(tx, id)
		if err == nil && !found {
			err = ErrNotFound
		}
		return err
	})
}

// dispatchBatch bounds the events one fan-out transaction takes.
const dispatchBatch = 100

// dispatch fans a batch of events out of the outbox into deliveries, one
// per event and subscription that wants it, in one transaction: so each
// event is fanned out exactly once, whatever the processes sharing the
// database. It returns how many events it took.
func (s *Store) dispatch(ctx context.Context) (int, error) {
	n := 0
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		evs, err := s.backend.TakeEvents(tx, dispatchBatch)
		if err != nil || len(evs) == 0 {
			n = 0
			return err
		}
		n = len(evs)
		committed := s.signalFn
		subs, err := s.backend.ListSubscriptions(tx)
		if err != nil {
			return err
		}
		for _, e := range evs {
			var b []byte
			for _, r := range subs {
				if !r.wanted(e.Type, e.Owner) {
					continue
				}
				if b == nil {
					if b, err = newBody(e.Type, e.At, e.Data); err != nil {
						return fmt.Errorf("webhook: event %d: %w", e.Seq, err)
					}
				}
				d := &Delivery{SubscriptionID: r.ID, MessageID: newMessageID(), Event: e.Type, Body: b, EventAt: e.At}
				if err := s.backend.AddDelivery(tx, d, committed); err != nil {
					return err
				}
				committed = nil // one wake-up for the whole fan-out
			}
		}
		return nil
	})
	return n, err
}

// sortRecords orders subscriptions oldest first.
func sortRecords(rs []*Record) {
	slices.SortFunc(rs, func(a, b *Record) int {
		if c := a.CreationTime.Compare(b.CreationTime); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
}

// sortEvents orders events as the outbox did.
func sortEvents(es []EventRecord) {
	slices.SortFunc(es, func(a, b EventRecord) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
}

// Interface guards
var _ events.Sink = (*Store)(nil)
