package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/storage"
)

// The outcomes of an attempt, for keygate_webhook_deliveries_total.
const (
	OutcomeSent   = "sent"
	OutcomeRetry  = "retry"
	OutcomeFailed = "failed" // given up
)

// UserAgent names keygate in every delivery.
const UserAgent = "keygate-webhooks/1 (Standard Webhooks)"

// WorkerConfig tunes a Worker. Zero values take the defaults in brackets.
type WorkerConfig struct {
	// Concurrency bounds the attempts in flight in this process [16].
	Concurrency int
	// PerEndpoint bounds the attempts in flight to one subscription, so
	// that a slow or dead endpoint holds at most that many of the
	// Concurrency slots and never all of them [2].
	PerEndpoint int
	// AttemptTimeout bounds one attempt, connection and reply [15s].
	AttemptTimeout time.Duration
	// PollInterval is the safety net behind the wake-ups on commit [30s].
	PollInterval time.Duration
	// BaseDelay and MaxDelay bound the exponential backoff between the
	// attempts of one message, with jitter [5s, 1h].
	BaseDelay, MaxDelay time.Duration
	// MaxAge is how long after its event a message is retried; the first
	// attempt that fails after it gives the message up [MaxAge, 24h].
	MaxAge time.Duration
	// Lease is how long a delivery taken for an attempt stays reserved to
	// this process where several share a database
	// [AttemptTimeout + min(AttemptTimeout, 30s)].
	Lease time.Duration
	// TLSConfig, when set, is the https deliveries' TLS configuration
	// (tests trust their server's certificate with it).
	TLSConfig *tls.Config
	// OnOutcome, when set, is called with OutcomeSent, OutcomeRetry or
	// OutcomeFailed after each attempt, once the attempt is recorded.
	OnOutcome func(outcome string)
	// Logger receives retries, give-ups and storage errors; never a
	// secret or a URL (which may hold one in its query) [no logging].
	Logger *zap.Logger
}

// ErrWorkerRunning is returned by Run when a worker already delivers from
// the same store.
var ErrWorkerRunning = errors.New("webhook: a worker is already running on this store")

// Worker fans the outbox's events out and delivers them. Start it once
// per process with Run and end it with Stop before the database is
// closed. Its goroutines are its own: an endpoint that is slow to answer
// holds up no API request and no notification.
type Worker struct {
	st     *Store
	cfg    WorkerConfig
	holder string
	// https delivers to https URLs; plain to http URLs, and dials only
	// loopback addresses whatever the name resolves to.
	https, plain *http.Client

	mu sync.Mutex
	// inflight maps each delivery being attempted to its subscription;
	// perSub counts them by subscription.
	inflight map[uint64]string
	perSub   map[string]int
	attempts sync.WaitGroup

	life notify.Lifecycle

	// lastFanOut is when a fan-out last found events (Run's goroutine
	// only).
	lastFanOut time.Time
	// targets are the Targets the pooled connections were made under:
	// when they change, idle connections are closed, so that none made
	// under looser rules is used again.
	targets atomic.Pointer[Targets]
}

// running is held by the one Worker of a store.
var running sync.Map // *Store -> struct{}

