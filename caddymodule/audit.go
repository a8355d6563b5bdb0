package caddymodule

import (
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// auditQueueSize bounds the entries waiting for the writer. At the rates
// this gateway serves, the queue is far from full unless the log's disk
// stalls; then entries are dropped and counted rather than stalling
// requests on disk.
const auditQueueSize = 1 << 16

// newAuditLogger returns the `webapi.audit` logger: entries are handed to
// a background writer, so writing one never blocks a request on disk.
func newAuditLogger(base *zap.Logger) *zap.Logger {
	return base.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return auditWriter.wrap(c)
	}))
}

type auditEntry struct {
	core   zapcore.Core
	entry  zapcore.Entry
	fields []zapcore.Field
}

// asyncWriter is one process-wide queue and goroutine that write audit
// entries to whatever core each entry's logger had.
type asyncWriter struct {
	once    sync.Once
	queue   chan auditEntry
	dropped atomic.Uint64
}

var auditWriter = &asyncWriter{}

func (w *asyncWriter) wrap(c zapcore.Core) zapcore.Core {
	w.once.Do(func() {
		w.queue = make(chan auditEntry, auditQueueSize)
		go w.run()
	})
	return &asyncCore{Core: c, w: w}
}

func (w *asyncWriter) run() {
	for e := range w.queue {
		_ = e.core.Write(e.entry, e.fields)
	}
}

// asyncCore defers Write to the writer goroutine.
type asyncCore struct {
	zapcore.Core
	w *asyncWriter
}

func (c *asyncCore) With(fields []zapcore.Field) zapcore.Core {
	return &asyncCore{Core: c.Core.With(fields), w: c.w}
}

func (c *asyncCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *asyncCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	select {
	case c.w.queue <- auditEntry{core: c.Core, entry: e, fields: fields}:
	default:
		c.w.dropped.Add(1)
	}
	return nil
}

// Sync waits for nothing: the writer drains on its own.
func (c *asyncCore) Sync() error { return nil }
