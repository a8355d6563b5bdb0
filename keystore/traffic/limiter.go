package traffic

import (
	"math"
	"sync"
	"time"
)

// Limiter is the rate-limit state of one holder on this instance: for each
// policy, the sliding-window counter of two fixed windows (Kong's
// rate-limiting-advanced, Cloudflare): the estimate at time t, a fraction
// f into window i, is count(i-1)·(1-f) + count(i). It is exact when the
// previous window's requests were spread evenly; otherwise a burst at
// the end of one window and a steady flow in the next can let through up
// to twice the limit within one sliding window, never more. Counts are
// of requests let through, across instances: total holds what the last
// sync read from the database (every instance's, ours included) and
// local what this instance let through since.
type Limiter struct {
	mu       sync.Mutex
	policies []policyState
	// dirty is set when a count changed since the last sync.
	dirty bool
}

// policyState is one policy's two windows.
type policyState struct {
	RateLimit
	window int64 // windowSeconds in ns
	index  int64 // the current window: unix ns / window
	// cur and prev are the counts of windows index and index-1 as the
	// last sync read them (0 on one instance), curLocal and prevLocal
	// what this instance added since, not yet sent.
	cur, prev           int64
	curLocal, prevLocal int64
	// others is the pace of the other instances in this window at the
	// last sync (requests a ns), syncedAt when that sync was and gap the
	// interval before it. Between syncs the estimate counts what they
	// let through at that pace, for at most one gap, so that instances
	// sharing a load do not each let through the others' share of a
	// whole sync interval beyond the limit.
	others        float64
	syncedAt, gap int64
	// claim is what this instance set aside for itself in window
	// claimIdx at the last sync, when several share the limit: the
	// database counts it as let through, so that no other instance can
	// spend it. spent is what it let through against the claim since,
	// and used the part of it let through in the claim's window (a pass
	// after the window moved on counts in the next and gives its unit of
	// the claim back). covered is how many of curLocal (or prevLocal,
	// once the window moved on) claims hold, which the next sync does
	// not send again.
	claim, claimIdx      int64
	spent, used, covered int64
	// next (in window nextIdx) is the claim a sync is making, which
	// becomes claim once the sync has committed (a transaction may run
	// again, or fail); spentAt and usedAt are spent and used when it was
	// reckoned: what is let through after counts against the new claim.
	next, nextIdx, spentAt, usedAt int64
	proposed                       bool
	// asked counts the requests that came since the last sync, let
	// through or not, and lastAsked those of the interval before it,
	// sent as this instance's demand: instances claim what is left in
	// proportion to their demands, so that idle ones do not hold what a
	// busy one could spend. sentAsked is the demand last sent.
	asked, lastAsked, sentAsked int64
	// askedAt is when a sync last saw the holder asked anything here (at
	// first, when the first sync saw it): a holder quiet for
	// standingClaimFor keeps no standing claim.
	askedAt int64
}

// standingClaimFor is how long a holder asked nothing keeps its standing
// claim. Past it, it holds none: thousands of idle holders each rewriting
// a small claim at every sync slowed every instance's syncs until the busy
// holders' claims lagged behind their load (20,000 consumers of a limit a
// second: a fifth of a key's limit let through). The first requests to a
// holder quiet that long get only what an instance that claimed nothing
// may let through, until the next sync claims by their demand.
const standingClaimFor = time.Minute

// estimate is the sliding-window count at ns, which must be in window
// p.index.
func (p *policyState) estimate(ns int64) float64 {
	return p.synced(ns) + float64(p.curLocal) + p.othersSince(ns)
}

// synced is the sliding-window count at ns of what the last sync read
// (every instance's counts) and what this instance let through in the
// previous window since: all but this window's unsent count and the
// others' pace.
func (p *policyState) synced(ns int64) float64 {
	start := p.index * p.window
	ns = max(ns, start) // an earlier request's time counts as the window's start
	weight := float64(p.window-(ns-start)) / float64(p.window)
	return float64(p.prev+p.prevLocal)*weight + float64(p.cur)
}