// NewWorker returns a worker for st.
func NewWorker(st *Store, cfg WorkerConfig) *Worker {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.PerEndpoint <= 0 {
		cfg.PerEndpoint = 2
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 15 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 30 * time.Second
	}
	if cfg.BaseDelay <= 0 {
		cfg.BaseDelay = 5 * time.Second
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = time.Hour
	}
	cfg.MaxDelay = max(cfg.MaxDelay, cfg.BaseDelay)
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = MaxAge
	}
	if cfg.Lease <= cfg.AttemptTimeout {
		cfg.Lease = cfg.AttemptTimeout + min(cfg.AttemptTimeout, 30*time.Second)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	var h [16]byte
	if _, err := rand.Read(h[:]); err != nil {
		panic("webhook: crypto/rand failed: " + err.Error())
	}
	w := &Worker{st: st, cfg: cfg, holder: hex.EncodeToString(h[:]),
		inflight: map[uint64]string{}, perSub: map[string]int{}}
	noRedirects := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// Every connection is checked on the address it goes to, after the
	// name is resolved (Targets). No proxy from the environment: the
	// address checked would be the proxy's, not the receiver's.
	allowed := func(_, address string, _ syscall.RawConn) error { return st.targets.Load().dialControl(address) }
	dialer := &net.Dialer{Timeout: cfg.AttemptTimeout, KeepAlive: 30 * time.Second, Control: allowed}
	w.https = &http.Client{CheckRedirect: noRedirects, Transport: &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     cfg.TLSConfig,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: cfg.PerEndpoint,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: cfg.AttemptTimeout,
	}}
	// Plain http goes to a loopback host only: checked on the URL when
	// the subscription is made and again here, on the address dialled,
	// since a name may resolve elsewhere by then.
	loopback := &net.Dialer{Timeout: cfg.AttemptTimeout, KeepAlive: 30 * time.Second,
		Control: func(network, address string, c syscall.RawConn) error {
			if err := allowed(network, address, c); err != nil {
				return err
			}
			return loopbackDial(network, address)
		}}
	w.plain = &http.Client{CheckRedirect: noRedirects, Transport: &http.Transport{
		DialContext:         loopback.DialContext,
		MaxIdleConnsPerHost: cfg.PerEndpoint,
		IdleConnTimeout:     90 * time.Second,
	}}
	return w
}

// Run fans out and delivers until ctx ends or Stop is called, then
// waits for the attempts in flight (each within AttemptTimeout) and
// records them, so that a clean stop never causes a second delivery.
func (w *Worker) Run(ctx context.Context) error {
	ctx, end, err := w.life.Begin(ctx, func() bool {
		_, taken := running.LoadOrStore(w.st, struct{}{})
		return !taken
	}, ErrWorkerRunning)
	if ctx == nil || err != nil {
		return err
	}
	defer end()
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		w.attempts.Wait()
		running.Delete(w.st)
	}()

	watched := make(chan struct{})
	go func() { defer close(watched); w.st.backend.Watch(ctx, w.st.signal) }()
	defer func() { cancel(); <-watched }()

	notify.RunPasses(ctx, w.st.wake, w.cfg.BaseDelay, w.cfg.PollInterval, w.pass, func(retryIn time.Duration, err error) {
		w.cfg.Logger.Error("webhook outbox", zap.Duration("retry_in", retryIn), zap.Error(err))
	})
	return nil
}

// Stop ends Run and waits for it to return; later calls of Run return at
// once. Stop may be called more than once and without Run.
func (w *Worker) Stop() { w.life.Stop() }

// pass fans out the outbox, then starts attempts at due deliveries while
// slots are free, and says how long to wait before the next pass: until
// the next delivery falls due or the poll interval, whichever comes
// first; a finished attempt or a commit wakes it sooner.
func (w *Worker) pass(ctx context.Context) (time.Duration, error) {
	// Fan-outs that found events are at least fanOutLinger apart: while
	// creates stream in, each commit of theirs wakes the worker, and a
	// fan-out per wake-up would add a write commit per create commit.
	backlog := false
	var fanOutWait time.Duration
	if since := time.Since(w.lastFanOut); since < fanOutLinger {
		fanOutWait = fanOutLinger - since
	} else {
		// A bounded fan-out per pass, so that a stream of events never
		// holds up the deliveries; the next pass comes at once for the
		// rest.
		for i := 0; ; i++ {
			n, err := w.st.dispatch(ctx)
			if err != nil {
				return 0, fmt.Errorf("fanning events out: %w", err)
			}
			if n > 0 {
				w.lastFanOut = time.Now()
			}
			if n < dispatchBatch {
				break
			}
			if i == 9 {
				backlog = true
				break
			}
		}
	}
	wait, err := w.startAttempts(ctx, backlog)
	if fanOutWait > 0 && wait > fanOutWait {
		wait = fanOutWait // events may be waiting for the next fan-out
	}
	return wait, err
}

// fanOutLinger is the least time between two fan-outs that found events.
const fanOutLinger = 20 * time.Millisecond

