package keystore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/keystore/traffic"
)

// Buckets of the key store, named once.
var (
	bucketKeys     = []byte("keys")      // key id (16 bytes) -> record JSON
	bucketKeyUsage = []byte("key_usage") // key id (16 bytes) -> count (8) | last usage unix ns (8), big-endian
	// key id (16) | period start unix s (8) -> used (8) | exhausted (1)
	bucketKeyQuota = []byte("key_quota")
	// key id (16) | unix hour (8) | outcome -> count (8)
	bucketKeyHours = []byte("key_usage_hourly")
)

// Backend is where keys persist. Keys keeps every key in memory and only
// writes through a Backend, so that the key check never waits on storage.
// Unlike the stores whose methods run in the caller's storage.Tx, each
// method is a transaction of its own (or one statement), since Keys
// holds the state and decides before it writes. Every method takes a
// context first; Keys passes context.Background(), and the PostgreSQL
// backend bounds a lone statement by pgdb.DefaultTimeout within it.
type Backend interface {
	// Load calls fn for every stored key with its revision and stored
	// usage; fn decodes the record when it needs it (KeyRow.Record).
	Load(ctx context.Context, fn func(row *KeyRow) error) error
	// Key reads key id with its stored usage; nil when there is none.
	Key(ctx context.Context, id string) (*Record, Usage, error)
	// Put stores rec over the version of it last modified at base (zero:
	// a new key): errStale when the stored key is another version,
	// errGone when it was deleted (see revision.go). emit, when set, runs
	// in the same transaction (the events of the change, into the webhook
	// outbox). clash, when set and rec names a plan, is called with that
	// plan as the transaction reads it (nil: gone), locked against a
	// change of the plan until the write commits; its error refuses the
	// write. So the clash rule holds where instances share a database,
	// whichever writes first.
	Put(ctx context.Context, rec *Record, base time.Time, emit func(storage.Tx) error, clash PlanCheck) error
	// PutMany stores an import's new plans, consumers and keys, all in
	// one transaction or none; where instances share the database, they
	// read them again once, not once per key. It refuses a plan name or
	// an externalId taken meanwhile as PutPlan and PutConsumer do.
	PutMany(ctx context.Context, batch *Batch) error
	// MarkExpiryWarned records, in one transaction with emit, that
	// key.expiring was sent for key id ending at notValidAfter, unless
	// it was already (or the key ends otherwise now): false then, and
	// nothing runs. Of instances racing, one gets true.
	MarkExpiryWarned(ctx context.Context, id string, notValidAfter time.Time, emit func(storage.Tx) error) (bool, error)
	Delete(ctx context.Context, id string) error
	// AddUsage adds each entry's Count to its key's stored count and keeps
	// the later of the two last uses, and adds its Hours to the key's
	// hourly counts, in one transaction: instances that share a database
	// each add their own. It then sets each entry's Count and LastUsage
	// to its key's stored totals; a key deleted meanwhile gets no row
	// back and its entry becomes zero.
	AddUsage(ctx context.Context, batch []Usage) error
	// UsageHours reads key id's hourly counts of the hours in [from, to).
	UsageHours(ctx context.Context, id string, from, to time.Time) ([]HourCount, error)
	// PurgeUsage removes the hourly counts of hours before before, and
	// the quota periods that began before it.
	PurgeUsage(ctx context.Context, before time.Time) error
	// The quota periods of keys and consumers.
	traffic.Store

	// Plans and consumers. A key's or consumer's quota, rate-limit
	// counts and hours are stored under its own id, by the methods above.
	// Put and PutMany refuse a key that names a plan or consumer that is
	// gone (a 400 naming planId or consumerId), in their transaction.

	// LoadScopes calls plan for every stored plan, then consumer for
	// every consumer.
	LoadScopes(ctx context.Context, plan func(*Plan) error, consumer func(*Consumer) error) error
	// Plan and Consumer read one back; nil when there is none.
	Plan(ctx context.Context, id string) (*Plan, error)
	Consumer(ctx context.Context, id string) (*Consumer, error)
	// PutPlan stores p over its version of base, as Put does;
	// ErrPlanNameTaken when another plan has its name. holders, when set,
	// is called with the keys and consumers that take p as the
	// transaction reads them, p locked against their writes until this
	// one commits; its error refuses the write.
	PutPlan(ctx context.Context, p *Plan, base time.Time, holders HoldersCheck) error
	// PutConsumer stores c over its version of base, as Put does;
	// ErrExternalIDTaken when another consumer has its externalId, a 400
	// naming planId when its plan is gone. clash is as Put's.
	PutConsumer(ctx context.Context, c *Consumer, base time.Time, clash PlanCheck) error
	// DeletePlan removes plan id; ErrPlanInUse while a key or consumer
	// takes it.
	DeletePlan(ctx context.Context, id string) error
	// DeleteConsumer removes consumer id with its traffic;
	// ErrConsumerHasKeys while keys belong to it.
	DeleteConsumer(ctx context.Context, id string) error
}