// othersSince is what the other instances are taken to have let through
// since the last sync, at the pace they kept before it.
func (p *policyState) othersSince(ns int64) float64 {
	if p.others <= 0 {
		return 0
	}
	if d := min(ns-max(p.syncedAt, p.index*p.window), p.gap); d > 0 {
		return p.others * float64(d)
	}
	return 0
}

// Sharing is how an instance stands with the others sharing a limit.
type Sharing struct {
	// Instances is how many share it (1: this one alone).
	Instances int64
	// Claims is set while the instance syncs: it lets through only what
	// it claimed at the last sync. Otherwise (one instance, or the
	// database away) it goes by its own counts.
	Claims bool
	// Ahead is how long until the next sync (ns), as the last interval
	// was: what a claim is for.
	Ahead int64
}

// room is how many more requests p lets through at ns on this instance,
// as a real number: the whole requests it lets through are those that
// start below it. Between two syncs of several instances, each spends
// only what it claimed: instances that each took what the sliding window
// has left, in a burst shorter than the sync interval, would let through
// the limit once each. Out of touch with the others, an instance spends
// its share of what the last sync left, in whole requests.
func (p *policyState) room(ns int64, sh Sharing) float64 {
	if sh.Claims {
		if p.claim == 0 && p.spent == 0 && p.lastAsked == 0 {
			// An instance that was asked nothing claimed nothing; the
			// first request to come is not refused for want of a claim
			// while every instance could do the same within the limit.
			return min(math.Floor((float64(p.Limit)-p.estimate(ns))/float64(sh.Instances)), 1)
		}
		return float64(p.claim - p.spent)
	}
	r := float64(p.Limit) - p.estimate(ns)
	if sh.Instances > 1 {
		// Whole requests: every instance taking its share together stays
		// within the limit.
		share := math.Floor((float64(p.Limit)-p.synced(ns))/float64(sh.Instances)) - float64(p.curLocal)
		r = min(r, share)
	}
	return r
}

// reclaim sets aside, once a sync has read every instance's counts at
// ns, this instance's part of what p has left until the next sync, out
// of what no instance has let through or claimed: what it was asked in
// the last interval if that much is left, else the part its demand is
// of the demands of all (demand, at least its own); never more than
// twice its demand, and at least one while anything is left and it was
// asked anything. Syncs take turns, so each sees the claims before it,
// and the claims never add up to more than is left. It returns out with
// the changes to the window counts that the claim makes.
func (p *policyState) reclaim(id string, ns int64, sh Sharing, demand int64, out []RateCount) []RateCount {
	unused := max(p.claim-p.used, 0)
	var keep int64 // the unused claim, when it is in the current window
	switch p.claimIdx {
	case p.index:
		keep = unused
	case p.index - 1:
		if unused > 0 {
			out = append(out, RateCount{id, p.Name, p.WindowSeconds, p.claimIdx, -unused})
			p.prev -= unused
		}
	}
	var c int64
	if sh.Instances > 1 {
		// The room as it will be at the next sync, within this window:
		// the previous window's weight falls meanwhile, and a claim of
		// only what is free now would lose that room to every interval.
		at := min(ns+sh.Ahead, (p.index+1)*p.window-1)
		free := float64(p.Limit) - p.synced(at) + float64(keep)
		// Its demand first while there is enough for it, else its part
		// by demand; twice its demand at most, so that a growing load
		// finds room. An instance asked nothing keeps a standing claim of
		// a quarter of its share of what is free: a burst that comes to
		// an idle holder is let through at once, up to a quarter of what
		// is left, while a busy holder leaves little free for idle
		// instances to hold; for standingClaimFor, then none.
		asked := float64(p.lastAsked)
		part := free * asked / float64(max(demand, p.lastAsked, 1))
		c = int64(min(free, 2*asked, max(asked, part)))
		if p.lastAsked > 0 || p.askedAt == 0 {
			p.askedAt = ns
		}
		switch {
		case p.lastAsked > 0:
			c = max(c, min(int64(free), 1))
		case ns-p.askedAt <= int64(standingClaimFor):
			c = int64(free / float64(4*sh.Instances))
		default:
			c = 0
		}
		c = max(c, 0)
	}
	if d := c - keep; d != 0 {
		out = append(out, RateCount{id, p.Name, p.WindowSeconds, p.index, d})
		p.cur += d
	}
	p.next, p.nextIdx, p.spentAt, p.usedAt, p.proposed = c, p.index, p.spent, p.used, true
	return out
}

