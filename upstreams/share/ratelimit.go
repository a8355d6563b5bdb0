package share

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/keygate/keygate/internal/storage"
)

// SharedUnlockLimit is implemented by a Backend that several gateway
// instances share (PostgreSQL): the unlock limit is kept there, so that
// more instances do not give a client more tries. Without it (bbolt, one
// process) the store keeps the limit in memory.
type SharedUnlockLimit interface {
	// ReserveUnlock takes one attempt of client at share id at nowMs from
	// a bucket of burst attempts refilled one every everyMs; waitMs is 0
	// when the attempt may go ahead, else how long the client must wait.
	ReserveUnlock(tx storage.Tx, id uint64, client string, nowMs, everyMs int64, burst int) (waitMs int64, err error)
	// CancelUnlock gives back the attempt of a client that succeeded.
	CancelUnlock(tx storage.Tx, id uint64, client string, nowMs, everyMs int64) error
}

// reserveUnlock takes one unlock attempt of ip at share id. cancel is nil
// when the client must wait; else the caller calls it when the attempt
// succeeds.
func (s *Store) reserveUnlock(ctx context.Context, id uint64, ip netip.Addr, now time.Time) (cancel func(context.Context, time.Time), wait time.Duration, err error) {
	shared, ok := s.be.(SharedUnlockLimit)
	if !ok {
		res, wait := s.unlocks.reserve(id, ip, now)
		if res == nil {
			return nil, wait, nil
		}
		return func(_ context.Context, at time.Time) { res.CancelAt(at) }, 0, nil
	}
	client := clientNet(ip).String()
	every := unlockEvery.Milliseconds()
	var waitMs int64
	err = s.db.Update(ctx, func(tx storage.Tx) error {
		var err error
		waitMs, err = shared.ReserveUnlock(tx, id, client, now.UnixMilli(), every, unlockBurst)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if waitMs > 0 {
		return nil, time.Duration(waitMs) * time.Millisecond, nil
	}
	return func(ctx context.Context, at time.Time) {
		err := s.db.Update(ctx, func(tx storage.Tx) error {
			return shared.CancelUnlock(tx, id, client, at.UnixMilli(), every)
		})
		if err != nil {
			s.log.Warn("share: giving back an unlock attempt", zap.Error(err))
		}
	}, 0, nil
}

// Unlock attempts per (share, client): a burst of 5, then one every 12
// seconds. Correct passwords give their token back, so only wrong ones
// are slowed down. Writes from a share's page (comments) per (share,
// client): 10 a minute.
const (
	unlockBurst       = 5
	unlockEvery       = 12 * time.Second
	writeBurst        = 10
	writeEvery        = 6 * time.Second
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

// unlockLimiter holds a limiter per (share, client) of burst attempts
// refilled one every every, at most maxUnlockLimiters of them: when
// full, it drops those idle long enough to have refilled (as good as
// new), then, if still full, a tenth of the rest at random.
type unlockLimiter struct {
	mu    sync.Mutex
	m     map[unlockKey]*unlockEntry
	every time.Duration
	burst int
}

func newUnlockLimiter() *unlockLimiter { return newClientLimiter(unlockEvery, unlockBurst) }

// newClientLimiter is a limiter per (share, client) of burst attempts
// refilled one every every.
func newClientLimiter(every time.Duration, burst int) *unlockLimiter {
	return &unlockLimiter{m: map[unlockKey]*unlockEntry{}, every: every, burst: burst}
}

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
		e = &unlockEntry{lim: rate.NewLimiter(rate.Every(u.every), u.burst)}
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
	idle := time.Duration(u.burst) * u.every
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