// Batch is what one PutMany stores: new plans, new consumers (which may
// take those plans) and new keys (which may belong to those consumers).
type Batch struct {
	Plans     []*Plan
	Consumers []*Consumer
	Keys      []*Record
	// Clash holds, by a consumer's or key's id, the check of its plan,
	// called as Put calls its clash; an error refuses the whole batch.
	Clash map[string]PlanCheck
}

// Watcher is a Backend that other gateway instances write to as well:
// Watch calls changed with the id of each key that any instance creates,
// changes or deletes, soon after the commit, and resync whenever it may
// have missed one (when it starts listening, and again after a lost
// connection). It returns when ctx ends.
type Watcher interface {
	Watch(ctx context.Context, changed func(id string), resync func())
}

// BoltBackend keeps keys in a bbolt database shared with the APIs.
type BoltBackend struct{ db *bbolt.DB }

// NewBoltBackend creates the key buckets in db.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	if err := db.CreateBuckets(bucketKeys, bucketKeyUsage, bucketKeyQuota, bucketKeyHours,
		bucketPlans, bucketPlanNames, bucketConsumers, bucketConsumerExternal, bucketScopeHolders); err != nil {
		return nil, err
	}
	return &BoltBackend{db: db.Bolt}, nil
}

func idBytes(id string) ([]byte, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, err
	}
	return u[:], nil
}

// encodeRecord is rec as stored: its id's 16 bytes and its JSON.
func encodeRecord(rec *Record) (id, value []byte, err error) {
	if id, err = idBytes(rec.ID); err != nil {
		return nil, nil, err
	}
	value, err = encodeRecordValue(rec)
	return id, value, err
}

// Load implements Backend.
func (b *BoltBackend) Load(_ context.Context, fn func(row *KeyRow) error) error {
	return b.db.View(func(tx *bbolt.Tx) error {
		usage := tx.Bucket(bucketKeyUsage)
		return tx.Bucket(bucketKeys).ForEach(func(k, v []byte) error {
			row, err := rowOf(v, boltUsage("", usage.Get(k)))
			if err != nil {
				return fmt.Errorf("key %x: %w", k, err)
			}
			return fn(row)
		})
	})
}

// Put implements Backend. Creates from many clients share commits.
func (b *BoltBackend) Put(_ context.Context, rec *Record, base time.Time, emit func(storage.Tx) error, clash PlanCheck) error {
	k, v, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	return b.db.Batch(func(tx *bbolt.Tx) error {
		stored := tx.Bucket(bucketKeys).Get(k)
		if err := checkBase(stored, base); err != nil {
			return err
		}
		v := v
		if !base.IsZero() {
			kept, err := keepExpiryMark(stored, rec)
			if err != nil {
				return err
			}
			if kept != nil {
				v = kept
			}
		}
		if err := checkPlanOf(tx, rec.PlanID, clash); err != nil {
			return err
		}
		if err := putKey(tx, k, v, rec); err != nil {
			return err
		}
		if emit != nil {
			return emit(boltdb.Wrap(tx))
		}
		return nil
	})
}

