package keystore

import (
	"errors"
	"net/http"
	"time"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore/traffic"
)

// claimsHold is how long an instance goes on by its last claims when it
// cannot sync, at the least, before it spends its share of the limit
// from its own counts.
const claimsHold = 10 * time.Second

// maxAhead bounds how far on a claim reckons the room: a falling
// previous window frees room as time passes, which an instance claims
// for its next interval, but never for more than a usual interval.
const maxAhead = 100 * time.Millisecond

// minInstanceLive is how long an instance that stopped syncing still
// counts among those sharing a limit, at the least: a killed instance
// holds the others to their shares for that long.
const minInstanceLive = 3 * time.Second

// spend runs step 4½ of the key check, what the key may spend: the
// rate limits of the key's scope (its own and its plan's) and of its
// consumer's (the consumer's own and its plan's), then the key's quota
// and the consumer's. A request passes only if every scope lets it; one
// refused gives back what the scopes before took. Nothing of it asks
// the database but a quota whose block is empty.
func (e *Entry) spend(d Decision, s *compiled, now time.Time) Decision {
	ns := now.UnixNano()
	sh := e.sharing(ns)
	var cs *consumerSnap
	if s.consumer != nil {
		cs = s.consumer.snap.Load()
	}
	keyTook := len(s.limits) > 0
	if keyTook {
		r := e.limits.Take(ns, sh)
		e.activate()
		if r.Violated != 0 {
			return d.rateLimited(r, s.limits, nil)
		}
	}
	consumerTook := cs != nil && len(cs.limits) > 0
	if consumerTook {
		r := s.consumer.limits.Take(ns, sh)
		s.consumer.activate()
		if r.Violated != 0 {
			if keyTook {
				e.limits.Untake(ns)
			}
			return d.rateLimited(r, cs.limits, cs.names)
		}
	}
	untake := func() {
		if keyTook {
			e.limits.Untake(ns)
		}
		if consumerTook {
			s.consumer.limits.Untake(ns)
		}
	}
	var keySpent traffic.Spent
	if q := s.quota; q != nil && e.keys != nil {
		var err error
		if keySpent, err = e.quota.Spend(q, now, e.leaser()); err != nil {
			untake()
			return d.quotaRefused(err, q, traffic.QuotaPolicy, now)
		}
	}
	if cs != nil && cs.quota != nil && e.keys != nil {
		if _, err := s.consumer.quota.Spend(cs.quota, now, s.consumer.leaser()); err != nil {
			untake()
			if s.quota != nil {
				// The key's unit was not spent after all: back into the
				// block it came from, if that is still the block.
				e.quota.Refund(keySpent)
			}
			return d.quotaRefused(err, cs.quota, consumerPolicy+traffic.QuotaPolicy, now)
		}
	}
	return d
}

// rateLimited is the 429 of the policies of limits that r says refused,
// named by names when set (a consumer's) or by their own names.
func (d Decision) rateLimited(r traffic.Result, limits []traffic.RateLimit, names []string) Decision {
	d.RetryAfter = r.RetryAfter
	for i, p := range limits {
		if r.Violated&(1<<i) != 0 {
			if names != nil {
				d.Violated = append(d.Violated, names[i])
			} else {
				d.Violated = append(d.Violated, p.Name)
			}
		}
	}
	return d.refuse(http.StatusTooManyRequests, problem.CodeRateLimited)
}

// quotaRefused is the refusal of quota q, named name, that Spend
// answered err: 429 when its period is spent, else 503.
func (d Decision) quotaRefused(err error, q *traffic.Quota, name string, now time.Time) Decision {
	if errors.Is(err, traffic.ErrQuotaSpent) {
		reset := q.Period.Next(q.Period.Start(now))
		d.RetryAfter = max(int64(reset.Sub(now)+time.Second-1)/int64(time.Second), 1)
		d.Violated = []string{name}
		return d.refuse(http.StatusTooManyRequests, problem.CodeQuotaExceeded)
	}
	d.RetryAfter = 1
	return d.refuse(http.StatusServiceUnavailable, problem.CodeUnavailable)
}

// sharing is how e's instance stands with the others at ns: how many
// share its limits, and whether its claims of the last sync still hold
// (a few sync intervals; then the database is taken to be away).
func (e *Entry) sharing(ns int64) traffic.Sharing {
	if e.keys == nil {
		return traffic.Sharing{Instances: 1}
	}
	n := e.keys.instances.Load()
	return traffic.Sharing{Instances: n, Claims: n > 1 && ns < e.keys.claimsUntil.Load()}
}

