package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/storage"
)

// Sender delivers one message on one channel. An error means the message
// was not delivered and will be retried.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// WorkerConfig tunes a Worker. Zero values take the defaults in brackets.
type WorkerConfig struct {
	// Email and SMS deliver their channel. A message whose channel has no
	// sender fails like an undeliverable one: it is retried, so that a
	// configuration fixed within the retry window still delivers it.
	Email Sender
	SMS   Sender
	// PollInterval is the safety net behind the wake-up on commit [30s].
	PollInterval time.Duration
	// BaseDelay and MaxDelay bound the exponential backoff [1s, 1h].
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxAttempts is the number of attempts after which a message is given
	// up, reported as failed, logged and deleted [24: about half a day of
	// retries with the default delays].
	MaxAttempts int
	// SendTimeout bounds one attempt; Stop waits for the attempt in flight
	// at most this long [2m].
	SendTimeout time.Duration
	// Lease is how long a message taken for an attempt stays reserved to
	// this worker where several processes deliver from one database: a
	// message whose process died is taken again once it has passed. At
	// least SendTimeout plus a margin [SendTimeout + min(SendTimeout, 30s)].
	Lease time.Duration
	// OnOutcome, when set, is called with the channel and OutcomeSent,
	// OutcomeRetry or OutcomeFailed after each attempt (for the
	// keygate_notifications_total metric).
	OnOutcome func(channel, outcome string)
	// Logger receives retries and failures [no logging].
	Logger *zap.Logger
}

// ErrWorkerRunning is returned by Run when a worker already delivers from
// the same outbox: two workers would send messages twice.
var ErrWorkerRunning = errors.New("notify: a worker is already running on this outbox")

// batchSize is how many due messages one pass takes before it looks at
// the schedule again.
const batchSize = 32

// Worker delivers the messages of an Outbox. Start it once per process with
// Run and end it with Stop before the database is closed.
type Worker struct {
	ob  *Outbox
	cfg WorkerConfig

	life Lifecycle

	// sent holds the messages delivered whose removal from the outbox
	// failed (a full disk): the next pass removes them without sending
	// them again. Only Run's goroutine uses it.
	sent map[uint64]bool
	// updateDB is ob.db.Update; tests make it fail as a full disk does.
	updateDB func(ctx context.Context, fn func(storage.Tx) error) error
}

// NewWorker returns a worker for ob.
func NewWorker(ob *Outbox, cfg WorkerConfig) *Worker {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 30 * time.Second
	}
	if cfg.BaseDelay <= 0 {
		cfg.BaseDelay = time.Second
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = time.Hour
	}
	cfg.MaxDelay = max(cfg.MaxDelay, cfg.BaseDelay)
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 24
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 2 * time.Minute
	}
	if cfg.Lease <= cfg.SendTimeout {
		cfg.Lease = cfg.SendTimeout + min(cfg.SendTimeout, 30*time.Second)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Worker{ob: ob, cfg: cfg, updateDB: ob.db.Update}
}

// Run delivers messages until ctx ends or Stop is called, then returns nil.
// Messages left pending by an earlier process are delivered first. An
// attempt in flight when Run is asked to end is completed (within
// SendTimeout) and recorded, so that a clean stop never causes a second
// delivery.
func (w *Worker) Run(ctx context.Context) error {
	ctx, end, err := w.life.Begin(ctx, func() bool { return w.ob.running.CompareAndSwap(false, true) }, ErrWorkerRunning)
	if ctx == nil || err != nil {
		return err
	}
	defer end()
	defer w.ob.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)

	// Commits the backend cannot report through Enqueue (another
	// process's) wake the worker too.
	watched := make(chan struct{})
	go func() { defer close(watched); w.ob.backend.Watch(ctx, w.ob.signal) }()
	defer func() { cancel(); <-watched }()

	RunPasses(ctx, w.ob.wake, w.cfg.BaseDelay, w.cfg.PollInterval, w.pass, func(retryIn time.Duration, err error) {
		w.cfg.Logger.Error("notification outbox", zap.Duration("retry_in", retryIn), zap.Error(err))
	})
	return nil
}

// Stop ends Run and waits for it to return; later calls of Run return at
// once. Stop may be called more than once and without Run.
func (w *Worker) Stop() { w.life.Stop() }

