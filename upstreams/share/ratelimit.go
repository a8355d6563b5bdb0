package share

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Unlock attempts per (share, client): a burst of 5, then one every 12
// seconds. Correct passwords give their token back, so only wrong ones
// are slowed down.
const (
	unlockBurst       = 5
	unlockEvery       = 12 * time.Second
	maxUnlockLimiters = 10000
)

// unlockKey names a client of one share. IPv6 clients are keyed by their
// /64, which one host usually controls whole.
type unlockKey struct {
	share uint64
	net   netip.Prefix
}

type unlockEntry struct {
	lim  *rate.Limiter
	last time.Time
}

// unlockLimiter holds a limiter per (share, client), at most
// maxUnlockLimiters of them: when full, it drops those idle long enough
// to have refilled (as good as new), then, if still full, a tenth of the
// rest at random.
type unlockLimiter struct {
	mu sync.Mutex
	m  map[unlockKey]*unlockEntry
}

func newUnlockLimiter() *unlockLimiter { return &unlockLimiter{m: map[unlockKey]*unlockEntry{}} }

func clientNet(ip netip.Addr) netip.Prefix {
	bits := ip.BitLen()
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// reserve takes one attempt for (share, ip) at now. When the client must
// wait, it returns the wait and no reservation; else a reservation that
// the caller cancels when the attempt succeeds.
func (u *unlockLimiter) reserve(share uint64, ip netip.Addr, now time.Time) (*rate.Reservation, time.Duration) {
	key := unlockKey{share: share, net: clientNet(ip)}
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.m[key]
	if !ok {
		if len(u.m) >= maxUnlockLimiters {
			u.evict(now)
		}
		e = &unlockEntry{lim: rate.NewLimiter(rate.Every(unlockEvery), unlockBurst)}
		u.m[key] = e
	}
	e.last = now
	r := e.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, d
	}
	return r, 0
}

func (u *unlockLimiter) evict(now time.Time) {
	idle := unlockBurst * unlockEvery
	for k, e := range u.m {
		if now.Sub(e.last) >= idle {
			delete(u.m, k)
		}
	}
	drop := len(u.m) - maxUnlockLimiters*9/10
	for k := range u.m {
		if drop <= 0 {
			break
		}
		delete(u.m, k)
		drop--
	}
}
