package keystore

import (
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/problem"
)

// Keys is the key registry: every key in memory, indexed by the SHA-256 of
// its token for an O(1) check with no disk read, written through to a
// Backend on change. Usage counts live in memory and reach the backend only
// through FlushUsage.
type Keys struct {
	backend Backend
	sealer  *Sealer
	now     func() time.Time

	mu     sync.RWMutex
	byHash map[TokenHash]*Entry
	byID   map[string]*Entry

	flushMu sync.Mutex // one flush at a time; guards Entry.flushed

	// writeMu serializes Update and Delete, so that an update can never
	// write a key back that a delete has just removed. The key check never
	// takes it, and no disk write happens under mu.
	writeMu sync.Mutex
}

// Entry is one key in memory: an immutable snapshot swapped on update, and
// usage counters updated atomically by requests.
type Entry struct {
	snap     atomic.Pointer[compiled]
	uses     atomic.Uint64
	lastUse  atomic.Int64 // unix ns; 0: never
	flushed  uint64       // uses already written; guarded by Keys.flushMu
	flushedT int64        // lastUse already written
}

// Service is the entry's service.
func (e *Entry) Service() Service { return e.snap.Load().key.Service }

// ErrNotFound is the problem for an unknown key id.
var ErrNotFound = problem.NotFound("no key with this id")

// Open loads every key of backend into memory.
func Open(backend Backend, sealer *Sealer, now func() time.Time) (*Keys, error) {
	if now == nil {
		now = time.Now
	}
	k := &Keys{backend: backend, sealer: sealer, now: now,
		byHash: make(map[TokenHash]*Entry), byID: make(map[string]*Entry)}
	err := backend.Load(func(rec *record, u Usage) error {
		e := &Entry{flushed: u.Count}
		e.snap.Store(compile(rec))
		e.uses.Store(u.Count)
		if !u.LastUsage.IsZero() {
			e.lastUse.Store(u.LastUsage.UnixNano())
			e.flushedT = u.LastUsage.UnixNano()
		}
		k.byHash[e.snap.Load().hash] = e
		k.byID[rec.ID] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Lookup finds the key whose token hashes to h. Tokens are looked up by
// their SHA-256, never compared as such: a map probe on the hash tells an
// attacker nothing useful about the token by its timing, which is what a
// constant-time comparison of the token itself would guard against.
func (k *Keys) Lookup(h TokenHash) *Entry {
	k.mu.RLock()
	e := k.byHash[h]
	k.mu.RUnlock()
	return e
}

// Use counts one authorized use of e at now.
func (k *Keys) Use(e *Entry, now time.Time) {
	e.uses.Add(1)
	ns := now.UnixNano()
	for {
		old := e.lastUse.Load()
		if old >= ns || e.lastUse.CompareAndSwap(old, ns) {
			return
		}
	}
}

// Create validates in, stores a new key and returns it with its token,
// which is shown this once (and again only through Reveal).
func (k *Keys) Create(in *KeyInput) (Key, error) {
	key, err := applyCreate(in)
	if err != nil {
		return Key{}, err
	}
	now := k.now().UTC().Truncate(time.Millisecond)
	key.ID = uuid.NewString()
	key.CreationTime, key.LastModificationTime = now, now
	token := NewToken()
	key.TokenPrefix = token[:12]
	h := HashToken(token)
	rec := &record{Key: key, TokenHash: h[:], SealedToken: k.sealer.Seal([]byte(token), []byte(key.ID))}
	if err := k.backend.Put(rec); err != nil {
		return Key{}, err
	}
	e := &Entry{}
	e.snap.Store(compile(rec))
	k.mu.Lock()
	k.byHash[h] = e
	k.byID[key.ID] = e
	k.mu.Unlock()
	out := k.view(e)
	out.Token = token
	return out, nil
}

// Update applies the editable fields of in to key id.
func (k *Keys) Update(id string, in *KeyInput) (Key, error) {
	// Serialize updates and deletes, so two concurrent PATCHes cannot lose
	// each other's fields and a PATCH racing a DELETE cannot store the key
	// again. Key checks go on meanwhile: they never wait for this write.
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	e := k.entry(id)
	if e == nil {
		return Key{}, ErrNotFound
	}
	old := e.snap.Load()
	key, err := applyUpdate(old.key, in)
	if err != nil {
		return Key{}, err
	}
	key.LastModificationTime = k.now().UTC().Truncate(time.Millisecond)
	rec := &record{Key: key, TokenHash: old.hash[:], SealedToken: old.sealed}
	if err := k.backend.Put(rec); err != nil {
		return Key{}, err
	}
	e.snap.Store(compile(rec))
	return k.view(e), nil
}

// Delete removes key id; once it returns, a request with its token is
// refused. Storage goes first: if it fails, the key stays as it was in
// memory too, so the reply matches what a restart would load and the
// administrator can retry.
func (k *Keys) Delete(id string) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	e := k.entry(id)
	if e == nil {
		return ErrNotFound
	}
	if err := k.backend.Delete(id); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.byID, id)
	delete(k.byHash, e.snap.Load().hash)
	k.mu.Unlock()
	return nil
}

// Reveal returns key id's token, decrypted from its sealed copy.
func (k *Keys) Reveal(id string) (string, error) {
	e := k.entry(id)
	if e == nil {
		return "", ErrNotFound
	}
	s := e.snap.Load()
	token, err := k.sealer.Open(s.sealed, []byte(s.key.ID))
	if err != nil {
		return "", errors.New("sealed token cannot be opened with this master key")
	}
	return string(token), nil
}

// Get returns key id as administrators see it.
func (k *Keys) Get(id string) (Key, error) {
	e := k.entry(id)
	if e == nil {
		return Key{}, ErrNotFound
	}
	return k.view(e), nil
}

// List returns the keys of service (all when empty), oldest first.
func (k *Keys) List(service Service) []Key {
	k.mu.RLock()
	list := make([]Key, 0, len(k.byID))
	for _, e := range k.byID {
		if service == "" || e.Service() == service {
			list = append(list, k.view(e))
		}
	}
	k.mu.RUnlock()
	sort.Slice(list, func(i, j int) bool {
		if !list[i].CreationTime.Equal(list[j].CreationTime) {
			return list[i].CreationTime.Before(list[j].CreationTime)
		}
		return list[i].ID < list[j].ID
	})
	return list
}

// Count returns how many keys service has.
func (k *Keys) Count(service Service) int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	n := 0
	for _, e := range k.byID {
		if e.Service() == service {
			n++
		}
	}
	return n
}