// SyncRates shares this instance's rate-limit counts with the other
// instances of a shared backend and takes theirs; without a RateSharer
// it does nothing. On an error the counts stay to be sent next time, and
// the limits go on from memory.
func (k *Keys) SyncRates(now time.Time) error {
	rs, ok := k.backend.(traffic.RateSharer)
	if !ok {
		return nil
	}
	ns := now.UnixNano()
	var deltas, demand []traffic.RateCount
	// The holders with something to sync here (k.syncing); one gone
	// quiet is dropped, and only takes what others counted for it, below.
	var limited []*meter
	active := make(map[string]bool)
	for _, m := range k.syncing.listed() {
		if l, _ := m.holder.policies(); len(l) == 0 || m.limits.Quiet(ns) {
			k.syncing.drop(m, ns)
			continue
		}
		limited = append(limited, m)
		active[m.holder.holderID()] = true
		deltas, demand = m.limits.Pending(m.holder.holderID(), deltas, demand)
	}
	if len(limited) == 0 && !k.anyPolicies(ns) {
		return nil // no key or consumer has a policy: nothing to share
	}
	// An instance counts while it syncs; three missed syncs and it is gone.
	live, ahead := minInstanceLive, int64(0)
	if last := k.lastRateSync.Swap(ns); last > 0 && ns > last {
		live = max(live, 3*time.Duration(ns-last))
		// A claim is reckoned with the room as it will be at the next
		// sync, at most maxAhead on: a burst spends a claim at once, and
		// a sync delayed by load must not make it claim the room of
		// seconds to come (measured: 118 through against 100).
		ahead = min(ns-last, int64(maxAhead))
	}
	err := rs.ShareRates(now, k.instance, live, deltas, demand, func(share traffic.RateShare) []traffic.RateCount {
		n := int64(max(share.Instances, 1))
		k.instances.Store(n)
		counts, demands := byHolder(share.Counts), byHolder(share.Demand)
		var claims []traffic.RateCount
		for _, m := range limited {
			id := m.holder.holderID()
			m.limits.Apply(counts[id], ns)
			claims = m.limits.Reclaim(id, ns, traffic.Sharing{Instances: n, Claims: n > 1, Ahead: ahead}, demands[id], claims)
		}
		// A holder quiet here but busy elsewhere: its counts, for the
		// first request that comes here.
		for id, rows := range counts {
			if !active[id] {
				if m := k.meterOf(id); m != nil {
					m.limits.Apply(rows, ns)
				}
			}
		}
		return claims
	})
	if err != nil {
		for _, d := range deltas {
			if m := k.meterOf(d.HolderID); m != nil {
				m.limits.Unsent(d)
			}
		}
		for _, m := range limited {
			m.limits.DropClaims()
		}
		return err
	}
	// The claims hold from here: the transaction that made them (once or
	// run again) has committed.
	for _, m := range limited {
		m.limits.CommitClaims()
	}
	// Claims hold a while without a sync: an instance that falls back
	// to its share while the others still claim could spend what they
	// claim too, so only a long silence (the database away) ends them,
	// not a sync delayed by load.
	k.claimsUntil.Store(ns + int64(max(claimsHold, live)))
	return nil
}

// anyPolicies reports whether any key or consumer has a rate-limit
// policy: an instance with none takes no part in the syncs, while one
// whose holders are all quiet here goes on (others may be busy with
// them). It looks at every holder at most every policiesRecheck.
func (k *Keys) anyPolicies(ns int64) bool {
	if ns < k.policiesUntil.Load() {
		return k.policiesFound.Load()
	}
	found := false
	for _, m := range k.meters() {
		if l, _ := m.holder.policies(); len(l) > 0 {
			found = true
			break
		}
	}
	k.policiesFound.Store(found)
	k.policiesUntil.Store(ns + int64(policiesRecheck))
	return found
}

// policiesRecheck is how long anyPolicies trusts what it found: a holder
// given a policy meanwhile is synced anyway, as its change lists it.
const policiesRecheck = 10 * time.Second

// byHolder groups list by holder id.
func byHolder(list []traffic.RateCount) map[string][]traffic.RateCount {
	m := make(map[string][]traffic.RateCount)
	for _, c := range list {
		m[c.HolderID] = append(m[c.HolderID], c)
	}
	return m
}

// RateLimitHeaders returns the RateLimit-Policy and RateLimit values for
// the decided key at now (draft-ietf-httpapi-ratelimit-headers-10), both
// empty for a key held to no rate limit or quota. RateLimit names the
// policy closest to being exhausted, of the key's scope or its
// consumer's.
func (d *Decision) RateLimitHeaders(now time.Time) (policy, current string) {
	if d.Entry == nil {
		return "", ""
	}
	s := d.Entry.snap.Load()
	if s.policyHeader == "" {
		return "", ""
	}
	ns := now.UnixNano()
	sh := d.Entry.sharing(ns)
	var c closest
	c.meter(&d.Entry.meter, "", s.limits, s.quota, ns, sh, now)
	if s.consumer != nil {
		cs := s.consumer.snap.Load()
		c.meter(&s.consumer.meter, consumerPolicy, cs.limits, cs.quota, ns, sh, now)
	}
	var buf [112]byte
	return s.policyHeader, string(traffic.AppendRateLimit(buf[:0], c.prefix, c.name, c.r, c.t))
}

// closest is the policy closest to exhaustion among those seen so far.
type closest struct {
	prefix, name string
	r, t         int64
	frac         float64
}

// meter takes m's policies and quota into account, named after prefix.
func (c *closest) meter(m *meter, prefix string, limits []traffic.RateLimit, q *traffic.Quota, ns int64, sh traffic.Sharing, now time.Time) {
	if len(limits) > 0 {
		if i, r, t, frac := m.limits.Closest(ns, sh); i >= 0 && i < len(limits) && (c.name == "" || frac < c.frac) {
			*c = closest{prefix, limits[i].Name, r, t, frac}
		}
	}
	if q != nil {
		used, reset := m.quota.Used(q, now)
		qr := max(q.Limit-used, 0)
		if f := float64(qr) / float64(q.Limit); c.name == "" || f < c.frac {
			t := max(int64(reset.Sub(now)+time.Second-1)/int64(time.Second), 0)
			*c = closest{prefix, traffic.QuotaPolicy, qr, t, f}
		}
	}
}
