package keystore

import (
	"context"

	"bytes"
	"encoding/binary"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/keystore/traffic"
)

// hourKey is the key_usage_hourly key of key id's hour and outcome.
func hourKey(id []byte, hour time.Time, outcome string) []byte {
	k := make([]byte, 0, 24+len(outcome))
	k = append(k, id...)
	k = binary.BigEndian.AppendUint64(k, uint64(hour.Unix()/3600))
	return append(k, outcome...)
}

// addHours adds hours to key id's hourly counts.
func addHours(b *bbolt.Bucket, id []byte, hours []HourCount) error {
	for _, h := range hours {
		k := hourKey(id, h.Hour, h.Outcome)
		n := h.Count
		if v := b.Get(k); len(v) == 8 {
			n += binary.BigEndian.Uint64(v)
		}
		if err := b.Put(k, binary.BigEndian.AppendUint64(nil, n)); err != nil {
			return err
		}
	}
	return nil
}

// UsageHours implements Backend.
func (b *BoltBackend) UsageHours(_ context.Context, id string, from, to time.Time) ([]HourCount, error) {
	k, err := idBytes(id)
	if err != nil {
		return nil, nil
	}
	var out []HourCount
	err = b.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketKeyHours).Cursor()
		first := hourKey(k, from, "")
		last := uint64(to.Unix() / 3600)
		for key, v := c.Seek(first); key != nil && bytes.HasPrefix(key, k) && len(key) >= 24; key, v = c.Next() {
			hr := binary.BigEndian.Uint64(key[16:24])
			if hr >= last {
				break
			}
			out = append(out, HourCount{Hour: time.Unix(int64(hr)*3600, 0).UTC(), Outcome: string(key[24:]), Count: binary.BigEndian.Uint64(v)})
		}
		return nil
	})
	return out, err
}

// PurgeUsage implements Backend: it reads every key's hours and quota
// periods, which it is called for about once an hour.
func (b *BoltBackend) PurgeUsage(_ context.Context, before time.Time) error {
	limit := uint64(before.Unix() / 3600)
	return b.db.Update(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketKeyHours).Cursor()
		for k, _ := c.First(); k != nil; {
			if len(k) >= 24 && binary.BigEndian.Uint64(k[16:24]) < limit {
				at := append([]byte(nil), k...)
				if err := c.Delete(); err != nil {
					return err
				}
				k, _ = c.Seek(at)
				continue
			}
			// Past this key's old hours: on to the next key id.
			next := append([]byte(nil), k[:16]...)
			if !increment(next) {
				break
			}
			k, _ = c.Seek(next)
		}
		// Quota periods that began before it.
		return boltdb.DeleteWhere(tx.Bucket(bucketKeyQuota), func(k []byte) bool {
			span, ok := quotaSpanOf(k)
			return ok && span.Start.Before(before)
		})
	})
}

// increment adds one to the big-endian number b; false when it overflows.
func increment(b []byte) bool {
	for i := len(b) - 1; i >= 0; i-- {
		b[i]++
		if b[i] != 0 {
			return true
		}
	}
	return false
}

// quotaKey is the key_quota key of key id's period span: the id, the
// start, and the kind's initial (h, d, m).
func quotaKey(id []byte, span traffic.QuotaSpan) []byte {
	k := binary.BigEndian.AppendUint64(append(make([]byte, 0, 25), id...), uint64(span.Start.Unix()))
	return append(k, span.Period[0])
}

// quotaSpanOf reads the span of a key_quota key.
func quotaSpanOf(k []byte) (traffic.QuotaSpan, bool) {
	if len(k) != 25 {
		return traffic.QuotaSpan{}, false
	}
	start := time.Unix(int64(binary.BigEndian.Uint64(k[16:24])), 0).UTC()
	for _, p := range []traffic.QuotaPeriod{traffic.QuotaHour, traffic.QuotaDay, traffic.QuotaMonth} {
		if p[0] == k[24] {
			return traffic.QuotaSpan{Period: p, Start: start}, true
		}
	}
	return traffic.QuotaSpan{}, false
}

// quotaRow decodes a key_quota value: used and whether key.quota_exhausted
// was sent for the period.
func quotaRow(v []byte) (used int64, exhausted bool) {
	if len(v) == 9 {
		return int64(binary.BigEndian.Uint64(v[:8])), v[8] == 1
	}
	return 0, false
}

func putQuotaRow(b *bbolt.Bucket, k []byte, used int64, exhausted bool) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 9), uint64(used))
	if exhausted {
		v = append(v, 1)
	} else {
		v = append(v, 0)
	}
	return b.Put(k, v)
}

// leaseQuota is the lease both backends compute from the row they read:
// what it grants, the new total, and whether it exhausts the period for
// the first time.
func leaseQuota(used int64, exhausted bool, limit, want int64) (granted, total int64, first bool) {
	granted = max(min(want, limit-used), 0)
	total = used + granted
	return granted, total, total >= limit && !exhausted
}

// LeaseQuota implements Backend.
func (b *BoltBackend) LeaseQuota(_ context.Context, id string, span traffic.QuotaSpan, limit, want int64, emit func(storage.Tx) error) (traffic.QuotaLease, error) {
	k, err := idBytes(id)
	if err != nil {
		return traffic.QuotaLease{}, err
	}
	var l traffic.QuotaLease
	err = b.db.Update(func(tx *bbolt.Tx) error {
		if !holderExists(tx, k) {
			l = traffic.QuotaLease{}
			return nil // deleted meanwhile: nothing to spend
		}
		qb := tx.Bucket(bucketKeyQuota)
		qk := quotaKey(k, span)
		used, exhausted := quotaRow(qb.Get(qk))
		granted, total, first := leaseQuota(used, exhausted, limit, want)
		if err := putQuotaRow(qb, qk, total, exhausted || first); err != nil {
			return err
		}
		if first && emit != nil {
			if err := emit(boltdb.Wrap(tx)); err != nil {
				return err
			}
		}
		l = traffic.QuotaLease{Granted: granted, Used: total}
		return nil
	})
	return l, err
}

// ReturnQuota implements Backend.
func (b *BoltBackend) ReturnQuota(_ context.Context, id string, span traffic.QuotaSpan, n int64) error {
	k, err := idBytes(id)
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		qb := tx.Bucket(bucketKeyQuota)
		qk := quotaKey(k, span)
		v := qb.Get(qk)
		if v == nil {
			return nil
		}
		used, exhausted := quotaRow(v)
		return putQuotaRow(qb, qk, max(used-n, 0), exhausted)
	})
}

// QuotaUsed implements Backend.
func (b *BoltBackend) QuotaUsed(_ context.Context, id string, span traffic.QuotaSpan) (int64, error) {
	k, err := idBytes(id)
	if err != nil {
		return 0, nil
	}
	var used int64
	err = b.db.View(func(tx *bbolt.Tx) error {
		used, _ = quotaRow(tx.Bucket(bucketKeyQuota).Get(quotaKey(k, span)))
		return nil
	})
	return used, err
}
