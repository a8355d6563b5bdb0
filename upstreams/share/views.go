package share

import (
	"sync"
	"sync/atomic"

	"go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// autoFlushAt is the number of unflushed page events after which the
// store flushes on its own, so memory stays bounded between the gateway's
// periodic Flush calls.
const autoFlushAt = 4096

// viewBatch is a set of page events not yet in bbolt: opening counts and
// the activity entries ("viewed", "unlock-failed") that go with them.
type viewBatch struct {
	counts  map[uint64]int64
	entries map[uint64][]Activity // oldest first
	n       int
	// txid is the bbolt transaction writing this batch (0: not begun). A
	// read transaction with an id at or above it already sees the batch.
	txid int
}

func newViewBatch() *viewBatch {
	return &viewBatch{counts: map[uint64]int64{}, entries: map[uint64][]Activity{}}
}

// views counts page openings in memory, as the gateway does key usage
// (gateway.md, Storage): a page view costs no disk write. Reads add the
// unflushed part, so a count or an activity entry shows at once; a crash
// loses at most what came after the last Flush.
type views struct {
	mu       sync.Mutex
	cur      *viewBatch
	inflight *viewBatch // being written by Flush, or the last one written
	flushMu  sync.Mutex
	auto     atomic.Bool // an automatic flush is running
}

func newViews() *views { return &views{cur: newViewBatch()} }

// add records one page event; count tells whether it is an opening.
// It returns the number of unflushed events.
func (v *views) add(id uint64, a Activity, count bool) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if count {
		v.cur.counts[id]++
	}
	v.cur.entries[id] = append(v.cur.entries[id], a)
	v.cur.n++
	return v.cur.n
}

// includeInflight reports whether a read transaction txid must add the
// in-flight batch: it does unless that batch was committed before the
// transaction began. txid 0 is never used by bbolt for a read.
func (v *views) includeInflight(txid int) bool {
	return v.inflight != nil && (v.inflight.txid == 0 || txid < v.inflight.txid)
}

// pendingCount is the unflushed openings of share id as seen by read
// transaction txid.
func (v *views) pendingCount(txid int, id uint64) int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := v.cur.counts[id]
	if v.includeInflight(txid) {
		n += v.inflight.counts[id]
	}
	return n
}

// pendingCounts copies every unflushed count as seen by txid, for a list
// sorted by opened_count.
func (v *views) pendingCounts(txid int) map[uint64]int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[uint64]int64, len(v.cur.counts))
	for id, n := range v.cur.counts {
		out[id] += n
	}
	if v.includeInflight(txid) {
		for id, n := range v.inflight.counts {
			out[id] += n
		}
	}
	return out
}

// pendingActivity is the unflushed entries of share id, newest first.
func (v *views) pendingActivity(txid int, id uint64) []Activity {
	v.mu.Lock()
	defer v.mu.Unlock()
	var all []Activity
	if v.includeInflight(txid) {
		all = append(all, v.inflight.entries[id]...)
	}
	all = append(all, v.cur.entries[id]...)
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all
}

// forget drops the unflushed events of a deleted share.
func (v *views) forget(id uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if n := len(v.cur.entries[id]); n > 0 {
		v.cur.n -= n
	}
	delete(v.cur.counts, id)
	delete(v.cur.entries, id)
}

// Flush writes the page openings and page activity counted in memory to
// bbolt in one transaction. The gateway calls it every
// usage_flush_interval and on stop; the store also calls it by itself
// when 4096 events are waiting. Events of shares deleted meanwhile are
// dropped. On error the events are kept for the next Flush.
func (s *Store) Flush() error {
	v := s.views
	v.flushMu.Lock()
	defer v.flushMu.Unlock()
	v.mu.Lock()
	b := v.cur
	if b.n == 0 && len(b.counts) == 0 {
		v.mu.Unlock()
		return nil
	}
	v.cur = newViewBatch()
	v.inflight = b
	v.mu.Unlock()

	err := s.db.Update(func(tx *bbolt.Tx) error {
		v.mu.Lock()
		b.txid = tx.ID()
		v.mu.Unlock()
		ids := make(map[uint64]bool, len(b.entries))
		for id := range b.counts {
			ids[id] = true
		}
		for id := range b.entries {
			ids[id] = true
		}
		for id := range ids {
			r, err := loadByID(tx, u64(id))
			if err != nil {
				return err
			}
			if r == nil {
				continue
			}
			if n := b.counts[id]; n > 0 {
				r.OpenedCount += n
				if err := putShare(tx, r); err != nil {
					return err
				}
			}
			for _, a := range b.entries[id] {
				if err := appendActivity(tx, id, a); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		v.mu.Lock()
		for id, n := range b.counts {
			v.cur.counts[id] += n
		}
		for id, list := range b.entries {
			v.cur.entries[id] = append(list, v.cur.entries[id]...)
		}
		v.cur.n += b.n
		v.inflight = nil
		v.mu.Unlock()
	}
	return err
}

// recordPageEvent adds a page event and starts a flush when enough wait.
func (s *Store) recordPageEvent(id uint64, a Activity, count bool) {
	if s.views.add(id, a, count) < autoFlushAt || !s.views.auto.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.views.auto.Store(false)
		if err := s.Flush(); err != nil {
			s.log.Error("share: flushing page views", zap.Error(err))
		}
	}()
}