// startAttempts starts attempts at due deliveries while slots are free,
// and says how long to wait before the next pass (zero after a fan-out
// that left a backlog).
func (w *Worker) startAttempts(ctx context.Context, backlog bool) (time.Duration, error) {
	for ctx.Err() == nil {
		w.mu.Lock()
		free := w.cfg.Concurrency - len(w.inflight)
		var skipSubs []string
		for sub, n := range w.perSub {
			if n >= w.cfg.PerEndpoint {
				skipSubs = append(skipSubs, sub)
			}
		}
		skipIDs := make([]uint64, 0, len(w.inflight))
		for id := range w.inflight {
			skipIDs = append(skipIDs, id)
		}
		w.mu.Unlock()
		if free <= 0 {
			if backlog {
				return 0, nil
			}
			return w.cfg.PollInterval, nil
		}
		d, next, err := w.st.backend.TakeDelivery(ctx, w.holder, w.cfg.Lease, skipSubs, skipIDs)
		if err != nil {
			return 0, fmt.Errorf("taking a delivery: %w", err)
		}
		if d == nil {
			wait := w.cfg.PollInterval
			if !next.IsZero() {
				wait = max(min(wait, time.Until(next)), time.Millisecond)
			}
			if backlog {
				wait = 0
			}
			return wait, nil
		}
		w.mu.Lock()
		w.inflight[d.ID] = d.SubscriptionID
		w.perSub[d.SubscriptionID]++
		w.mu.Unlock()
		w.attempts.Add(1)
		go func() {
			defer w.attempts.Done()
			if err := w.attempt(ctx, d); err != nil {
				// The delivery stays due; wait before it is taken
				// again, so that a failing database is not hammered.
				w.cfg.Logger.Error("webhook delivery not recorded", zap.String("message_id", d.MessageID), zap.Error(err))
				select {
				case <-ctx.Done():
				case <-time.After(w.cfg.BaseDelay):
				}
			}
			w.mu.Lock()
			delete(w.inflight, d.ID)
			if w.perSub[d.SubscriptionID]--; w.perSub[d.SubscriptionID] <= 0 {
				delete(w.perSub, d.SubscriptionID)
			}
			w.mu.Unlock()
			w.st.signal()
		}()
	}
	return 0, nil
}

// attempt makes one attempt at delivery d and records it. The returned
// error is a storage error; delivery errors are recorded.
func (w *Worker) attempt(ctx context.Context, d *Delivery) error {
	// Once taken, the attempt is completed and recorded even if ctx ends.
	rctx := context.WithoutCancel(ctx)
	var sub *Record
	err := w.st.db.View(rctx, func(tx storage.Tx) (err error) {
		sub, err = w.st.backend.GetSubscription(tx, d.SubscriptionID)
		return err
	})
	if err != nil {
		return err
	}
	lg := w.cfg.Logger.With(zap.String("subscription_id", d.SubscriptionID), zap.String("message_id", d.MessageID),
		zap.String("event", d.Event))
	if sub == nil || !sub.Enabled {
		// Deleted or disabled since it was fanned out: not delivered.
		lg.Debug("webhook delivery dropped: the subscription is gone or disabled")
		return w.st.db.Update(rctx, func(tx storage.Tx) error { return w.st.backend.DeleteDelivery(tx, d.ID) })
	}

	now := w.st.now()
	status, dur, sendErr := 0, time.Duration(0), error(nil)
	current, previous, err := w.st.secrets(sub, now)
	if err != nil {
		sendErr = err
	} else {
		if t := w.st.targets.Load(); w.targets.Swap(t) != t {
			w.https.CloseIdleConnections()
			w.plain.CloseIdleConnections()
		}
		status, dur, sendErr = w.send(ctx, sub.URL, d, current, previous, now)
	}
	a := &Attempt{MessageID: d.MessageID, Event: d.Event, Attempt: d.Attempts + 1, Status: status,
		DurationMs: dur.Milliseconds(), Timestamp: now.UTC().Truncate(time.Microsecond)}
	if sendErr != nil {
		a.Error = sendErr.Error()
	}

	// Each outcome is counted once its attempt is in the log (or failed
	// to get there: it was made all the same), so that the metric never
	// runs ahead of the log and the pending deliveries.
	if sendErr == nil {
		defer w.outcome(OutcomeSent)
		return w.st.db.Update(rctx, func(tx storage.Tx) error {
			if err := w.st.backend.AddAttempt(tx, d.SubscriptionID, a, LogSize); err != nil {
				return err
			}
			return w.st.backend.DeleteDelivery(tx, d.ID)
		})
	}
	deadline := d.EventAt.Add(w.cfg.MaxAge)
	left := deadline.Sub(w.st.now())
	refused := errors.Is(sendErr, ErrTargetNotAllowed)
	if left <= 0 || refused {
		// A refused target is given up at once: it is refused again
		// until the operator or the subscriber changes something.
		msg := "webhook delivery given up"
		if refused {
			msg = "webhook delivery given up: target not allowed"
		}
		lg.Warn(msg, zap.Int("attempts", a.Attempt), zap.Int("status", status), zap.String("error", a.Error))
		defer w.outcome(OutcomeFailed)
		return w.st.db.Update(rctx, func(tx storage.Tx) error {
			if err := w.st.backend.AddAttempt(tx, d.SubscriptionID, a, LogSize); err != nil {
				return err
			}
			return w.st.backend.DeleteDelivery(tx, d.ID)
		})
	}
	// The last retry comes at the deadline, not past it.
	delay := min(notify.Backoff(w.cfg.BaseDelay, w.cfg.MaxDelay, a.Attempt), left)
	lg.Info("webhook delivery failed, will retry", zap.Int("attempts", a.Attempt), zap.Int("status", status),
		zap.String("error", a.Error), zap.Duration("retry_in", delay))
	defer w.outcome(OutcomeRetry)
	return w.st.db.Update(rctx, func(tx storage.Tx) error {
		if err := w.st.backend.AddAttempt(tx, d.SubscriptionID, a, LogSize); err != nil {
			return err
		}
		return w.st.backend.RescheduleDelivery(tx, d.ID, w.holder, delay)
	})
}

