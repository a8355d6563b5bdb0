package notify

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is the wait before attempt number failed+1, after failed failed
// attempts: base doubled per earlier failure, capped at max, then "equal
// jitter" (a random point in the upper half) so that messages that failed
// together, during one mail-server outage, do not all retry in the same
// instant.
func backoff(base, max time.Duration, failed int) time.Duration {
	d := base
	for i := 1; i < failed && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// Backoff is backoff for the other queues that retry alike (webhook
// deliveries).
func Backoff(base, max time.Duration, failed int) time.Duration { return backoff(base, max, failed) }

// RunPasses is the loop of a queue's worker (this package's and the
// webhooks'): pass until ctx ends, each pass saying how long to wait
// before the next (zero: at once); a wake-up (a commit that queued work)
// ends the wait early. After a storage error (a full disk) the next pass
// comes after base, doubling up to poll, so that work resumes soon after
// the database recovers; onErr reports each such error with that wait.
func RunPasses(ctx context.Context, wake <-chan struct{}, base, poll time.Duration,
	pass func(context.Context) (time.Duration, error), onErr func(retryIn time.Duration, err error)) {
	errWait := time.Duration(0)
	for ctx.Err() == nil {
		wait, err := pass(ctx)
		if err != nil && ctx.Err() != nil {
			return // a transaction cut short by the stop
		}
		if err != nil {
			errWait = min(max(2*errWait, base), poll)
			onErr(errWait, err)
			wait = errWait
		} else {
			errWait = 0
		}
		if wait == 0 {
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}