// commitClaim makes the claim of a committed sync p's claim. What was
// let through since it was reckoned counts against it; past it, those
// requests are sent with the next sync, not held by the claim.
func (p *policyState) commitClaim() {
	if !p.proposed {
		return
	}
	p.proposed = false
	p.claim, p.claimIdx = p.next, p.nextIdx
	p.spent, p.used = max(p.spent-p.spentAt, 0), max(p.used-p.usedAt, 0)
	if over := p.used - p.claim; over > 0 {
		p.used -= over
		p.covered = max(p.covered-over, 0)
	}
}

// roll moves p to the window of ns. A request whose time is of an
// earlier window (it began before another request moved the window on)
// counts in the current one: the windows never go back.
func (p *policyState) roll(ns int64) {
	idx := ns / p.window
	switch {
	case idx <= p.index:
		return
	case idx == p.index+1:
		p.prev, p.prevLocal = p.cur, p.curLocal
		if p.claimIdx != p.index {
			p.covered = 0 // the claim's window is gone
		}
	default:
		p.covered = 0
		// A previous window older than one window counts for nothing;
		// its unsent count is dropped with it.
		p.prev, p.prevLocal = 0, 0
	}
	p.cur, p.curLocal, p.index = 0, 0, idx
}

// Adopt makes the limiter follow policies, keeping the counts of those
// that stay (same name and window).
func (l *Limiter) Adopt(policies []RateLimit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := make([]policyState, len(policies))
	for i, p := range policies {
		next[i] = policyState{RateLimit: p, window: p.WindowSeconds * int64(time.Second)}
		for _, old := range l.policies {
			if old.Name == p.Name && old.WindowSeconds == p.WindowSeconds {
				next[i] = old
				next[i].Limit = p.Limit
			}
		}
	}
	l.policies = next
}

// Result is what Take decided for one request.
type Result struct {
	// Violated has a bit per policy (by index) that refused.
	Violated uint8
	// RetryAfter is the whole seconds until the refused policies would
	// let one more through (at least 1).
	RetryAfter int64
}

// Take lets one request through at ns if every policy has room on this
// instance, counting it in each; else counts nothing and says which
// refused.
func (l *Limiter) Take(ns int64, sh Sharing) Result {
	var res Result
	l.mu.Lock()
	for i := range l.policies {
		p := &l.policies[i]
		p.roll(ns)
		p.asked++
		// The request is let through while there is any room: with a
		// steady flow that holds each window to the limit (a whole
		// request of room would hold small limits to one less).
		if p.room(ns, sh) <= 0 {
			res.Violated |= 1 << i
			if s := p.wait(ns); s > res.RetryAfter {
				res.RetryAfter = s
			}
		}
	}
	if res.Violated == 0 {
		for i := range l.policies {
			p := &l.policies[i]
			p.curLocal++
			if sh.Claims {
				// Within the claim and its window, the claim holds it;
				// past either (the first request of an instance asked
				// nothing), the next sync sends it.
				if p.spent < p.claim && p.claimIdx == p.index {
					p.covered++
					p.used++
				}
				p.spent++
			}
		}
		l.dirty = true
	}
	l.mu.Unlock()
	return res
}

