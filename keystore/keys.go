package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/keystore/traffic"
)

// Keys is the key registry: every key in memory, indexed by the SHA-256 of
// its token for an O(1) check with no disk read, written through to a
// Backend on change. Usage counts live in memory and reach the backend only
// through FlushUsage, which adds them to what is stored. With a backend
// that other instances share (a Watcher), Follow keeps the memory in step
// with their changes.
type Keys struct {
	backend Backend
	sealer  *seal.Sealer
	now     func() time.Time

	mu sync.RWMutex
	// byHash is read by the key check without mu (hashIndex); it is
	// written under mu, with byID.
	byHash hashIndex
	byID   map[string]*Entry

	flushMu sync.Mutex // one flush or resync at a time; guards Entry.flushedT

	// writeMu serializes changes (update, delete, and those read back from
	// other instances), so that an update can never write a key back that
	// a delete has just removed. The key check never takes it, and no disk
	// write happens under mu. Creates do not take it, so that concurrent
	// creates share commits.
	writeMu sync.Mutex
	// importMu makes imports one at a time: each checks its tokens against
	// the index and then stores them, and two at once could both find a
	// token free.
	importMu sync.Mutex
	// resyncs counts the resyncs begun; an entry made after the n-th began
	// is not among what it read.
	resyncs atomic.Uint64
	// events takes the events of key changes (key.disabled) in their
	// transaction; nil: none are emitted.
	events events.Sink

	// instance names this process to the others sharing rate counts, and
	// instances is how many shared them lately (1 until the first sync):
	// between syncs each spends only its share of what a policy has left.
	instance  string
	instances atomic.Int64
	// lastRateSync is when SyncRates last ran (unix ns), for how long an
	// instance that stops syncing still counts; claimsUntil is when the
	// claims of the last successful sync stop holding (unix ns).
	lastRateSync, claimsUntil atomic.Int64
	// syncing is the holders a rate sync looks at (see activeMeters);
	// policiesFound is whether any holder had a policy when anyPolicies
	// last looked, trusted until policiesUntil (unix ns).
	syncing       activeMeters
	policiesFound atomic.Bool
	policiesUntil atomic.Int64

	// scopeMu guards plans and consumers, which compile reads. A change
	// of a plan or consumer takes writeMu as a key change does, and then
	// compiles its keys anew. Lock order: mu before scopeMu.
	scopeMu   sync.RWMutex
	plans     map[string]*Plan
	consumers map[string]*consumerEntry
}

// EmitTo makes sink receive the events of key changes from now on, in
// the transaction of each change.
func (k *Keys) EmitTo(sink events.Sink) {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	k.events = sink
}

// keyEvent is the data of a key event: who and what, never the token.
type keyEvent struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	Owner   string         `json:"owner"`
	Service access.Service `json:"service"`
	Time    time.Time      `json:"time"`
	// NotValidAfter is when the key stops working (key.expiring).
	NotValidAfter *time.Time `json:"notValidAfter,omitempty"`
	// Quota and PeriodStart are the quota that was spent and the start
	// of its period (key.quota_exhausted): an hour's and a day's look
	// alike otherwise.
	Quota       *traffic.Quota `json:"quota,omitempty"`
	PeriodStart *time.Time     `json:"periodStart,omitempty"`
}

// emitFor returns what Put runs in the transaction of key's change from
// old: the event it causes, if any.
func (k *Keys) emitFor(old, key *Key, now time.Time) func(storage.Tx) error {
	if !old.Enabled || key.Enabled {
		return nil
	}
	return k.emitKey(events.KeyDisabled, key, now)
}

// emitKey returns what Put runs to emit event typ of key in the
// transaction of its change (nil without a sink).
func (k *Keys) emitKey(typ string, key *Key, now time.Time) func(storage.Tx) error {
	if k.events == nil {
		return nil
	}
	ev := keyEvent{ID: key.ID, Name: key.Name, Owner: key.Owner, Service: key.Service, Time: now}
	switch typ {
	case events.KeyExpiring:
		ev.NotValidAfter = key.NotValidAfter
	case events.KeyQuotaExhausted:
		if q := key.Quota; q != nil {
			start := q.Period.Start(now)
			ev.Quota, ev.PeriodStart = q, &start
		}
	}
	data, err := json.Marshal(ev)
	return func(tx storage.Tx) error {
		if err != nil {
			return err
		}
		return k.events.Emit(tx, events.Event{Type: typ, Owner: key.Owner, At: now, Data: data})
	}
}

