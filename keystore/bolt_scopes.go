package keystore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage/boltdb"
)

// Buckets of plans and consumers, named once.
var (
	bucketPlans     = []byte("plans")      // plan id (16) -> Plan JSON
	bucketPlanNames = []byte("plan_names") // name -> plan id (16)
	bucketConsumers = []byte("consumers")  // consumer id (16) -> Consumer JSON
	// externalId -> consumer id (16)
	bucketConsumerExternal = []byte("consumer_external_ids")
	// plan or consumer id (16) | holder id (16) -> empty: the keys of a
	// consumer, the keys and consumers of a plan. Kept in the holder's
	// transaction, so that a delete sees every holder.
	bucketScopeHolders = []byte("scope_holders")
)

// scopeRefs is what a stored key or consumer names.
type scopeRefs struct {
	ConsumerID *string `json:"consumerId"`
	PlanID     *string `json:"planId"`
}

// refs reads the references of a stored key or consumer, none for nil.
func refsOf(v []byte) (scopeRefs, error) {
	var r scopeRefs
	if v == nil {
		return r, nil
	}
	err := json.Unmarshal(v, &r)
	return r, err
}

// setHolder moves holder's index entries from what old named to what
// next names, refusing a reference to a plan or consumer that is gone.
func setHolder(tx *bbolt.Tx, holder []byte, old, next scopeRefs) error {
	idx := tx.Bucket(bucketScopeHolders)
	for _, id := range []*string{old.ConsumerID, old.PlanID} {
		if id == nil {
			continue
		}
		if k, err := idBytes(*id); err == nil {
			if err := idx.Delete(append(k, holder...)); err != nil {
				return err
			}
		}
	}
	for _, ref := range []struct {
		id     *string
		bucket []byte
		field  string
		what   string
	}{{next.ConsumerID, bucketConsumers, "consumerId", "consumer"}, {next.PlanID, bucketPlans, "planId", "plan"}} {
		if ref.id == nil {
			continue
		}
		k, err := idBytes(*ref.id)
		if err != nil || tx.Bucket(ref.bucket).Get(k) == nil {
			return unknownRef(ref.field, ref.what)
		}
		if err := idx.Put(append(k, holder...), nil); err != nil {
			return err
		}
	}
	return nil
}

// hasHolders reports whether any key or consumer names scope id.
func hasHolders(tx *bbolt.Tx, id []byte) bool {
	k, _ := tx.Bucket(bucketScopeHolders).Cursor().Seek(id)
	return k != nil && bytes.HasPrefix(k, id)
}

// holderExists reports whether id is a key's or a consumer's: what
// spends quota and counts hours.
func holderExists(tx *bbolt.Tx, id []byte) bool {
	return tx.Bucket(bucketKeys).Get(id) != nil || tx.Bucket(bucketConsumers).Get(id) != nil
}

// LoadScopes implements Backend.
func (b *BoltBackend) LoadScopes(_ context.Context, plan func(*Plan) error, consumer func(*Consumer) error) error {
	return b.db.View(func(tx *bbolt.Tx) error {
		err := tx.Bucket(bucketPlans).ForEach(func(k, v []byte) error {
			p := new(Plan)
			if err := json.Unmarshal(v, p); err != nil {
				return fmt.Errorf("plan %x: %w", k, err)
			}
			return plan(p)
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketConsumers).ForEach(func(k, v []byte) error {
			c := new(Consumer)
			if err := json.Unmarshal(v, c); err != nil {
				return fmt.Errorf("consumer %x: %w", k, err)
			}
			return consumer(c)
		})
	})
}

// Plan implements Backend.
func (b *BoltBackend) Plan(_ context.Context, id string) (*Plan, error) {
	var p *Plan
	return p, b.get(bucketPlans, id, func(v []byte) error {
		p = new(Plan)
		return json.Unmarshal(v, p)
	})
}

// Consumer implements Backend.
func (b *BoltBackend) Consumer(_ context.Context, id string) (*Consumer, error) {
	var c *Consumer
	return c, b.get(bucketConsumers, id, func(v []byte) error {
		c = new(Consumer)
		return json.Unmarshal(v, c)
	})
}

// get calls fn with the value of id in bucket, if there is one.
func (b *BoltBackend) get(bucket []byte, id string, fn func([]byte) error) error {
	k, err := idBytes(id)
	if err != nil {
		return nil
	}
	return b.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucket).Get(k); v != nil {
			return fn(v)
		}
		return nil
	})
}

// PutPlan implements Backend.
func (b *BoltBackend) PutPlan(_ context.Context, p *Plan, base time.Time, holders HoldersCheck) error {
	k, v, err := encodeScope(p.ID, p)
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		if err := checkBase(tx.Bucket(bucketPlans).Get(k), base); err != nil {
			return err
		}
		if holders != nil {
			hs, err := holdersOf(tx, k)
			if err != nil {
				return err
			}
			if err := holders(hs); err != nil {
				return err
			}
		}
		return putPlan(tx, k, v, p)
	})
}

