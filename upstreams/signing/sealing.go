package signing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/upstreams/contracts"
)

// A completion's documents are made and sealed after its transaction has
// committed, so that the last signer is answered at once and no lock
// waits on rendering or on a timestamp authority. The completion queues
// its contract (Backend.QueueSeal) in its own transaction; the instance
// that took the decision seals at once (sealSoon); any instance seals
// what waited longer than DefaultSealRetryAfter (SealQueued: after a crash, or a
// seal that failed). Whoever stores its documents first takes the
// contract off the queue; a second attempt finds it gone and drops its
// own. Meanwhile the contract shows its documents as being sealed.

// DefaultSealWait is how long a signer's download waits for documents
// being sealed before it is told to come back.
const DefaultSealWait = 5 * time.Second

// DefaultSealRetryAfter is how long a queued completion is left to the
// instance that took the decision before any other seals it.
const DefaultSealRetryAfter = 30 * time.Second

// minSealBackoff is the first wait after a failed attempt.
const minSealBackoff = 30 * time.Second

// maxSealBackoff caps the wait between this instance's attempts at a
// completion whose sealing keeps failing (an expired seal certificate).
const maxSealBackoff = 15 * time.Minute

// errSignatureMissing: a signer's signature is not stored.
var errSignatureMissing = errors.New("signing: a signature is missing")

// errSealedElsewhere ends a sealing whose completion another attempt
// stored first (or whose contract is gone).
var errSealedElsewhere = errors.New("signing: the documents were stored by another attempt")

// sealings is this instance's sealing in flight and its failures.
type sealings struct {
	mu sync.Mutex
	// running: contract id → closed when this instance's attempt ends.
	running map[string]chan struct{}
	// retry: contract id → when this instance tries again after a
	// failure, and the backoff that led there.
	retry map[string]sealRetry
	// sweeping is set while SealQueued works through the queue.
	sweeping bool
	// wg counts the goroutines that seal.
	wg sync.WaitGroup
	// ctx ends this instance's sealing (StopSealing): what is not
	// stored by then stays queued for whoever comes next.
	ctx  context.Context
	stop context.CancelFunc
	// slots bounds the seals that render at once: each draws two PDFs,
	// and a burst of completions must not take every CPU and the memory
	// of as many renderings.
	slots chan struct{}
}

// maxSealing is how many completions this instance seals at once.
const maxSealing = 4

type sealRetry struct {
	at      time.Time
	backoff time.Duration
}

// start marks id as being sealed here; false when it already is.
func (sl *sealings) start(id string) (chan struct{}, bool) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if _, ok := sl.running[id]; ok {
		return nil, false
	}
	done := make(chan struct{})
	sl.running[id] = done
	return done, true
}

// end records the outcome of the attempt at id and wakes its waiters.
func (sl *sealings) end(id string, done chan struct{}, failed bool, now time.Time) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	delete(sl.running, id)
	close(done)
	if !failed {
		delete(sl.retry, id)
		return
	}
	r := sl.retry[id]
	r.backoff = min(max(2*r.backoff, minSealBackoff), maxSealBackoff)
	r.at = now.Add(r.backoff)
	sl.retry[id] = r
}

// waiting is the channel of this instance's attempt at id, nil if none.
func (sl *sealings) waiting(id string) chan struct{} {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.running[id]
}

// forgetBut drops the failures of completions no longer queued (stored
// by another instance, or deleted).
func (sl *sealings) forgetBut(queued []QueuedSeal) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	keep := make(map[string]bool, len(queued))
	for _, q := range queued {
		keep[q.ContractID] = true
	}
	for id := range sl.retry {
		if !keep[id] {
			delete(sl.retry, id)
		}
	}
}

// due reports whether this instance may try id now.
func (sl *sealings) due(id string, now time.Time) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	r, ok := sl.retry[id]
	return !ok || !now.Before(r.at)
}

// sealSoon seals contract id's documents in the background, now.
func (s *Service) sealSoon(id string) {
	done, ok := s.sealing.start(id)
	if !ok {
		return
	}
	s.sealing.wg.Add(1)
	go func() {
		defer s.sealing.wg.Done()
		s.sealAttempt(id, done)
	}()
}

// StopSealing ends this instance's sealing: no new attempt starts, and
// the ones running stop at their next step (a seal under way finishes:
// it waits at most on its timestamp authority). What is not stored
// stays queued. The gateway calls it when a config stops.
func (s *Service) StopSealing() { s.sealing.stop() }

// WaitSealing waits until this instance's sealing in flight has ended:
// at shutdown, before the database closes. What it abandons stays
// queued.
func (s *Service) WaitSealing() { s.sealing.wg.Wait() }