// Entry is one key in memory: an immutable snapshot swapped on update, and
// usage counters updated atomically by requests.
type Entry struct {
	snap atomic.Pointer[compiled]
	// stored is the count the backend held at the last load, flush or
	// resync (every instance's flushed uses); uses are this process's
	// since then.
	stored   atomic.Uint64
	uses     atomic.Uint64
	lastUse  atomic.Int64 // unix ns; 0: never
	flushedT int64        // lastUse already written; guarded by Keys.flushMu
	born     uint64       // Keys.resyncs when this entry was made

	// meter is the key's traffic on this instance: rate-limit windows,
	// its quota block, and its requests per hour.
	meter
	// lastLimitAudit is when a rate-limit or quota refusal of the key
	// was last audited (unix ns), and unaudited how many were not since:
	// a flood writes one entry a second.
	lastLimitAudit atomic.Int64
	unaudited      [2]atomic.Uint64 // rate_limited, quota_exceeded
}

// newEntry is rec in memory with its stored usage u.
func (k *Keys) newEntry(rec *Record, u Usage) *Entry {
	e := &Entry{}
	e.holder, e.keys = e, k
	e.setSnap(k.compile(rec))
	e.setStored(u)
	return e
}

// setSnap makes c the key's snapshot; rate-limit policies that stay keep
// their counts.
func (e *Entry) setSnap(c *compiled) {
	var old *traffic.Quota
	if o := e.snap.Swap(c); o != nil {
		old = o.quota
	}
	e.follow(c.key.ID, c.limits, old, c.quota)
}

// setStored takes the stored usage u: its count, and its last use when
// that is later than the one known here.
func (e *Entry) setStored(u Usage) {
	e.stored.Store(u.Count)
	if u.LastUsage.IsZero() {
		return
	}
	ns := u.LastUsage.UnixNano()
	e.laterUse(ns)
	if ns > e.flushedT {
		e.flushedT = ns
	}
}

// laterUse makes ns the last use unless a later one is known.
func (e *Entry) laterUse(ns int64) {
	for {
		old := e.lastUse.Load()
		if old >= ns || e.lastUse.CompareAndSwap(old, ns) {
			return
		}
	}
}

// Service is the entry's service.
func (e *Entry) Service() access.Service { return e.snap.Load().key.Service }

// ErrNotFound is the problem for an unknown key id.
var ErrNotFound = problem.NotFound("no key with this id")

