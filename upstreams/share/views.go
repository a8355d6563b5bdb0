package share

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/storage"
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
	// mark is Backend.Mark of the transaction writing this batch (0: not
	// begun); a read transaction that Backend.Sees it has the batch in
	// what it reads.
	mark int64
}

func newViewBatch() *viewBatch {
	return &viewBatch{counts: map[uint64]int64{}, entries: map[uint64][]Activity{}}
}

// views counts page openings in memory, as the gateway does key usage
// (docs/clients.md, Storage): a page view costs no disk write. Reads add the
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

// pendingView is the unflushed page events as one read transaction must
// add them: the current batch, and the batch being (or last) written by
// Flush unless the transaction already sees its commit.
type pendingView struct {
	s  *Store
	tx storage.Tx
	// seen caches Backend.Sees for the in-flight batch checked last.
	checked *viewBatch
	include bool
}

// pending starts the pending view of read transaction tx.
func (s *Store) pending(tx storage.Tx) *pendingView { return &pendingView{s: s, tx: tx} }

// batches returns the batches tx must add, with v.mu held on return.
func (p *pendingView) lock() (cur, inflight *viewBatch, err error) {
	v := p.s.views
	v.mu.Lock()
	b := v.inflight
	if b == nil {
		return v.cur, nil, nil
	}
	if b != p.checked {
		mark := b.mark
		inc := true
		if mark != 0 {
			// A flush's batch with a mark: ask the backend, without the
			// lock (PostgreSQL answers over the network).
			v.mu.Unlock()
			seen, err := p.s.be.Sees(p.tx, mark)
			if err != nil {
				return nil, nil, err
			}
			inc = !seen
			v.mu.Lock()
			if v.inflight != b {
				// Another flush began meanwhile; its batch was
				// written after tx began, so tx adds it.
				p.checked, p.include = v.inflight, true
				return v.cur, v.inflight, nil
			}
		}
		p.checked, p.include = b, inc
	}
	if p.include {
		return v.cur, b, nil
	}
	return v.cur, nil, nil
}

// count is the unflushed openings of share id.
func (p *pendingView) count(id uint64) (int64, error) {
	cur, in, err := p.lock()
	if err != nil {
		return 0, err
	}
	defer p.s.views.mu.Unlock()
	n := cur.counts[id]
	if in != nil {
		n += in.counts[id]
	}
	return n, nil
}

// counts copies every unflushed count, for a list sorted by opened_count.
func (p *pendingView) counts() (map[uint64]int64, error) {
	cur, in, err := p.lock()
	if err != nil {
		return nil, err
	}
	defer p.s.views.mu.Unlock()
	out := make(map[uint64]int64, len(cur.counts))
	for id, n := range cur.counts {
		out[id] += n
	}
	if in != nil {
		for id, n := range in.counts {
			out[id] += n
		}
	}
	return out, nil
}

// activity is the unflushed entries of share id, newest first.
func (p *pendingView) activity(id uint64) ([]Activity, error) {
	cur, in, err := p.lock()
	if err != nil {
		return nil, err
	}
	defer p.s.views.mu.Unlock()
	var all []Activity
	if in != nil {
		all = append(all, in.entries[id]...)
	}
	all = append(all, cur.entries[id]...)
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all, nil
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
// the database in one transaction. The gateway calls it every
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

	err := s.db.Update(context.Background(), func(tx storage.Tx) error {
		mark, err := s.be.Mark(tx)
		if err != nil {
			return err
		}
		v.mu.Lock()
		b.mark = mark
		v.mu.Unlock()
		ids := make([]uint64, 0, len(b.entries))
		for id := range b.counts {
			ids = append(ids, id)
		}
		for id := range b.entries {
			if _, ok := b.counts[id]; !ok {
				ids = append(ids, id)
			}
		}
		// In id order, so that two instances flushing at once lock the
		// rows of PostgreSQL in the same order.
		slices.Sort(ids)
		for _, id := range ids {
			if err := s.be.AddOpenings(tx, id, b.counts[id], b.entries[id]); err != nil {
				return err
			}
			if err := s.emitViews(tx, id, b.counts[id], b.entries[id]); err != nil {
				return err
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

// emitViews emits share.viewed for each view among entries, just written
// to share id with n openings by AddOpenings in tx: the view is an event
// once it is written down, so a view lost in a crash before its flush is
// neither counted nor told. Each event shows the share as it stood after
// that view, its openedCount counting up to the stored one.
func (s *Store) emitViews(tx storage.Tx, id uint64, n int64, entries []Activity) error {
	if !slices.ContainsFunc(entries, func(a Activity) bool { return a.Action == ActionViewed }) {
		return nil
	}
	r, err := s.be.ShareByID(tx, id)
	if err != nil || r == nil {
		return err // nil: deleted meanwhile, and its views with it
	}
	opened := r.OpenedCount - n
	for _, a := range entries {
		if a.Action != ActionViewed {
			continue
		}
		opened++
		sh := r.toShare(s.baseURL, a.Timestamp, 0)
		sh.OpenedCount = opened
		if err := s.emit(tx, events.ShareViewed, sh, a.Timestamp); err != nil {
			return err
		}
	}
	return nil
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
