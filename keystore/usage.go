package keystore

import (
	"context"

	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// Outcomes are what a request of a known key came to, as usage over time
// counts them: ok, or the reason it was refused.
var Outcomes = [...]string{
	OutcomeOK,
	problem.CodeKeyDisabled,
	problem.CodeKeyNotValid,
	problem.CodeIPNotAllowed,
	problem.CodeNotFound,
	problem.CodeMethodNotAllowed,
	problem.CodeMissingPrivilege,
	problem.CodeRateLimited,
	problem.CodeQuotaExceeded,
	problem.CodeUnavailable,
}

// OutcomeOK is a request the key check let through.
const OutcomeOK = "ok"

// UsageRetention is how long hourly usage is kept.
const UsageRetention = 90 * 24 * time.Hour

func outcomeIndex(outcome string) int {
	for i, o := range Outcomes {
		if o == outcome {
			return i
		}
	}
	return -1
}

// HourCount is the requests of one key in one hour (UTC) that came to
// one outcome.
type HourCount struct {
	Hour    time.Time
	Outcome string
	Count   uint64
}

// hourly counts one key's requests per hour and outcome in memory: the
// current hour in atomic counters (a request adds one, nothing more), the
// hours before it, not yet flushed, in done.
type hourly struct {
	hour   atomic.Int64 // unix hours of counts
	counts [len(Outcomes)]atomic.Uint64

	mu   sync.Mutex
	done []HourCount
}

// add counts one request of outcome i at ns.
func (h *hourly) add(i int, ns int64) {
	hr := ns / int64(time.Hour)
	if h.hour.Load() != hr && !h.turn(i, hr) {
		return
	}
	h.counts[i].Add(1)
}

// turn moves the counts of the hour that ended into done when hr is a
// later hour, and reports whether the request is to be counted in
// counts; one of an earlier hour (a request that began before the hour
// turned) is counted into done as its own hour's.
func (h *hourly) turn(i int, hr int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch old := h.hour.Load(); {
	case hr > old:
		h.drain(old)
		h.hour.Store(hr)
	case hr < old:
		h.done = append(h.done, HourCount{Hour: time.Unix(hr*3600, 0).UTC(), Outcome: Outcomes[i], Count: 1})
		return false
	}
	return true
}

// drain moves the counts into done as hour hr's. The caller holds mu.
func (h *hourly) drain(hr int64) {
	for i := range h.counts {
		if n := h.counts[i].Swap(0); n > 0 {
			h.done = append(h.done, HourCount{Hour: time.Unix(hr*3600, 0).UTC(), Outcome: Outcomes[i], Count: n})
		}
	}
}

// take returns every count not yet flushed and forgets them.
func (h *hourly) take() []HourCount {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drain(h.hour.Load())
	out := h.done
	h.done = nil
	return out
}

// giveBack keeps counts whose flush failed for the next one.
func (h *hourly) giveBack(list []HourCount) {
	h.mu.Lock()
	h.done = append(h.done, list...)
	h.mu.Unlock()
}

// UsageSeries is a key's requests over time, as GET /webapi/keys/{id}/usage
// returns them.
type UsageSeries struct {
	KeyID      string        `json:"keyId,omitempty"`
	ConsumerID string        `json:"consumerId,omitempty"`
	Resolution string        `json:"resolution"`
	From       time.Time     `json:"from"`
	To         time.Time     `json:"to"`
	Buckets    []UsageBucket `json:"buckets"`
}

// UsageBucket is one hour or day of a series: the requests let through
// and those refused by reason.
type UsageBucket struct {
	Start   time.Time         `json:"start"`
	OK      uint64            `json:"ok"`
	Refused map[string]uint64 `json:"refused"`
}

// UsageOver returns key id's requests from from to to (UTC hours, or days
// when byDay), every instance's: what the backend holds and what this
// instance has not flushed yet.
func (k *Keys) UsageOver(id string, from, to time.Time, byDay bool) (UsageSeries, error) {
	e := k.entry(id)
	if e == nil {
		return UsageSeries{}, ErrNotFound
	}
	s, err := k.usageOver(&e.meter, from, to, byDay)
	s.KeyID = id
	return s, err
}

// usageOver is the series of the holder whose meter is m, without its id.
func (k *Keys) usageOver(m *meter, from, to time.Time, byDay bool) (UsageSeries, error) {
	step, res := time.Hour, "hour"
	if byDay {
		step, res = 24*time.Hour, "day"
	}
	from, to = from.UTC().Truncate(step), to.UTC()
	if !to.Equal(to.Truncate(step)) {
		to = to.Truncate(step).Add(step)
	}
	// Under flushMu: a flush takes counts from memory before storage has
	// them, and would otherwise be missing from both reads.
	k.flushMu.Lock()
	stored, err := k.backend.UsageHours(context.Background(), m.holder.holderID(), from, to)
	pending := m.hourly.peek()
	k.flushMu.Unlock()
	if err != nil {
		return UsageSeries{}, err
	}
	n := int(to.Sub(from) / step)
	out := UsageSeries{Resolution: res, From: from, To: to, Buckets: make([]UsageBucket, n)}
	for i := range out.Buckets {
		out.Buckets[i] = UsageBucket{Start: from.Add(time.Duration(i) * step), Refused: map[string]uint64{}}
	}
	for _, list := range [][]HourCount{stored, pending} {
		for _, c := range list {
			if c.Hour.Before(from) || !c.Hour.Before(to) {
				continue
			}
			b := &out.Buckets[int(c.Hour.Sub(from)/step)]
			if c.Outcome == OutcomeOK {
				b.OK += c.Count
			} else {
				b.Refused[c.Outcome] += c.Count
			}
		}
	}
	return out, nil
}

// peek returns the counts not yet flushed, leaving them.
func (h *hourly) peek() []HourCount {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]HourCount(nil), h.done...)
	hr := h.hour.Load()
	for i := range h.counts {
		if n := h.counts[i].Load(); n > 0 {
			out = append(out, HourCount{Hour: time.Unix(hr*3600, 0).UTC(), Outcome: Outcomes[i], Count: n})
		}
	}
	return out
}