// Open loads every key of backend into memory.
func Open(backend Backend, sealer *seal.Sealer, now func() time.Time) (*Keys, error) {
	if now == nil {
		now = time.Now
	}
	k := &Keys{backend: backend, sealer: sealer, now: now, instance: uuid.NewString(),
		byID: make(map[string]*Entry)}
	k.instances.Store(1)
	if err := k.loadScopes(); err != nil {
		return nil, err
	}
	err := backend.Load(context.Background(), func(row *KeyRow) error {
		rec, err := row.Record()
		if err != nil {
			return err
		}
		e := k.newEntry(rec, row.Usage)
		for _, h := range e.snap.Load().hashes() {
			k.byHash.put(h, e)
		}
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
//
// It takes no lock: a read lock's shared counter, written by every
// request on every core, cost the key check more than the probe.
func (k *Keys) Lookup(h token.Hash) *Entry { return k.byHash.get(h) }

// hashIndex maps token hashes to keys for lookups that take no lock
// (sync.Map: a load of a stable key is a plain read). A delete is seen by
// every lookup that begins after it returns.
type hashIndex struct{ m sync.Map }

func (x *hashIndex) get(h token.Hash) *Entry {
	if e, ok := x.m.Load(h); ok {
		return e.(*Entry)
	}
	return nil
}

func (x *hashIndex) put(h token.Hash, e *Entry) { x.m.Store(h, e) }
func (x *hashIndex) del(h token.Hash)           { x.m.Delete(h) }

// delIf removes h while it still leads to e.
func (x *hashIndex) delIf(h token.Hash, e *Entry) { x.m.CompareAndDelete(h, e) }

// Use counts one authorized use of e at now.
func (k *Keys) Use(e *Entry, now time.Time) {
	ns := now.UnixNano()
	e.uses.Add(1)
	e.laterUse(ns)
	e.hourly.add(0, ns)
	if c := e.snap.Load().consumer; c != nil {
		c.hourly.add(0, ns)
	}
}

// Refused counts a refused request of e at now, for usage over time; it
// does not add to usageCount.
func (k *Keys) Refused(e *Entry, reason string, now time.Time) {
	if i := outcomeIndex(reason); i > 0 {
		e.hourly.add(i, now.UnixNano())
		if c := e.snap.Load().consumer; c != nil {
			c.hourly.add(i, now.UnixNano())
		}
	}
}

// limitReasons are the refusals audited at most once a second a key, in
// the order of Entry.unaudited.
var limitReasons = [2]string{problem.CodeRateLimited, problem.CodeQuotaExceeded}

// AuditLimitRefusal reports whether a refusal of e at now for reason
// (rate_limited or quota_exceeded) is to be audited, and how many
// refusals of that reason the entry stands for: it and those not audited
// since. At most one is audited a second a key; UnauditedRefusals reports
// the rest.
func (e *Entry) AuditLimitRefusal(reason string, now time.Time) (uint64, bool) {
	i := 0
	if reason == limitReasons[1] {
		i = 1
	}
	ns := now.UnixNano()
	last := e.lastLimitAudit.Load()
	if ns-last < int64(time.Second) || !e.lastLimitAudit.CompareAndSwap(last, ns) {
		e.unaudited[i].Add(1)
		return 0, false
	}
	return e.unaudited[i].Swap(0) + 1, true
}

// UnauditedRefusals calls fn for each key with rate-limit or quota
// refusals not audited yet, once its last audited one is a second old
// (at once with force, at a stop), with the key, the reason and how many.
func (k *Keys) UnauditedRefusals(now time.Time, force bool, fn func(key *Key, reason string, n uint64)) {
	ns := now.UnixNano()
	for _, e := range k.entries() {
		if e.unaudited[0].Load() == 0 && e.unaudited[1].Load() == 0 {
			continue
		}
		last := e.lastLimitAudit.Load()
		if !force && (ns-last < int64(time.Second) || !e.lastLimitAudit.CompareAndSwap(last, ns)) {
			continue
		}
		key := &e.snap.Load().key
		for i, reason := range limitReasons {
			if n := e.unaudited[i].Swap(0); n > 0 {
				fn(key, reason, n)
			}
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
	if err := k.checkKeyScopes(&key); err != nil {
		return Key{}, err
	}
	now := k.now().UTC().Truncate(time.Millisecond)
	key.ID = uuid.NewString()
	key.CreationTime, key.LastModificationTime = now, now
	tok := token.New()
	key.TokenPrefix = tokenPrefixOf(tok)
	h := token.HashOf(tok)
	rec := &Record{Key: key, TokenHash: h[:], SealedToken: k.sealer.Seal([]byte(tok), []byte(key.ID))}
	if err := k.backend.Put(context.Background(), rec, time.Time{}, nil, holderClash(key.RateLimits, key.Quota, in.RateLimits.Set, in.Quota.Set)); err != nil {
		return Key{}, err
	}
	e := k.newEntry(rec, Usage{})
	// Read after the commit: a resync whose read began before it cannot
	// take the new key for one deleted elsewhere.
	e.born = k.resyncs.Load()
	k.mu.Lock()
	k.byHash.put(h, e)
	k.byID[key.ID] = e
	k.mu.Unlock()
	out := k.view(e)
	out.Token = tok
	return out, nil
}

// Update applies the editable fields of in to key id: to the stored
// version, read back when another instance changed it meanwhile.
func (k *Keys) Update(id string, in *KeyInput) (Key, error) {
	return rewrite(func() error { return k.Refresh(id) }, ErrNotFound, func() (Key, error) { return k.update(id, in) })
}

func (k *Keys) update(id string, in *KeyInput) (Key, error) {
	// Serialize updates and deletes, so two concurrent PATCHes cannot lose
	// each other's fields and a PATCH racing a DELETE cannot store the key
	// again; the backend's base check does so across instances. Key
	// checks go on meanwhile: they never wait for this write.
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
	if err := k.checkKeyScopes(&key); err != nil {
		return Key{}, err
	}
	key.LastModificationTime = nextModification(k.now(), old.key.LastModificationTime)
	rec := &Record{Key: key, TokenHash: old.hash[:], SealedToken: old.sealed, ExpiryWarnedFor: old.warnedFor}
	if old.hasPrev {
		rec.PreviousTokenHash = old.prevHash[:]
	}
	if err := k.backend.Put(context.Background(), rec, old.key.LastModificationTime, k.emitFor(&old.key, &key, key.LastModificationTime), holderClash(key.RateLimits, key.Quota, in.RateLimits.Set, in.Quota.Set)); err != nil {
		return Key{}, err
	}
	e.setSnap(k.compile(rec))
	return k.view(e), nil
}

// WarnExpiring sends key.expiring, once per key and end of validity,
// for the keys whose notValidAfter is within window of now and not yet
// past. Where instances share a database, the backend lets one of them
// send it. It returns how many it sent.
func (k *Keys) WarnExpiring(now time.Time, window time.Duration) (int, error) {
	type due struct {
		id  string
		nva time.Time
	}
	var list []due
	k.mu.RLock()
	for id, e := range k.byID {
		s := e.snap.Load()
		nva := s.key.NotValidAfter
		if nva == nil || !now.Before(*nva) || nva.Sub(now) > window || (s.warnedFor != nil && s.warnedFor.Equal(*nva)) {
			continue
		}
		list = append(list, due{id, *nva})
	}
	k.mu.RUnlock()
	sent := 0
	for _, d := range list {
		e := k.entry(d.id)
		if e == nil {
			continue
		}
		key := e.snap.Load().key
		ok, err := k.backend.MarkExpiryWarned(context.Background(), d.id, d.nva, k.emitKey(events.KeyExpiring, &key, now))
		if err != nil {
			return sent, err
		}
		if ok {
			sent++
		}
		// Sent here or elsewhere: read the mark back, so that it is not
		// tried again.
		if err := k.Refresh(d.id); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// MaxRollGrace bounds how long a rolled key's previous token may go on
// working.
const MaxRollGrace = 30 * 24 * time.Hour

// Roll gives key id a new token, returned in the key this once, as on
// create. The previous token goes on working for grace (none with 0);
// a token an earlier roll replaced stops at once. Id, privileges, counts
// and history stay.
func (k *Keys) Roll(id string, grace time.Duration) (Key, error) {
	if grace < 0 || grace > MaxRollGrace {
		return Key{}, problem.Invalid([]problem.FieldError{{Field: "graceSeconds", Code: "out_of_range",
			Message: "graceSeconds must be 0 to 2592000 (30 days)"}})
	}
	return rewrite(func() error { return k.Refresh(id) }, ErrNotFound, func() (Key, error) { return k.roll(id, grace) })
}

func (k *Keys) roll(id string, grace time.Duration) (Key, error) {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	e := k.entry(id)
	if e == nil {
		return Key{}, ErrNotFound
	}
	old := e.snap.Load()
	now := k.now().UTC().Truncate(time.Millisecond)
	key := old.key
	tok := token.New()
	h := token.HashOf(tok)
	key.TokenPrefix = tok[:12]
	key.LastModificationTime = nextModification(now, old.key.LastModificationTime)
	key.PreviousTokenExpiry = nil
	rec := &Record{Key: key, TokenHash: h[:], SealedToken: k.sealer.Seal([]byte(tok), []byte(key.ID)), ExpiryWarnedFor: old.warnedFor}
	// The previous token is kept, also without a grace period, so that a
	// client still sending it is told it expired rather than that it is
	// unknown.
	until := now.Add(grace)
	rec.PreviousTokenExpiry, rec.PreviousTokenHash = &until, old.hash[:]
	if err := k.backend.Put(context.Background(), rec, old.key.LastModificationTime, k.emitKey(events.KeyRolled, &rec.Key, now), nil); err != nil {
		return Key{}, err
	}
	next := k.compile(rec)
	k.mu.Lock()
	e.setSnap(next)
	k.rehash(e, old, next)
	k.mu.Unlock()
	out := k.view(e)
	out.Token = tok
	return out, nil
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
	if err := k.backend.Delete(context.Background(), id); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.byID, id)
	for _, h := range e.snap.Load().hashes() {
		k.byHash.del(h)
	}
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
func (k *Keys) List(service access.Service) []Key {
	k.mu.RLock()
	list := make([]Key, 0, len(k.byID))
	for _, e := range k.byID {
		if service == "" || e.Service() == service {
			list = append(list, k.view(e))
		}
	}
	k.mu.RUnlock()
	// Oldest first; the keys of one import, made at one instant, by name
	// (billing #1 before billing #2), then by id.
	sort.Slice(list, func(i, j int) bool {
		a, b := &list[i], &list[j]
		switch {
		case !a.CreationTime.Equal(b.CreationTime):
			return a.CreationTime.Before(b.CreationTime)
		case a.Name != b.Name:
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
	return list
}

// Count returns how many keys service has.
func (k *Keys) Count(service access.Service) int {
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
	if key.PreviousTokenExpiry != nil {
		t := *key.PreviousTokenExpiry
		key.PreviousTokenExpiry = &t
		if !k.now().Before(t) {
			key.PreviousTokenExpiry = nil // the previous token no longer answers
		}
	}
	key.RateLimits = slices.Clone(key.RateLimits)
	if key.RateLimits == nil {
		key.RateLimits = []traffic.RateLimit{}
	}
	if key.Quota != nil {
		q := *key.Quota
		key.Quota = &q
	}
	// The quota the key is held to: its own, or its plan's.
	key.QuotaUsed, key.QuotaResetsAt = e.quotaView(k.now())
	key.ConsumerID, key.PlanID = cloneID(key.ConsumerID), cloneID(key.PlanID)
	key.UsageCount = e.stored.Load() + e.uses.Load()
	if ns := e.lastUse.Load(); ns != 0 {
		t := time.Unix(0, ns).UTC().Truncate(time.Millisecond)
		key.LastUsageTime = &t
	}
	return key
}

// cloneID is a copy of an optional id.
func cloneID(id *string) *string {
	if id == nil {
		return nil
	}
	v := *id
	return &v
}

// FlushUsage adds the uses of every key used since the last flush to the
// stored counts, in one transaction, and takes the stored totals back
// (other instances' uses included). It returns how many keys it wrote.
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
		hours := e.hourly.take()
		if uses == 0 && last == e.flushedT && len(hours) == 0 {
			continue
		}
		dirty = append(dirty, pending{e, uses, last})
		u := Usage{KeyID: id, Count: uses, Hours: hours}
		if last != 0 {
			u.LastUsage = time.Unix(0, last)
		}
		batch = append(batch, u)
	}
	k.mu.RUnlock()
	// A consumer's hours, after its keys': only hours, under its id.
	var consumers []*consumerEntry
	k.scopeMu.RLock()
	for id, c := range k.consumers {
		if hours := c.hourly.take(); len(hours) > 0 {
			consumers = append(consumers, c)
			batch = append(batch, Usage{KeyID: id, Hours: hours})
		}
	}
	k.scopeMu.RUnlock()
	if len(batch) == 0 {
		return 0, nil
	}
	if err := k.backend.AddUsage(context.Background(), batch); err != nil {
		for i, d := range dirty {
			d.e.hourly.giveBack(batch[i].Hours)
		}
		for i, c := range consumers {
			c.hourly.giveBack(batch[len(dirty)+i].Hours)
		}
		return 0, err
	}
	batch = batch[:len(dirty)]
	for i, d := range dirty {
		// Uses counted while the flush ran stay for the next one.
		d.e.uses.Add(-d.uses)
		d.e.flushedT = d.last
		d.e.setStored(batch[i])
	}
	return len(batch), nil
}

// Follow keeps the keys in step with the changes that other instances
// make to a shared backend, until ctx ends: each change that Watch
// reports is read back at once, and everything is read again every
// resync interval in case a notification was lost. Without a Watcher
// (bbolt: one process) it returns at once.
func (k *Keys) Follow(ctx context.Context, resync time.Duration, onErr func(error)) {
	w, ok := k.backend.(Watcher)
	if !ok {
		return
	}
	report := func(err error) {
		if err != nil && ctx.Err() == nil {
			onErr(err)
		}
	}
	go func() {
		t := time.NewTicker(resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				report(k.Resync())
			}
		}
	}()
	w.Watch(ctx, func(id string) { report(k.Refresh(id)) }, func() { report(k.Resync()) })
}

// Sync reads key id (every key when id is empty) back from a backend that
// other instances share, so that an administrator sees their changes and
// flushed uses at once rather than after the next notification or
// resync. With a backend of this process alone it does nothing.
func (k *Keys) Sync(id string) error {
	if _, ok := k.backend.(Watcher); !ok {
		return nil
	}
	if id == "" {
		return k.Resync()
	}
	return k.Refresh(id)
}

// Refresh reads key id back from the backend after another instance
// changed it: a key gone there is gone here, at once.
func (k *Keys) Refresh(id string) error {
	if strings.HasPrefix(id, planTopic) || strings.HasPrefix(id, consumerTopic) {
		return k.refreshScope(id)
	}
	// flushMu before the read: a flush between the read and apply would
	// make the stored count read here stale.
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	k.flushMu.Lock()
	defer k.flushMu.Unlock()
	rec, u, err := k.backend.Key(context.Background(), id)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.apply(id, rec, u, true)
	return nil
}

// Resync reads every key back from the backend: what other instances
// created, changed or deleted, and their flushed usage.
func (k *Keys) Resync() error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	k.flushMu.Lock()
	defer k.flushMu.Unlock()
	gen := k.resyncs.Add(1)
	// Plans and consumers first, then every key compiled anew with them:
	// a lost notification of a plan change shows at the next resync.
	if err := k.loadScopes(); err != nil {
		return err
	}
	// A record whose revision memory holds already is not decoded again:
	// only its usage is taken (rec nil).
	type stored struct {
		rec *Record
		u   Usage
	}
	all := make(map[string]stored)
	if err := k.backend.Load(context.Background(), func(row *KeyRow) error {
		if e := k.entry(row.ID); e != nil && e.snap.Load().revision() == row.Revision {
			all[row.ID] = stored{nil, row.Usage}
			return nil
		}
		rec, err := row.Record()
		if err != nil {
			return err
		}
		all[row.ID] = stored{rec, row.Usage}
		return nil
	}); err != nil {
		return err
	}
	k.mu.Lock()
	for id, e := range k.byID {
		if _, ok := all[id]; !ok && e.born < gen {
			k.apply(id, nil, Usage{}, false)
		}
	}
	for id, s := range all {
		if s.rec == nil {
			if e := k.byID[id]; e != nil {
				e.setStored(s.u)
			}
			continue
		}
		k.apply(id, s.rec, s.u, true) // its revision differs: compiled anew
	}
	k.mu.Unlock()
	// Every key of a plan or consumer is compiled anew, changed or not:
	// what they hold may have changed without the key's revision.
	k.recompile(scoped)
	return nil
}

// apply makes key id in memory what the backend holds: rec with usage u,
// or nothing when rec is nil. Without force, a key whose modification
// time is unchanged keeps its snapshot (a resync of many keys allocates
// only for what changed; notifications, which force, catch two changes
// within a millisecond). The caller holds writeMu, flushMu and mu.
func (k *Keys) apply(id string, rec *Record, u Usage, force bool) {
	e := k.byID[id]
	if rec == nil {
		if e != nil {
			delete(k.byID, id)
			for _, h := range e.snap.Load().hashes() {
				k.byHash.del(h)
			}
		}
		return
	}
	if e == nil {
		e = k.newEntry(rec, u)
		e.born = k.resyncs.Load()
		k.byID[id] = e
		for _, h := range e.snap.Load().hashes() {
			k.byHash.put(h, e)
		}
		return
	}
	if old := e.snap.Load(); force || !old.key.LastModificationTime.Equal(rec.LastModificationTime) {
		next := k.compile(rec)
		e.setSnap(next)
		k.rehash(e, old, next)
	}
	e.setStored(u)
}

// rehash points the hashes of next at e in place of old's. The caller
// holds mu.
func (k *Keys) rehash(e *Entry, old, next *compiled) {
	for _, h := range old.hashes() {
		k.byHash.delIf(h, e)
	}
	for _, h := range next.hashes() {
		k.byHash.put(h, e)
	}
}