func (k *Keys) entry(id string) *Entry {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.byID[id]
}

// view returns a copy of e's key that shares nothing with the snapshot the
// key check reads, so a caller may change it freely.
func (k *Keys) view(e *Entry) Key {
	key := e.snap.Load().key
	key.Privileges = slices.Clone(key.Privileges)
	key.AllowedIPs = slices.Clone(key.AllowedIPs)
	key.AdminProjects = slices.Clone(key.AdminProjects)
	if key.NotValidBefore != nil {
		t := *key.NotValidBefore
		key.NotValidBefore = &t
	}
	if key.NotValidAfter != nil {
		t := *key.NotValidAfter
		key.NotValidAfter = &t
	}
	key.UsageCount = e.uses.Load()
	if ns := e.lastUse.Load(); ns != 0 {
		t := time.Unix(0, ns).UTC().Truncate(time.Millisecond)
		key.LastUsageTime = &t
	}
	return key
}

// FlushUsage writes the usage of every key used since the last flush in
// one transaction. It returns how many keys it wrote.
func (k *Keys) FlushUsage() (int, error) {
	k.flushMu.Lock()
	defer k.flushMu.Unlock()
	type pending struct {
		e    *Entry
		uses uint64
		last int64
	}
	var dirty []pending
	var batch []Usage
	k.mu.RLock()
	for id, e := range k.byID {
		uses, last := e.uses.Load(), e.lastUse.Load()
		if uses == e.flushed && last == e.flushedT {
			continue
		}
		dirty = append(dirty, pending{e, uses, last})
		u := Usage{KeyID: id, Count: uses}
		if last != 0 {
			u.LastUsage = time.Unix(0, last)
		}
		batch = append(batch, u)
	}
	k.mu.RUnlock()
	if len(batch) == 0 {
		return 0, nil
	}
	if err := k.backend.PutUsage(batch); err != nil {
		return 0, err
	}
	for _, d := range dirty {
		d.e.flushed, d.e.flushedT = d.uses, d.last
	}
	return len(batch), nil
}