// pass delivers a batch of due messages and says how long to wait before
// the next pass: zero when more may be due, else until the next scheduled
// attempt or the poll interval, whichever comes first. Each message is
// taken (leased) in a transaction of its own and sent with no transaction
// open.
func (w *Worker) pass(ctx context.Context) (time.Duration, error) {
	// Delivered messages whose removal failed: removed first, so that no
	// other process takes them again once their lease ends.
	for id := range w.sent {
		if err := w.update(ctx, func(tx storage.Tx) error { return w.ob.backend.Delete(tx, id) }); err != nil {
			return 0, fmt.Errorf("message %d was delivered but stays queued: %w", id, err)
		}
		delete(w.sent, id)
	}
	for range batchSize {
		if ctx.Err() != nil {
			return 0, nil
		}
		id, next, err := w.ob.backend.Take(ctx, w.ob.holder, w.cfg.Lease)
		if err != nil {
			return 0, err
		}
		if id == 0 {
			wait := w.cfg.PollInterval
			if !next.IsZero() {
				wait = max(min(wait, time.Until(next)), time.Millisecond)
			}
			return wait, nil
		}
		if err := w.deliver(ctx, id); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// deliver makes one attempt at message id and records its result. The
// returned error is a storage error; delivery errors are recorded.
func (w *Worker) deliver(ctx context.Context, id uint64) error {
	// Once taken, the attempt is completed and recorded even if ctx ends.
	rctx := context.WithoutCancel(ctx)
	var rec *Record
	loadErr := w.ob.db.View(rctx, func(tx storage.Tx) (err error) {
		rec, err = w.ob.backend.Load(tx, id)
		return err
	})
	if rec == nil {
		if loadErr == nil {
			delete(w.sent, id) // dropped meanwhile
		}
		return loadErr // dropped meanwhile, or a storage error
	}
	if w.sent[id] {
		// Delivered already; only its removal failed.
		if err := w.update(rctx, func(tx storage.Tx) error { return w.ob.backend.Delete(tx, id) }); err != nil {
			return fmt.Errorf("message %d was delivered but stays queued: %w", id, err)
		}
		delete(w.sent, id)
		return nil
	}
	lg := w.cfg.Logger.With(zap.Uint64("message_id", id), zap.String("channel", string(rec.Channel)), zap.String("ref", rec.Ref))
	var m Message
	if loadErr == nil {
		m, loadErr = w.ob.open(rec)
	}
	if loadErr != nil && !errors.Is(loadErr, errUnsealable) {
		lg.Error("notification unreadable, deleted", zap.Error(loadErr))
		if rec.Channel == Email || rec.Channel == SMS {
			w.outcome(rec.Channel, OutcomeFailed)
		}
		return w.update(rctx, func(tx storage.Tx) error { return w.ob.backend.Delete(tx, id) })
	}

	// A message sealed under another master key fails like a send.
	sendErr := loadErr
	if sendErr == nil {
		sendErr = w.send(ctx, m)
	}
	if sendErr == nil {
		w.outcome(m.Channel, OutcomeSent)
		if err := w.update(rctx, func(tx storage.Tx) error { return w.ob.backend.Delete(tx, id) }); err != nil {
			// Not sent again by this process: the next pass only removes
			// it. A crash before then sends it once more.
			if w.sent == nil {
				w.sent = map[uint64]bool{}
			}
			w.sent[id] = true
			return fmt.Errorf("message %d was delivered but stays queued: %w", id, err)
		}
		return nil
	}

	attempts := rec.Attempts + 1
	if attempts >= w.cfg.MaxAttempts {
		lg.Error("notification given up", zap.Int("attempts", attempts), zap.Error(sendErr))
		w.outcome(m.Channel, OutcomeFailed)
		return w.update(rctx, func(tx storage.Tx) error { return w.ob.backend.Delete(tx, id) })
	}
	delay := backoff(w.cfg.BaseDelay, w.cfg.MaxDelay, attempts)
	lg.Warn("notification not delivered, will retry", zap.Int("attempts", attempts), zap.Duration("retry_in", delay), zap.Error(sendErr))
	w.outcome(m.Channel, OutcomeRetry)
	return w.update(rctx, func(tx storage.Tx) error {
		return w.ob.backend.Reschedule(tx, id, w.ob.holder, delay, sendErr.Error())
	})
}

// send runs one attempt. Its context outlives a Stop, so that the attempt in
// flight finishes and its result is recorded instead of the message being
// sent again later.
func (w *Worker) send(ctx context.Context, m Message) error {
	var s Sender
	switch m.Channel {
	case Email:
		s = w.cfg.Email
	case SMS:
		s = w.cfg.SMS
	}
	if s == nil {
		return fmt.Errorf("no %s sender is configured", m.Channel)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SendTimeout)
	defer cancel()
	return s.Send(sctx, m)
}

func (w *Worker) update(ctx context.Context, fn func(tx storage.Tx) error) error {
	return w.updateDB(ctx, fn)
}

func (w *Worker) outcome(ch Channel, outcome string) {
	if w.cfg.OnOutcome != nil {
		w.cfg.OnOutcome(string(ch), outcome)
	}
}
