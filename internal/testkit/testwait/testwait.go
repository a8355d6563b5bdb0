// Package testwait waits in a test for what another goroutine or process
// does. Its deadline fails the test: a bound against hanging, or the
// promise under test where a spec makes one ("within 1 s"), never a
// measure of speed.
package testwait

import (
	"testing"
	"time"
)

// Generous bounds a wait that asserts no timing: long enough for a
// loaded 2-core machine.
const Generous = 20 * time.Second

// For polls cond every 10 ms until it holds and returns how long that
// took; it fails tb if limit passes first.
func For(tb testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			tb.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// NextWindow sleeps until after has passed into the next fixed window of
// the given length (windows of whole multiples of it, as rate limits
// count them), so what follows begins in a window of its own.
func NextWindow(window, after time.Duration) {
	time.Sleep(time.Until(time.Now().Truncate(window).Add(window + after)))
}
