package pgdb

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
)

// Batch implements storage.DB with group commit, as bbolt's Batch: calls
// made while others' transactions are on their way wait, and then share
// one transaction, run one after the other, each in a savepoint of its
// own, so that one whose fn fails undoes its own writes only. Shared,
// their statements go out together (a call's writes with the next one's
// reads) and their commit is one, with one wait for the disk: on a small
// box shared with the database that is most of a create's cost. When the
// shared transaction itself fails, each call not yet answered runs again
// in a transaction of its own; fn may run more than once.
func (d *DB) Batch(ctx context.Context, fn func(storage.Tx) error) error {
	c := &batchCall{ctx: ctx, fn: fn, done: make(chan struct{})}
	b := &d.batches
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	lead := b.running < maxBatches
	if lead {
		b.running++
	}
	b.mu.Unlock()
	if lead {
		d.runBatch()
	}
	// fn may be running for this call in a batch: wait, whatever ctx says
	// (fn's statements use ctx, so a cancelled one ends soon).
	<-c.done
	if c.alone {
		return d.Update(ctx, fn)
	}
	return c.err
}

const (
	// maxBatches bounds the shared transactions on their way at once, and
	// so the connections they hold.
	maxBatches = 4
	// maxBatchCalls bounds the calls of one transaction: each waits for
	// those before it, and their savepoints stay well below the 64
	// subtransactions a server process keeps track of cheaply.
	maxBatchCalls = 16
	// batchSavepoint is the savepoint of the call being run.
	batchSavepoint = "keygate_batch"
)

type batcher struct {
	mu      sync.Mutex
	waiting []*batchCall
	running int
}

type batchCall struct {
	ctx context.Context
	fn  func(storage.Tx) error
	err error
	// alone: the shared transaction failed; the call runs on its own.
	alone bool
	done  chan struct{}
}

// runBatch runs the calls waiting in one transaction, then hands on to a
// new goroutine if more came meanwhile, so that no caller waits for
// others' transactions after its own.
func (d *DB) runBatch() {
	b := &d.batches
	b.mu.Lock()
	n := min(len(b.waiting), maxBatchCalls)
	calls := b.waiting[:n:n]
	b.waiting = b.waiting[n:]
	b.mu.Unlock()

	err := d.run(context.Background(), pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}, func(st storage.Tx) error {
		t := st.(*tx)
		for _, c := range calls {
			// A retried transaction runs every call again.
			if c.err = c.ctx.Err(); c.err != nil {
				continue
			}
			queued, after, sent := len(t.queued), len(t.after), t.sent
			t.queue("SAVEPOINT " + batchSavepoint)
			err := c.fn(t)
			switch {
			case err == nil && t.sent == sent:
				// All of fn is queued: its savepoint is of no use.
				t.queued = append(t.queued[:queued], t.queued[queued+1:]...)
				continue
			case err == nil:
				t.queue("RELEASE SAVEPOINT " + batchSavepoint)
				continue
			case t.conn.IsClosed() || t.conn.PgConn().TxStatus() == 'E':
				return err // the transaction failed, not just fn
			case t.sent == sent:
				// Nothing of fn went out: forget what it queued.
				t.queued = t.queued[:queued]
			default:
				// What is still queued is fn's, queued since its
				// last round trip: forget it, undo the rest.
				t.queued = nil
				t.queue("ROLLBACK TO SAVEPOINT " + batchSavepoint)
				t.queue("RELEASE SAVEPOINT " + batchSavepoint)
			}
			t.after = t.after[:after]
			c.err = err
		}
		return nil
	})
	for _, c := range calls {
		switch {
		case err == nil, c.err != nil:
		case errors.Is(err, storage.ErrUnavailable):
			c.err = err // alone it would fail the same way
		default:
			c.alone = true
		}
		close(c.done)
	}

	b.mu.Lock()
	if len(b.waiting) > 0 {
		b.mu.Unlock()
		go d.runBatch()
		return
	}
	b.running--
	b.mu.Unlock()
}