// sealAttempt runs one attempt at id's documents, one of at most
// maxSealing at once, and records how it went. A panic (rendering a
// client's text, reading a PDF) is a failed attempt, tried again later,
// not the end of the process.
func (s *Service) sealAttempt(id string, done chan struct{}) {
	var err error
	select {
	case s.sealing.slots <- struct{}{}:
		func() {
			defer func() { <-s.sealing.slots }()
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			err = s.sealDocuments(s.sealing.ctx, id)
		}()
	case <-s.sealing.ctx.Done():
		err = s.sealing.ctx.Err()
	}
	switch {
	case s.sealing.ctx.Err() != nil:
		// Stopped: whoever comes next seals it.
	case err != nil:
		s.log.Error("sealing a completed contract's documents: it stays queued and is tried again", zap.String("contract", id), zap.Error(err))
	}
	s.sealing.end(id, done, err != nil, time.Now())
}

// SealQueued seals, in the background, the documents of the completions
// that have waited longer than DefaultSealRetryAfter and that this instance is
// neither sealing nor backing off from. It returns at once; a call while
// the previous one still works does nothing. The gateway calls it on
// each tick of its background work.
func (s *Service) SealQueued(batch int) {
	s.sealing.mu.Lock()
	if s.sealing.sweeping {
		s.sealing.mu.Unlock()
		return
	}
	s.sealing.sweeping = true
	s.sealing.mu.Unlock()
	s.sealing.wg.Add(1)
	go func() {
		defer s.sealing.wg.Done()
		defer func() {
			s.sealing.mu.Lock()
			s.sealing.sweeping = false
			s.sealing.mu.Unlock()
		}()
		now := time.Now()
		var queued []QueuedSeal
		err := s.db.View(s.sealing.ctx, func(tx storage.Tx) (err error) {
			queued, err = s.backend.SealQueue(tx, now.Add(-s.sealRetryAfter), batch)
			return err
		})
		if err != nil {
			s.log.Error("reading the completions waiting to be sealed", zap.Error(err))
			return
		}
		s.sealing.forgetBut(queued)
		for _, q := range queued {
			if s.sealing.ctx.Err() != nil {
				return
			}
			if !s.sealing.due(q.ContractID, now) {
				continue
			}
			if done, ok := s.sealing.start(q.ContractID); ok {
				s.sealAttempt(q.ContractID, done)
			}
		}
	}()
}

// sealDocuments makes contract id's documents from what its completion
// stored (the contract, its text, trail and signatures), seals them
// outside any transaction, and stores them in one transaction if the
// completion still waits.
func (s *Service) sealDocuments(ctx context.Context, id string) error {
	c, err := s.store.Get(ctx, id)
	if problem.IsNotFound(err) {
		return s.dropQueued(ctx, id)
	}
	if err != nil {
		return err
	}
	if c.FinalizedPDF != nil {
		return s.dropQueued(ctx, id)
	}
	doc, err := s.store.Document(ctx, c)
	if err != nil {
		return err
	}
	var trail []TrailEvent
	signatures := make([]signature, len(c.Signers))
	err = s.db.View(ctx, func(tx storage.Tx) error {
		var err error
		if trail, err = s.backend.Trail(tx, c.ID); err != nil {
			return err
		}
		for j := range c.Signers {
			m, d, ok, err := s.backend.Signature(tx, c.Signers[j].ID)
			if err != nil {
				return err
			}
			if !ok {
				return errSignatureMissing
			}
			signatures[j] = signature{method: m, data: d}
		}
		return nil
	})
	if errors.Is(err, errSignatureMissing) {
		// Another instance stored the documents (and dropped the
		// signatures) since c was read; else the record is damaged.
		if now, err := s.store.Get(ctx, id); err == nil && now.FinalizedPDF != nil || problem.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("signing: a signature of contract %s is missing", id)
	}
	if err != nil {
		return err
	}
	finalized, certificate, err := s.render(c, doc, trail, signatures)
	if err != nil {
		return err
	}
	_, err = s.store.Update(ctx, id, func(tx storage.Tx, c *contracts.Contract) error {
		waiting, err := s.backend.Sealing(tx, id)
		if err != nil {
			return err
		}
		if !waiting || c.FinalizedPDF != nil {
			return errSealedElsewhere
		}
		return s.storeDocuments(tx, c, finalized, certificate)
	})
	if errors.Is(err, errSealedElsewhere) || problem.IsNotFound(err) {
		return nil
	}
	return err
}

// dropQueued takes id off the queue: its documents are stored, or it is
// gone.
func (s *Service) dropQueued(ctx context.Context, id string) error {
	return s.db.Update(ctx, func(tx storage.Tx) error { return s.backend.Sealed(tx, id) })
}

// beingSealed reports whether c is complete but its sealed documents are
// not stored yet.
func beingSealed(c *contracts.Contract) bool {
	return c.DocumentStatus() == contracts.DocumentsBeingSealed
}

// awaitDocuments waits, at most s.sealWait, for the documents of c,
// being sealed, and returns c as it is then.
func (s *Service) awaitDocuments(ctx context.Context, c *contracts.Contract) (*contracts.Contract, error) {
	deadline := time.NewTimer(s.sealWait)
	defer deadline.Stop()
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	for beingSealed(c) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return c, nil
		case <-s.sealing.waiting(c.ID):
		case <-poll.C:
		}
		var err error
		if c, err = s.store.Get(ctx, c.ID); err != nil {
			return nil, err
		}
	}
	return c, nil
}