// Untake takes back a request that Take let through but the quota then
// refused: it was not let through after all.
func (l *Limiter) Untake(ns int64) {
	l.mu.Lock()
	for i := range l.policies {
		p := &l.policies[i]
		if p.index == ns/p.window && p.curLocal > 0 {
			p.curLocal--
			if p.spent > 0 {
				p.spent--
				if p.spent < p.claim && p.used > 0 && p.claimIdx == p.index {
					p.covered--
					p.used--
				}
			}
		}
	}
	l.mu.Unlock()
}

// wait is the whole seconds from ns until p has room for one more
// request, at least 1.
func (p *policyState) wait(ns int64) int64 {
	limit := float64(p.Limit)
	cur, prev := float64(p.cur+p.curLocal), float64(p.prev+p.prevLocal)
	// In ns from ns (small numbers: a float64 of unix ns loses them).
	start := float64(p.index*p.window - ns)
	var at float64 // when the estimate falls below the limit
	switch {
	case cur < limit && prev > 0:
		// Within this window, as the previous one's weight falls.
		f := 1 - (limit-cur)/prev
		at = start + f*float64(p.window)
	case cur > 0:
		// In the next window, as this one's weight falls.
		f := 1 - limit/cur
		at = start + float64(p.window) + math.Max(f, 0)*float64(p.window)
	default:
		at = start + float64(p.window)
	}
	// Strictly below: a nanosecond past the point where it equals.
	s := int64(math.Ceil((at + 1) / float64(time.Second)))
	return max(s, 1)
}

// state is the remaining count of p at ns on this instance: how many requests Take would let through now, so that 0
// means the next is refused; and the whole seconds until the window is
// restored in full.
func (p *policyState) state(ns int64, sh Sharing) (remaining, reset int64) {
	remaining = max(int64(math.Ceil(p.room(ns, sh))), 0)
	end := (p.index + 1) * p.window
	switch {
	case p.cur+p.curLocal > 0:
		reset = end + p.window - ns
	case p.prev+p.prevLocal > 0:
		reset = end - ns
	}
	return remaining, (reset + int64(time.Second) - 1) / int64(time.Second)
}

// Closest returns the policy Closest to being exhausted at ns on this
// instance: its index, remaining and reset seconds; -1 without policies.
func (l *Limiter) Closest(ns int64, sh Sharing) (idx int, remaining, reset int64, frac float64) {
	idx, frac = -1, 2
	l.mu.Lock()
	for i := range l.policies {
		p := &l.policies[i]
		p.roll(ns)
		r, t := p.state(ns, sh)
		if f := float64(r) / float64(p.Limit); f < frac {
			idx, remaining, reset, frac = i, r, t, f
		}
	}
	l.mu.Unlock()
	return idx, remaining, reset, frac
}

// RateCount is one policy window's count of one holder (a key, a
// consumer), as instances share them through the database.
type RateCount struct {
	HolderID      string
	Policy        string
	WindowSeconds int64
	Index         int64 // the window: unix seconds / WindowSeconds
	Count         int64
}

// Pending takes what this instance let through since the last sync, as
// deltas to add, and counts them into the totals meanwhile (what its
// claim covers is in the totals already); and what it was asked, as its
// demand.
func (l *Limiter) Pending(id string, out, demand []RateCount) ([]RateCount, []RateCount) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.policies {
		p := &l.policies[i]
		p.lastAsked, p.asked = p.asked, 0
		if p.lastAsked > 0 || p.sentAsked > 0 {
			demand = append(demand, RateCount{id, p.Name, p.WindowSeconds, 0, p.lastAsked})
			p.sentAsked = p.lastAsked
		}
	}
	if !l.dirty {
		return out, demand
	}
	l.dirty = false
	for i := range l.policies {
		p := &l.policies[i]
		prev, cur := p.prevLocal, p.curLocal
		switch p.claimIdx {
		case p.index:
			cur -= p.covered
		case p.index - 1:
			prev -= p.covered
		}
		p.covered = 0
		if prev > 0 {
			out = append(out, RateCount{id, p.Name, p.WindowSeconds, p.index - 1, prev})
			p.prev += prev
		}
		if cur > 0 {
			out = append(out, RateCount{id, p.Name, p.WindowSeconds, p.index, cur})
			p.cur += cur
		}
		p.prevLocal, p.curLocal = 0, 0
	}
	return out, demand
}

