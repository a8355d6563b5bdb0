package auditlog

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/token"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const (
	// flushInterval bounds how long an entry waits to be written.
	flushInterval = 20 * time.Millisecond
	// maxPending bounds the entries waiting. Only a log whose disk stalls
	// for seconds fills it; then entries are dropped (and counted in the
	// logs) rather than requests stalled on the disk.
	maxPending = 1 << 17
)

// Log hands audit entries from requests to one writer goroutine in
// batches: a request appends a record under a mutex and goes on; the
// writer wakes every flushInterval, swaps the batch out and writes it.
// Writing an entry therefore never blocks a request on disk, and a busy
// gateway costs no goroutine wake-up per entry.
//
// Each entry is an info entry of the logger whose one field is
// zap.Inline(&record): every log format writes it through zap's
// ObjectEncoder API, and the webapi_json encoder (Encoder) recognises it
// and writes it with its own JSON code, byte for byte the same as
// `format json`. A record is marshalled while zap writes its entry, as
// zap's encoders do; a core that kept the field to marshal it later
// would see the record's slot after the writer reused it.
type Log struct {
	logger *zap.Logger
	// entries is logger with the time of the record being written as
	// its clock: the entry's time is the request's, and zap asks no
	// clock of its own.
	entries *zap.Logger
	// core, when set, takes the entries straight from the writer, named
	// name and with errOut for write errors: the logger adds nothing to
	// an info entry but what its core does (no caller, no stack), so the
	// writer skips the logger's own work (see New).
	core   zapcore.Core
	name   string
	errOut zapcore.WriteSyncer
	// RedactPath, when set before Start, replaces the tokens in a
	// request's path (keystore's Keys.RedactPath), on the writer
	// goroutine; else keygate's tokens are redacted by their form
	// (token.Redact).
	RedactPath func(string) string

	mu      sync.Mutex
	pending []Record
	spare   []Record
	// pendingHeld and spareHeld are how many records at the start of
	// each buffer may still hold the strings of a written batch (see
	// Flush).
	pendingHeld, spareHeld int
	stopped                bool

	// writeMu serializes write: the writer's, and those of requests
	// that finish after Close.
	writeMu sync.Mutex
	at      time.Time // entries' clock
	json    jsonAudit // the webapi_json encoder's state across a batch
	field   []zap.Field

	dropped atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
}

// New returns a Log writing to logger (its name is the entries'
// `logger`); Start starts its writer.
func New(logger *zap.Logger) *Log {
	a := &Log{logger: logger, field: make([]zap.Field, 1)}
	a.entries = logger.WithOptions(zap.WithClock(recordClock{&a.at}))
	// An info entry checked (and not written) tells what the logger
	// gives its entries: its name, where its write errors go, and
	// whether it adds a caller or a stack, which only the logger can.
	if ce := logger.Check(zapcore.InfoLevel, ""); ce != nil && !ce.Caller.Defined && ce.Stack == "" {
		a.core, a.name, a.errOut = logger.Core(), ce.LoggerName, ce.ErrorOutput
	}
	return a
}

// recordClock is the time of the record being written.
type recordClock struct{ at *time.Time }

func (c recordClock) Now() time.Time                         { return *c.at }
func (c recordClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// Add queues rec. After Close (a request still finishing while its
// config goes away) it writes rec at once.
func (a *Log) Add(rec Record) {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		a.write([]Record{rec})
		return
	}
	if len(a.pending) >= maxPending {
		a.mu.Unlock()
		a.dropped.Add(1)
		return
	}
	a.pending = append(a.pending, rec)
	a.mu.Unlock()
}

// Start runs the writer until Close.
func (a *Log) Start() {
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.done)
		t := time.NewTicker(flushInterval)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				a.Flush()
			}
		}
	}()
}

// Close stops the writer, writes what is pending and syncs the logger.
// A log writer that buffers behind Caddy's wrapper (whose Sync does not
// reach it) is the caller's to flush afterwards.
func (a *Log) Close() {
	if a.stop != nil {
		close(a.stop)
		<-a.done
		a.stop = nil
	}
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.Flush()
	_ = a.logger.Sync()
}

// Flush writes the pending batch.
func (a *Log) Flush() {
	a.mu.Lock()
	batch, held := a.pending, a.pendingHeld
	a.pending, a.pendingHeld = a.spare[:0], a.spareHeld
	a.spare, a.spareHeld = nil, 0
	a.mu.Unlock()
	if n := a.dropped.Swap(0); n > 0 {
		a.logger.Warn("audit entries dropped: the audit log could not keep up", zap.Uint64("dropped", n))
	}
	a.write(batch)
	// Let go of the strings the records hold, but not by clearing every
	// batch (a busy log's records are written over by the next batch in
	// the buffer anyway): only those past the end of this batch, and all
	// once the log is idle, within two flushes of the last entry.
	if len(batch) == 0 {
		clear(batch[:held])
		held = 0
	} else if held > len(batch) {
		clear(batch[len(batch):held])
		held = len(batch)
	} else {
		held = len(batch)
	}
	a.mu.Lock()
	if a.spare == nil {
		a.spare, a.spareHeld = batch[:0], held
	}
	a.mu.Unlock()
}

func (a *Log) write(batch []Record) {
	if len(batch) == 0 {
		return
	}
	// The one place a path is redacted, whichever encoder writes it. A
	// path like the one before it is redacted as that one was: a client's
	// requests often follow each other on one resource, and redacting
	// scans each segment (and hashes those that could be imported
	// tokens).
	redact := a.RedactPath
	if redact == nil {
		redact = token.Redact
	}
	var raw, redacted string
	for i := range batch {
		p := batch[i].Path
		if p == "" {
			continue
		}
		if p != raw {
			raw, redacted = p, redact(p)
		}
		if redacted != raw { // else the record keeps its own, unwritten
			batch[i].Path = redacted
		}
	}
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	for i := range batch {
		rec := &batch[i]
		var ce *zapcore.CheckedEntry
		if a.core != nil {
			ce = a.core.Check(zapcore.Entry{Level: zapcore.InfoLevel, Time: rec.At, LoggerName: a.name, Message: rec.Msg}, nil)
			if ce != nil {
				ce.ErrorOutput = a.errOut
			}
		} else {
			a.at = rec.At
			ce = a.entries.Check(zapcore.InfoLevel, rec.Msg)
		}
		if ce == nil {
			continue
		}
		rec.json = &a.json
		// One field slice for every entry: a variadic argument would
		// escape to the heap on each call.
		a.field[0] = zap.Inline(rec)
		ce.Write(a.field...)
		rec.json = nil
	}
	a.field[0] = zap.Field{}
}
