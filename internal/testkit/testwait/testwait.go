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
