package contracts

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/google/uuid"
)

// decoded keeps recently read contracts decoded, because decoding the
// JSON record is most of the cost of a get. An entry is used only while
// the stored bytes are exactly those it was decoded from, so a write by
// any path, in any store sharing the process, makes it unused at once:
// there is nothing to invalidate. Readers get a copy they may change.
var decoded = &recordCache{m: make(map[uuid.UUID]cachedRecord)}

// maxCachedRecords bounds the cache: about 10 MB at 1 KB a record.
const maxCachedRecords = 10000

type recordCache struct {
	mu sync.RWMutex
	m  map[uuid.UUID]cachedRecord
}

type cachedRecord struct {
	raw []byte
	c   *Contract
}

// decode returns the contract stored as raw under id.
func (rc *recordCache) decode(id uuid.UUID, raw []byte) (*Contract, error) {
	rc.mu.RLock()
	e, ok := rc.m[id]
	rc.mu.RUnlock()
	if ok && bytes.Equal(e.raw, raw) {
		return e.c.clone(), nil
	}
	c := new(Contract)
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, err
	}
	rc.mu.Lock()
	if len(rc.m) >= maxCachedRecords {
		for k := range rc.m { // an arbitrary victim: map order is random
			delete(rc.m, k)
			break
		}
	}
	rc.m[id] = cachedRecord{raw: bytes.Clone(raw), c: c.clone()}
	rc.mu.Unlock()
	return c, nil
}

// clone copies c deeply enough that changing the copy's fields or
// slices leaves c as it was.
func (c *Contract) clone() *Contract {
	d := *c
	d.DocumentDigest = bytes.Clone(c.DocumentDigest)
	d.Signers = make([]Signer, len(c.Signers))
	for i, s := range c.Signers {
		s.SigningMethods = append([]string(nil), s.SigningMethods...)
		s.SealedToken = bytes.Clone(s.SealedToken)
		d.Signers[i] = s
	}
	d.Watchers = append([]Watcher(nil), c.Watchers...)
	if c.FinalizedPDF != nil {
		a := *c.FinalizedPDF
		d.FinalizedPDF = &a
	}
	if c.CertificatePDF != nil {
		a := *c.CertificatePDF
		d.CertificatePDF = &a
	}
	return &d
}
