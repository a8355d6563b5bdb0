package pgdb

import (
	"context"
	"sync"

	"github.com/keygate/keygate/internal/storage"
)

// Wakeup wakes the workers of every instance on a schema when one of them
// commits work for them (an outbox's new rows): Notify sends a NOTIFY on
// the topic's channel, and Watch wakes a worker on each one.
type Wakeup struct {
	db      *DB
	channel string

	mu sync.Mutex
	// notifying: a NOTIFY is being sent; again: another Notify came
	// meanwhile, so one more is due.
	notifying, again bool
}

// NewWakeup returns the wake-up of topic in db's schema.
func (d *DB) NewWakeup(topic string) *Wakeup {
	return &Wakeup{db: d, channel: d.Channel(topic)}
}

// Notify sends a NOTIFY, after the commit that calls it, in the
// background. The commits of many share one: while one is being sent,
// later calls only ask for one more.
func (w *Wakeup) Notify() {
	w.mu.Lock()
	if w.notifying {
		w.again = true
		w.mu.Unlock()
		return
	}
	w.notifying = true
	w.mu.Unlock()
	go func() {
		for {
			w.send()
			w.mu.Lock()
			if !w.again {
				w.notifying = false
				w.mu.Unlock()
				return
			}
			w.again = false
			w.mu.Unlock()
		}
	}()
}

// send sends one NOTIFY in one round trip. Its commit need not wait for
// the disk: it changes nothing a crash could lose but the wake-up, and a
// worker polls anyway. A failure is left to that poll.
func (w *Wakeup) send() {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	_ = w.db.Update(ctx, func(t storage.Tx) error {
		Queue(t, "SET LOCAL synchronous_commit = off")
		Queue(t, "SELECT pg_notify($1, '')", w.channel)
		return nil
	})
}

// Watch calls wake for every NOTIFY of any instance until ctx ends, and
// whenever one may have been missed (the listener reconnected).
func (w *Wakeup) Watch(ctx context.Context, wake func()) {
	w.db.Listen(ctx, w.channel, func(string) { wake() }, wake)
}
