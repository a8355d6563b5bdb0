package notify

import (
	"context"
	"sync"
)

// Lifecycle is a worker's Run and Stop: one Run at a time, none once
// stopped, and Stop ends the Run in progress and waits for it to return.
// The notification and webhook workers share it.
type Lifecycle struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// Begin starts a Run under ctx. claim, called under the lifecycle's lock,
// may refuse it (another worker of the same store runs in this process).
// It returns the Run's context, which Stop cancels, and end, which the Run
// must call as it returns. After Stop it returns a nil context and no
// error: the Run returns at once. A Run already going on, or a claim
// refused, is errRunning.
func (l *Lifecycle) Begin(ctx context.Context, claim func() bool, errRunning error) (context.Context, func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return nil, nil, nil
	}
	if l.done != nil || !claim() {
		return nil, nil, errRunning
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	return ctx, func() {
		cancel()
		l.mu.Lock()
		l.cancel, l.done = nil, nil
		l.mu.Unlock()
		close(done)
	}, nil
}

// Stop ends the Run in progress, if any, waits for it, and keeps any later
// Run from starting. It may be called more than once and without Run.
func (l *Lifecycle) Stop() {
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