// holdersOf reads the keys and consumers that take plan k, by the index
// their writes keep.
func holdersOf(tx *bbolt.Tx, k []byte) ([]Holder, error) {
	var out []Holder
	c := tx.Bucket(bucketScopeHolders).Cursor()
	for ik, _ := c.Seek(k); ik != nil && bytes.HasPrefix(ik, k); ik, _ = c.Next() {
		id := ik[len(k):]
		kind, v := "consumer", tx.Bucket(bucketConsumers).Get(id)
		if v == nil {
			kind, v = "key", tx.Bucket(bucketKeys).Get(id)
		}
		if v == nil {
			continue
		}
		h, err := holderOf(kind, v)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// checkPlanOf calls clash, when set, with the plan ref names as tx reads
// it (nil: none or gone).
func checkPlanOf(tx *bbolt.Tx, ref *string, clash PlanCheck) error {
	if clash == nil || ref == nil {
		return nil
	}
	k, err := idBytes(*ref)
	if err != nil {
		return nil // the reference's own check refuses it
	}
	v := tx.Bucket(bucketPlans).Get(k)
	if v == nil {
		return nil
	}
	p := new(Plan)
	if err := json.Unmarshal(v, p); err != nil {
		return err
	}
	return clash(p)
}

// encodeScope is a plan or consumer as stored: its id's 16 bytes and its
// JSON.
func encodeScope(id string, scope any) (k, v []byte, err error) {
	if k, err = idBytes(id); err != nil {
		return nil, nil, err
	}
	v, err = json.Marshal(scope)
	return k, v, err
}

// putPlan stores plan k's record v, refusing a name another plan has.
func putPlan(tx *bbolt.Tx, k, v []byte, p *Plan) error {
	names := tx.Bucket(bucketPlanNames)
	if other := names.Get([]byte(p.Name)); other != nil && !bytes.Equal(other, k) {
		return ErrPlanNameTaken
	}
	if old := tx.Bucket(bucketPlans).Get(k); old != nil {
		var o Plan
		if err := json.Unmarshal(old, &o); err != nil {
			return err
		}
		if err := names.Delete([]byte(o.Name)); err != nil {
			return err
		}
	}
	if err := names.Put([]byte(p.Name), k); err != nil {
		return err
	}
	return tx.Bucket(bucketPlans).Put(k, v)
}

// DeletePlan implements Backend.
func (b *BoltBackend) DeletePlan(_ context.Context, id string) error {
	k, err := idBytes(id)
	if err != nil {
		return ErrPlanNotFound
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		old := tx.Bucket(bucketPlans).Get(k)
		if old == nil {
			return ErrPlanNotFound
		}
		if hasHolders(tx, k) {
			return ErrPlanInUse
		}
		var o Plan
		if err := json.Unmarshal(old, &o); err != nil {
			return err
		}
		if err := tx.Bucket(bucketPlanNames).Delete([]byte(o.Name)); err != nil {
			return err
		}
		return tx.Bucket(bucketPlans).Delete(k)
	})
}

// PutConsumer implements Backend.
func (b *BoltBackend) PutConsumer(_ context.Context, c *Consumer, base time.Time, clash PlanCheck) error {
	k, v, err := encodeScope(c.ID, c)
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		if err := checkBase(tx.Bucket(bucketConsumers).Get(k), base); err != nil {
			return err
		}
		if err := checkPlanOf(tx, c.PlanID, clash); err != nil {
			return err
		}
		return putConsumer(tx, k, v, c)
	})
}

// putConsumer stores consumer k's record v and its plan's index entry,
// refusing an externalId another consumer has and a plan that is gone.
func putConsumer(tx *bbolt.Tx, k, v []byte, c *Consumer) error {
	ext := tx.Bucket(bucketConsumerExternal)
	if c.ExternalID != nil {
		if other := ext.Get([]byte(*c.ExternalID)); other != nil && !bytes.Equal(other, k) {
			return ErrExternalIDTaken
		}
	}
	stored := tx.Bucket(bucketConsumers).Get(k)
	if stored != nil {
		var o Consumer
		if err := json.Unmarshal(stored, &o); err != nil {
			return err
		}
		if o.ExternalID != nil {
			if err := ext.Delete([]byte(*o.ExternalID)); err != nil {
				return err
			}
		}
	}
	old, err := refsOf(stored)
	if err != nil {
		return err
	}
	if err := setHolder(tx, k, old, scopeRefs{PlanID: c.PlanID}); err != nil {
		return err
	}
	if c.ExternalID != nil {
		if err := ext.Put([]byte(*c.ExternalID), k); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketConsumers).Put(k, v)
}

// DeleteConsumer implements Backend: the consumer and its traffic go
// together.
func (b *BoltBackend) DeleteConsumer(_ context.Context, id string) error {
	k, err := idBytes(id)
	if err != nil {
		return ErrConsumerNotFound
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		stored := tx.Bucket(bucketConsumers).Get(k)
		if stored == nil {
			return ErrConsumerNotFound
		}
		if hasHolders(tx, k) {
			return ErrConsumerHasKeys
		}
		var o Consumer
		if err := json.Unmarshal(stored, &o); err != nil {
			return err
		}
		if o.ExternalID != nil {
			if err := tx.Bucket(bucketConsumerExternal).Delete([]byte(*o.ExternalID)); err != nil {
				return err
			}
		}
		if err := setHolder(tx, k, scopeRefs{PlanID: o.PlanID}, scopeRefs{}); err != nil {
			return err
		}
		for _, name := range [][]byte{bucketKeyQuota, bucketKeyHours} {
			if err := boltdb.DeletePrefix(tx.Bucket(name), k); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketConsumers).Delete(k)
	})
}