// PutMany implements Backend: one write transaction, the plans first,
// then the consumers that may take them, then the keys that may belong
// to those.
func (b *BoltBackend) PutMany(_ context.Context, batch *Batch) error {
	puts := make([]func(*bbolt.Tx) error, 0, len(batch.Plans)+len(batch.Consumers)+len(batch.Keys))
	for _, p := range batch.Plans {
		k, v, err := encodeScope(p.ID, p)
		if err != nil {
			return err
		}
		puts = append(puts, func(tx *bbolt.Tx) error { return putPlan(tx, k, v, p) })
	}
	for _, c := range batch.Consumers {
		k, v, err := encodeScope(c.ID, c)
		if err != nil {
			return err
		}
		puts = append(puts, func(tx *bbolt.Tx) error {
			if err := checkPlanOf(tx, c.PlanID, batch.Clash[c.ID]); err != nil {
				return err
			}
			return putConsumer(tx, k, v, c)
		})
	}
	for _, rec := range batch.Keys {
		k, v, err := encodeRecord(rec)
		if err != nil {
			return err
		}
		puts = append(puts, func(tx *bbolt.Tx) error {
			if err := checkPlanOf(tx, rec.PlanID, batch.Clash[rec.ID]); err != nil {
				return err
			}
			return putKey(tx, k, v, rec)
		})
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		for _, put := range puts {
			if err := put(tx); err != nil {
				return err
			}
		}
		return nil
	})
}

// putKey stores key k's record v, and its plan's and consumer's index
// entries, refusing a plan or consumer that is gone.
func putKey(tx *bbolt.Tx, k, v []byte, rec *Record) error {
	bkt := tx.Bucket(bucketKeys)
	old, err := refsOf(bkt.Get(k))
	if err != nil {
		return err
	}
	if err := setHolder(tx, k, old, scopeRefs{ConsumerID: rec.ConsumerID, PlanID: rec.PlanID}); err != nil {
		return err
	}
	return bkt.Put(k, v)
}

// MarkExpiryWarned implements Backend.
func (b *BoltBackend) MarkExpiryWarned(_ context.Context, id string, notValidAfter time.Time, emit func(storage.Tx) error) (bool, error) {
	k, err := idBytes(id)
	if err != nil {
		return false, err
	}
	marked := false
	err = b.db.Update(func(tx *bbolt.Tx) error {
		marked = false
		v := tx.Bucket(bucketKeys).Get(k)
		if v == nil {
			return nil
		}
		v, due, err := markExpiryWarned(v, notValidAfter)
		if err != nil || !due {
			return err
		}
		if err := tx.Bucket(bucketKeys).Put(k, v); err != nil {
			return err
		}
		if emit != nil {
			if err := emit(boltdb.Wrap(tx)); err != nil {
				return err
			}
		}
		marked = true
		return nil
	})
	return marked, err
}

// markExpiryWarned is the stored record raw with the key.expiring mark
// for notValidAfter, and whether it was due: the key still ends then and
// no warning was sent for it. Both backends store what it returns.
func markExpiryWarned(raw []byte, notValidAfter time.Time) ([]byte, bool, error) {
	rec, err := decodeRecord(raw)
	if err != nil {
		return nil, false, fmt.Errorf("a stored key record does not decode: %w", err)
	}
	if rec.NotValidAfter == nil || !rec.NotValidAfter.Equal(notValidAfter) ||
		rec.ExpiryWarnedFor != nil && rec.ExpiryWarnedFor.Equal(notValidAfter) {
		return nil, false, nil
	}
	rec.ExpiryWarnedFor = &notValidAfter
	v, err := encodeRecordValue(rec)
	return v, err == nil, err
}

