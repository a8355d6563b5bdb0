package keystore

import (
	"context"
	"errors"
	"time"

	"github.com/keygate/keygate/keystore/traffic"
)

// leaser is a meter as its quota state leases blocks through it: the
// holder's quota as it is now, and the backend. A type of its own, so
// that its methods are not promoted to Entry.
type leaser meter

// leaser is m as a traffic.Leaser.
func (m *meter) leaser() *leaser { return (*leaser)(m) }

// CurrentQuota implements traffic.Leaser.
func (l *leaser) CurrentQuota() *traffic.Quota {
	_, q := l.holder.policies()
	return q
}

// LeaseQuota implements traffic.Leaser: the lease that spends the
// period's last unit emits the holder's quota_exhausted event in its
// transaction.
func (l *leaser) LeaseQuota(span traffic.QuotaSpan, limit, want int64, now time.Time) (traffic.QuotaLease, error) {
	return l.keys.backend.LeaseQuota(context.Background(), l.holder.holderID(), span, limit, want, l.holder.quotaExhausted(now))
}

// giveBack returns n unspent units of the quota period span of holder
// id (a key or a consumer), taken back from this instance's block when
// the limit was lowered. On an error they stay counted as spent: a quota
// is never overspent.
func (k *Keys) giveBack(id string, span traffic.QuotaSpan, n int64) {
	if err := k.backend.ReturnQuota(context.Background(), id, span, n); err == nil {
		return
	}
	if m := k.meterOf(id); m != nil {
		m.quota.Kept(span, n)
	}
}

// ReturnQuota gives back, on a clean stop, the unspent blocks of the
// current period that this instance holds, keys' and consumers', so that
// other instances can spend them. It returns how many units it gave back.
func (k *Keys) ReturnQuota() (int64, error) {
	now := k.now()
	var total int64
	var errs []error
	for _, m := range k.meters() {
		_, q := m.holder.policies()
		if q == nil {
			continue
		}
		id, span := m.holder.holderID(), q.Period.Span(now)
		n, err := m.quota.Return(span, func(n int64) error {
			return k.backend.ReturnQuota(context.Background(), id, span, n)
		})
		if err != nil {
			errs = append(errs, err)
		}
		total += n
	}
	return total, errors.Join(errs...)
}

// entries returns every key in memory.
func (k *Keys) entries() []*Entry {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]*Entry, 0, len(k.byID))
	for _, e := range k.byID {
		out = append(out, e)
	}
	return out
}

// meters returns every meter in memory: each key's and each consumer's.
func (k *Keys) meters() []*meter {
	k.mu.RLock()
	out := make([]*meter, 0, len(k.byID))
	for _, e := range k.byID {
		out = append(out, &e.meter)
	}
	k.mu.RUnlock()
	k.scopeMu.RLock()
	for _, c := range k.consumers {
		out = append(out, &c.meter)
	}
	k.scopeMu.RUnlock()
	return out
}

// meterOf is the meter of holder id, a key or a consumer; nil if none.
func (k *Keys) meterOf(id string) *meter {
	if e := k.entry(id); e != nil {
		return &e.meter
	}
	k.scopeMu.RLock()
	defer k.scopeMu.RUnlock()
	if c := k.consumers[id]; c != nil {
		return &c.meter
	}
	return nil
}

// quotaView is what the holder of m has used of its quota (its own or
// its plan's) this period and when it resets; nil without a quota.
func (m *meter) quotaView(now time.Time) (*int64, *time.Time) {
	_, q := m.holder.policies()
	if q == nil {
		return nil, nil
	}
	used, reset := m.quota.Used(q, now)
	return &used, &reset
}

// ReadQuotas reads the quota use of the current period back from the
// backend (what other instances, or this one before a restart, took) for
// holder id (a key or a consumer), or every holder with a quota when id
// is empty: for an administrator's view.
func (k *Keys) ReadQuotas(id string) error {
	var list []*meter
	if id == "" {
		list = k.meters()
	} else if m := k.meterOf(id); m != nil {
		list = append(list, m)
	}
	now := k.now()
	for _, m := range list {
		_, q := m.holder.policies()
		if q == nil {
			continue
		}
		span := q.Period.Span(now)
		used, err := k.backend.QuotaUsed(context.Background(), m.holder.holderID(), span)
		if err != nil {
			return err
		}
		m.quota.Read(q, span, used, m.leaser())
	}
	return nil
}
