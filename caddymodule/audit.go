package caddymodule

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/keystore"
)

// auditRecord is one audit entry as a request leaves it: plain values,
// no encoding and no allocation of its own. The writer turns it into a
// zap entry of the `webapi.audit` logger with the request's own time.
type auditRecord struct {
	at         time.Time
	msg        string
	keyID      string
	keyName    string
	webhookID  string // administration of a webhook subscription
	templateID string // administration of a contract template
	user       string // the Web API Keys page's authenticated user
	owner      string
	service    string
	operation  string
	method     string
	path       string
	reason     string // refusals only
	clientIP   netip.Addr
	status     int
	duration   time.Duration // negative: not a request (administration)
	// previousToken marks a use of the token a roll replaced.
	previousToken bool
	// refusals is how many rate-limit or quota refusals the entry stands
	// for (0: not such a refusal).
	refusals uint64
}

const (
	// auditFlushInterval bounds how long an entry waits to be written.
	auditFlushInterval = 20 * time.Millisecond
	// auditMaxPending bounds the entries waiting. Only a log whose disk
	// stalls for seconds fills it; then entries are dropped (and counted
	// in the logs) rather than requests stalled on the disk.
	auditMaxPending = 1 << 17
)

// auditLog hands audit entries from requests to one writer goroutine in
// batches: a request appends a record under a mutex and goes on; the
// writer wakes every auditFlushInterval, swaps the batch out and writes
// it. Writing an entry therefore never blocks a request on disk, and a
// busy gateway costs no goroutine wake-up per entry.
type auditLog struct {
	logger *zap.Logger

	mu      sync.Mutex
	pending []auditRecord
	spare   []auditRecord
	stopped bool

	dropped atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
}

func newAuditLog(logger *zap.Logger) *auditLog {
	return &auditLog{logger: logger}
}

// record queues rec. After stop (a request still finishing while its
// config goes away) it writes rec at once.
func (a *auditLog) record(rec auditRecord) {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		a.write([]auditRecord{rec})
		return
	}
	if len(a.pending) >= auditMaxPending {
		a.mu.Unlock()
		a.dropped.Add(1)
		return
	}
	a.pending = append(a.pending, rec)
	a.mu.Unlock()
}

// start runs the writer until stop.
func (a *auditLog) start() {
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.done)
		t := time.NewTicker(auditFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				a.flush()
			}
		}
	}()
}

// close stops the writer and writes what is pending.
func (a *auditLog) close() {
	if a.stop != nil {
		close(a.stop)
		<-a.done
		a.stop = nil
	}
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.flush()
}

// flush writes the pending batch.
func (a *auditLog) flush() {
	a.mu.Lock()
	batch := a.pending
	a.pending, a.spare = a.spare[:0], nil
	a.mu.Unlock()
	if n := a.dropped.Swap(0); n > 0 {
		a.logger.Warn("audit entries dropped: the audit log could not keep up", zap.Uint64("dropped", n))
	}
	a.write(batch)
	clear(batch) // let go of the strings the records hold
	a.mu.Lock()
	if a.spare == nil {
		a.spare = batch[:0]
	}
	a.mu.Unlock()
}

func (a *auditLog) write(batch []auditRecord) {
	fields := make([]zap.Field, 0, 14)
	for i := range batch {
		rec := &batch[i]
		ce := a.logger.Check(zapcore.InfoLevel, rec.msg)
		if ce == nil {
			continue
		}
		ce.Time = rec.at
		fields = fields[:0]
		if rec.keyID != "" { // a refusal before the key is known has none
			fields = append(fields,
				zap.String("key_id", rec.keyID),
				zap.String("key_name", rec.keyName),
				zap.String("owner", rec.owner))
		}
		if rec.webhookID != "" {
			fields = append(fields, zap.String("webhook_id", rec.webhookID))
		}
		if rec.templateID != "" {
			fields = append(fields, zap.String("template_id", rec.templateID))
		}
		if rec.user != "" {
			fields = append(fields, zap.String("user", rec.user))
		}
		fields = append(fields,
			zap.String("service", rec.service),
			zap.String("operation", rec.operation),
			zap.String("method", rec.method),
			zap.String("path", keystore.RedactTokens(rec.path)), // a token pasted into a path stays out of the log
			zap.String("client_ip", clientIPString(rec.clientIP)),
			zap.Int("status", rec.status),
		)
		if rec.reason != "" {
			fields = append(fields, zap.String("reason", rec.reason))
		}
		if rec.duration >= 0 {
			fields = append(fields, zap.Duration("duration", rec.duration))
		}
		if rec.previousToken {
			fields = append(fields, zap.Bool("previous_token", true))
		}
		if rec.refusals > 0 {
			fields = append(fields, zap.Uint64("refusals", rec.refusals))
		}
		ce.Write(fields...)
	}
}

func clientIPString(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	return ip.String()
}
