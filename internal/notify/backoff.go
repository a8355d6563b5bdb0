package notify

import (
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