// Quiet reports whether a sync at ns has nothing to do for the holder
// on this instance: no count unsent, no demand to send or to take back,
// no claim to keep or give back, and none to stand (it was asked nothing
// for standingClaimFor). A sync skips a quiet holder, so that thousands
// of idle ones cost it a check each and nothing in its transaction.
func (l *Limiter) Quiet(ns int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dirty {
		return false
	}
	for i := range l.policies {
		p := &l.policies[i]
		if p.asked > 0 || p.lastAsked > 0 || p.sentAsked > 0 || p.claim != 0 || p.proposed ||
			p.askedAt == 0 || ns-p.askedAt <= int64(standingClaimFor) {
			return false
		}
	}
	return true
}

// Reclaim makes this instance's claims for the next sync interval, after
// a sync read the counts and demands at ns; see policyState.Reclaim.
func (l *Limiter) Reclaim(id string, ns int64, sh Sharing, demands []RateCount, out []RateCount) []RateCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.policies {
		p := &l.policies[i]
		p.roll(ns)
		var demand int64
		for _, d := range demands {
			if d.Policy == p.Name && d.WindowSeconds == p.WindowSeconds {
				demand = d.Count
			}
		}
		out = p.reclaim(id, ns, sh, demand, out)
	}
	return out
}

// CommitClaims makes the claims of a sync that committed the limiter's;
// DropClaims forgets those of one that failed: the database kept the
// claims before it, which go on.
func (l *Limiter) CommitClaims() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.policies {
		l.policies[i].commitClaim()
	}
}

func (l *Limiter) DropClaims() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.policies {
		l.policies[i].proposed = false
	}
}

// policy is the state of the policy c counts for, nil if the holder no
// longer has it. The caller holds mu.
func (l *Limiter) policy(c RateCount) *policyState {
	for i := range l.policies {
		if p := &l.policies[i]; p.Name == c.Policy && p.WindowSeconds == c.WindowSeconds {
			return p
		}
	}
	return nil
}

// Unsent gives back deltas that could not be sent.
func (l *Limiter) Unsent(c RateCount) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.policy(c)
	if p == nil {
		return
	}
	switch c.Index {
	case p.index:
		p.cur -= c.Count
		p.curLocal += c.Count
	case p.index - 1:
		p.prev -= c.Count
		p.prevLocal += c.Count
	}
	l.dirty = true
}

// Apply takes the counts of every instance as the database holds them
// after a sync at ns, this instance's deltas included: rows are the
// holder's counts of the windows still current.
func (l *Limiter) Apply(rows []RateCount, ns int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.policies {
		p := &l.policies[i]
		p.roll(ns)
		// The database's counts are the truth, this instance's deltas
		// included: they fall as well as rise, when claims come back.
		var cur, prev int64
		for _, c := range rows {
			if c.Policy != p.Name || c.WindowSeconds != p.WindowSeconds {
				continue
			}
			switch c.Index {
			case p.index:
				cur = c.Count
			case p.index - 1:
				prev = c.Count
			}
		}
		p.prev = prev
		// What the others let through since the last sync, and its pace.
		p.others = 0
		if from := max(p.syncedAt, p.index*p.window); p.syncedAt > 0 && ns > from && cur > p.cur {
			p.others = float64(cur-p.cur) / float64(ns-from)
		}
		if p.syncedAt > 0 {
			p.gap = ns - p.syncedAt
		}
		p.syncedAt = ns
		p.cur = cur
	}
}