// send POSTs d's body to rawURL, signed with current (and previous, when
// set), and returns the reply's status (0 without one) and how long it
// took. Its context outlives a Stop, so that the attempt in flight
// finishes and is recorded instead of being made again later.
func (w *Worker) send(ctx context.Context, rawURL string, d *Delivery, current, previous string, now time.Time) (int, time.Duration, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, 0, errors.New("the subscription's url does not parse")
	}
	client := w.https
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && LoopbackHost(u.Hostname()):
		client = w.plain
	default:
		return 0, 0, errors.New("the url is neither https nor http to a loopback host: not sent")
	}
	ts := now.Unix()
	sig, err := Sign(current, d.MessageID, ts, d.Body)
	if err != nil {
		return 0, 0, err
	}
	if previous != "" {
		if old, err := Sign(previous, d.MessageID, ts, d.Body); err == nil {
			sig += " " + old
		}
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, rawURL, bytes.NewReader(d.Body))
	if err != nil {
		return 0, 0, errors.New("the subscription's url makes no request")
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", UserAgent)
	h.Set("webhook-id", d.MessageID)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Since(start), w.transportError(actx, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	took := time.Since(start)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.StatusCode, took, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return resp.StatusCode, took, fmt.Errorf("HTTP %d: redirects are not followed", resp.StatusCode)
	}
	return resp.StatusCode, took, fmt.Errorf("HTTP %d", resp.StatusCode)
}

// transportError is err without the URL that net/http puts in it (a URL
// may carry a token in its query), and a timeout said as such.
func (w *Worker) transportError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no reply within %s", w.cfg.AttemptTimeout)
	}
	var te *TargetError
	if errors.As(err, &te) {
		return te // without "dial tcp ...:" before it
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	if len(msg) > 500 {
		msg = msg[:500]
	}
	return errors.New(msg)
}

// Sign is the Standard Webhooks signature of one message: "v1," and the
// base64 of HMAC-SHA256, keyed with the secret's bytes, over
// "id.timestamp.body".
func Sign(secret, msgID string, timestamp int64, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, timestamp, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}

func (w *Worker) outcome(o string) {
	if w.cfg.OnOutcome != nil {
		w.cfg.OnOutcome(o)
	}
}