// keepExpiryMark is rec encoded with the key.expiring mark of stored,
// the version rec replaces, when rec keeps its notValidAfter and its
// mark differs from the stored one; nil when there is nothing to change.
// The stored mark wins whatever rec carries: MarkExpiryWarned sets it
// without a new lastModificationTime (it is no change of the key's), so
// a change made from a copy read before it would otherwise carry no
// mark, or an older one, and the warning would go out again.
func keepExpiryMark(stored []byte, rec *Record) ([]byte, error) {
	if stored == nil || rec.NotValidAfter == nil {
		return nil, nil
	}
	var s struct {
		NotValidAfter   *time.Time `json:"notValidAfter"`
		ExpiryWarnedFor *time.Time `json:"expiryWarnedFor"`
	}
	if err := json.Unmarshal(stored, &s); err != nil {
		return nil, err
	}
	if s.NotValidAfter == nil || !s.NotValidAfter.Equal(*rec.NotValidAfter) || sameMark(s.ExpiryWarnedFor, rec.ExpiryWarnedFor) {
		return nil, nil
	}
	marked := *rec
	marked.ExpiryWarnedFor = s.ExpiryWarnedFor
	return encodeRecordValue(&marked)
}

// sameMark reports whether two key.expiring marks are the same.
func sameMark(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// Delete implements Backend: the key and its usage go together.
func (b *BoltBackend) Delete(_ context.Context, id string) error {
	k, err := idBytes(id)
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		old, err := refsOf(tx.Bucket(bucketKeys).Get(k))
		if err != nil {
			return err
		}
		if err := setHolder(tx, k, old, scopeRefs{}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketKeys).Delete(k); err != nil {
			return err
		}
		for _, name := range [][]byte{bucketKeyQuota, bucketKeyHours} {
			if err := boltdb.DeletePrefix(tx.Bucket(name), k); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketKeyUsage).Delete(k)
	})
}

// Key implements Backend.
func (b *BoltBackend) Key(_ context.Context, id string) (rec *Record, u Usage, err error) {
	k, err := idBytes(id)
	if err != nil {
		return nil, Usage{}, nil
	}
	err = b.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketKeys).Get(k)
		if v == nil {
			return nil
		}
		var err error
		if rec, err = decodeRecord(v); err != nil {
			return fmt.Errorf("key %x: %w", k, err)
		}
		u = boltUsage(rec.ID, tx.Bucket(bucketKeyUsage).Get(k))
		return nil
	})
	return rec, u, err
}

// boltUsage decodes a key_usage value.
func boltUsage(id string, v []byte) Usage {
	u := Usage{KeyID: id}
	if len(v) == 16 {
		u.Count = binary.BigEndian.Uint64(v[:8])
		if ns := int64(binary.BigEndian.Uint64(v[8:])); ns != 0 {
			u.LastUsage = time.Unix(0, ns).UTC()
		}
	}
	return u
}

// AddUsage implements Backend: one transaction for the whole batch.
func (b *BoltBackend) AddUsage(_ context.Context, batch []Usage) error {
	return b.db.Update(func(tx *bbolt.Tx) error {
		keys, usage := tx.Bucket(bucketKeys), tx.Bucket(bucketKeyUsage)
		for i, u := range batch {
			k, err := idBytes(u.KeyID)
			if err != nil || keys.Get(k) == nil {
				batch[i] = Usage{KeyID: u.KeyID, Hours: u.Hours}
				if err == nil && tx.Bucket(bucketConsumers).Get(k) != nil {
					// A consumer's hours: it has no count of its own.
					if err := addHours(tx.Bucket(bucketKeyHours), k, u.Hours); err != nil {
						return err
					}
				}
				continue
			}
			sum := boltUsage(u.KeyID, usage.Get(k))
			sum.Count += u.Count
			if u.LastUsage.After(sum.LastUsage) {
				sum.LastUsage = u.LastUsage.UTC()
			}
			var v [16]byte
			binary.BigEndian.PutUint64(v[:8], sum.Count)
			if !sum.LastUsage.IsZero() {
				binary.BigEndian.PutUint64(v[8:], uint64(sum.LastUsage.UnixNano()))
			}
			if err := usage.Put(k, v[:]); err != nil {
				return err
			}
			if err := addHours(tx.Bucket(bucketKeyHours), k, u.Hours); err != nil {
				return err
			}
			batch[i] = sum
		}
		return nil
	})
}
