package keystore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/keystore/traffic"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/testclock"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a key store on a real database (a bbolt file or a PostgreSQL
// schema) with everything needed to open it again.
type env struct {
	db      storage.DB
	backend Backend
	sealer  *seal.Sealer
	master  []byte
	clock   *testclock.Clock
	keys    *Keys
}

func randomKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// newBackend is the key Backend of db's kind.
func newBackend(t testing.TB, db storage.DB) Backend {
	t.Helper()
	return storetest.Pick[Backend](t, db,
		func(d *boltdb.DB) (Backend, error) { return NewBoltBackend(d) },
		func(d *pgdb.DB) Backend { return NewPostgresBackend(d) })
}

func newEnv(t testing.TB, db storage.DB) *env {
	t.Helper()
	master := randomKey(t)
	sealer, err := seal.New(master)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{db: db, backend: newBackend(t, db), sealer: sealer, master: master, clock: testclock.New(t0)}
	e.keys = e.reopen(t)
	return e
}

// stored is every value the backend keeps for keys, as bytes: bucket
// values on bbolt, each row as text on PostgreSQL.
func (e *env) stored(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	ctx := context.Background()
	err := e.db.View(ctx, func(tx storage.Tx) error {
		switch e.db.Backend() {
		case boltdb.Name:
			for _, name := range [][]byte{bucketKeys, bucketKeyUsage} {
				err := boltdb.Of(tx).Bucket(name).ForEach(func(_, v []byte) error {
					out = append(out, bytes.Clone(v))
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		default:
			rows, err := pgdb.Of(tx).Query(ctx, "SELECT k::text FROM keys k")
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var row string
				if err := rows.Scan(&row); err != nil {
					return err
				}
				out = append(out, []byte(row))
			}
			return rows.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// usageRecords counts the usage records the backend keeps apart from
// keys (bbolt's usage bucket); PostgreSQL keeps usage in the key's row.
func (e *env) usageRecords(t testing.TB) int {
	t.Helper()
	n := 0
	if e.db.Backend() != boltdb.Name {
		return 0
	}
	err := e.db.View(context.Background(), func(tx storage.Tx) error {
		n = boltdb.Of(tx).Bucket(bucketKeyUsage).Stats().KeyN
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// putCorrupt stores a key record that does not decode.
func (e *env) putCorrupt(t testing.TB) {
	t.Helper()
	id := bytes.Repeat([]byte{1}, 16)
	ctx := context.Background()
	err := e.db.Update(ctx, func(tx storage.Tx) error {
		if e.db.Backend() == boltdb.Name {
			return boltdb.Of(tx).Bucket(bucketKeys).Put(id, []byte("{not json"))
		}
		_, err := pgdb.Of(tx).Exec(ctx, `INSERT INTO keys (id, service, token_hash, record) VALUES ($1, 'contracts', $2, '{"id": 7}')`, id, id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// reopen loads the keys of the same backend into a fresh Keys.
func (e *env) reopen(t testing.TB) *Keys {
	t.Helper()
	k, err := Open(e.backend, e.sealer, e.clock.Now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return k
}

// decodeInput decodes a JSON body into an input, as the admin API does.
func decodeInput[T any](t testing.TB, body string) *T {
	t.Helper()
	in := new(T)
	if err := json.Unmarshal([]byte(body), in); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return in
}

var (
	input         = decodeInput[KeyInput]
	planInput     = decodeInput[PlanInput]
	consumerInput = decodeInput[ConsumerInput]
)

func mustCreate(t testing.TB, k *Keys, body string) Key {
	t.Helper()
	key, err := k.Create(input(t, body))
	if err != nil {
		t.Fatalf("Create(%s): %v", body, err)
	}
	return key
}

// memBackend is an in-memory Backend whose operations can be made to fail
// or to wait, for tests of error paths and lock scope.
type memBackend struct {
	mu    sync.Mutex
	recs  map[string][]byte // JSON, as bbolt keeps them
	usage map[string]Usage
	fail  error
	// putHook, if set, runs at the start of Put, outside mu.
	putHook func()
	quota   map[string]*memQuota
	hours   map[string][]HourCount
}

func newMemBackend() *memBackend {
	return &memBackend{recs: map[string][]byte{}, usage: map[string]Usage{}}
}

func (m *memBackend) Load(_ context.Context, fn func(row *KeyRow) error) error {
	m.mu.Lock()
	ids := make([]string, 0, len(m.recs))
	for id := range m.recs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rows := make([]*KeyRow, 0, len(ids))
	for _, id := range ids {
		row, err := rowOf(m.recs[id], m.usage[id])
		if err != nil {
			m.mu.Unlock()
			return err
		}
		rows = append(rows, row)
	}
	m.mu.Unlock()
	for _, row := range rows {
		if err := fn(row); err != nil {
			return err
		}
	}
	return nil
}

// Put stores rec; it has no transactions, and emit runs with none.
func (m *memBackend) Put(_ context.Context, rec *Record, _ time.Time, emit func(storage.Tx) error, _ PlanCheck) error {
	if m.putHook != nil {
		m.putHook()
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if emit != nil {
		if err := emit(nil); err != nil {
			return err
		}
	}
	m.recs[rec.ID] = v
	return nil
}

// PutMany stores every record or, failing, none; it keeps no plans or
// consumers.
func (m *memBackend) PutMany(_ context.Context, batch *Batch) error {
	if len(batch.Plans) > 0 || len(batch.Consumers) > 0 {
		return errMemScopes
	}
	recs := batch.Keys
	vals := make([][]byte, len(recs))
	for i, rec := range recs {
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	for i, rec := range recs {
		m.recs[rec.ID] = vals[i]
	}
	return nil
}

// MarkExpiryWarned marks under the backend's lock, as a transaction would.
func (m *memBackend) MarkExpiryWarned(_ context.Context, id string, notValidAfter time.Time, emit func(storage.Tx) error) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.recs[id]
	if !ok {
		return false, nil
	}
	v, due, err := markExpiryWarned(v, notValidAfter)
	if err != nil || !due {
		return false, err
	}
	if emit != nil {
		if err := emit(nil); err != nil {
			return false, err
		}
	}
	m.recs[id] = v
	return true, nil
}

func (m *memBackend) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	delete(m.recs, id)
	delete(m.usage, id)
	return nil
}

func (m *memBackend) Key(_ context.Context, id string) (*Record, Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, Usage{}, m.fail
	}
	v, ok := m.recs[id]
	if !ok {
		return nil, Usage{}, nil
	}
	r := new(Record)
	return r, m.usage[id], json.Unmarshal(v, r)
}

func (m *memBackend) AddUsage(_ context.Context, batch []Usage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	for i, u := range batch {
		if _, ok := m.recs[u.KeyID]; !ok {
			batch[i] = Usage{KeyID: u.KeyID}
			continue
		}
		sum := m.usage[u.KeyID]
		sum.KeyID = u.KeyID
		sum.Count += u.Count
		if u.LastUsage.After(sum.LastUsage) {
			sum.LastUsage = u.LastUsage
		}
		m.usage[u.KeyID] = sum
		if m.hours == nil {
			m.hours = map[string][]HourCount{}
		}
		m.hours[u.KeyID] = append(m.hours[u.KeyID], u.Hours...)
		batch[i] = sum
	}
	return nil
}

func (m *memBackend) setFail(err error) {
	m.mu.Lock()
	m.fail = err
	m.mu.Unlock()
}

func (m *memBackend) has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.recs[id]
	return ok
}

// The traffic methods of memBackend: quota rows and hourly counts in
// maps, under the backend's lock as a transaction would hold them.
type memQuota struct {
	used      int64
	exhausted bool
}

func (m *memBackend) quotaRows() map[string]*memQuota {
	if m.quota == nil {
		m.quota = map[string]*memQuota{}
	}
	return m.quota
}

func (m *memBackend) UsageHours(_ context.Context, id string, from, to time.Time) ([]HourCount, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []HourCount
	for _, h := range m.hours[id] {
		if !h.Hour.Before(from) && h.Hour.Before(to) {
			out = append(out, h)
		}
	}
	return out, m.fail
}

func (m *memBackend) PurgeUsage(_ context.Context, before time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, list := range m.hours {
		m.hours[id] = slices.DeleteFunc(list, func(h HourCount) bool { return h.Hour.Before(before) })
	}
	return m.fail
}

func (m *memBackend) LeaseQuota(_ context.Context, id string, span traffic.QuotaSpan, limit, want int64, emit func(storage.Tx) error) (traffic.QuotaLease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return traffic.QuotaLease{}, m.fail
	}
	k := id + string(span.Period) + span.Start.String()
	row := m.quotaRows()[k]
	if row == nil {
		row = &memQuota{}
		m.quotaRows()[k] = row
	}
	granted, total, first := leaseQuota(row.used, row.exhausted, limit, want)
	if first && emit != nil {
		if err := emit(nil); err != nil {
			return traffic.QuotaLease{}, err
		}
	}
	row.used, row.exhausted = total, row.exhausted || first
	return traffic.QuotaLease{Granted: granted, Used: total}, nil
}

func (m *memBackend) ReturnQuota(_ context.Context, id string, span traffic.QuotaSpan, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if row := m.quotaRows()[id+string(span.Period)+span.Start.String()]; row != nil {
		row.used = max(row.used-n, 0)
	}
	return m.fail
}

func (m *memBackend) QuotaUsed(_ context.Context, id string, span traffic.QuotaSpan) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if row := m.quotaRows()[id+string(span.Period)+span.Start.String()]; row != nil {
		return row.used, m.fail
	}
	return 0, m.fail
}

// memBackend keeps no plans or consumers: the tests that use it are of
// keys alone; plans and consumers run on the real backends (scopes_test.go).
var errMemScopes = errors.New("memBackend keeps no plans or consumers")

func (m *memBackend) LoadScopes(context.Context, func(*Plan) error, func(*Consumer) error) error {
	return nil
}
func (m *memBackend) Plan(context.Context, string) (*Plan, error)         { return nil, nil }
func (m *memBackend) Consumer(context.Context, string) (*Consumer, error) { return nil, nil }
func (m *memBackend) PutPlan(context.Context, *Plan, time.Time, HoldersCheck) error {
	return errMemScopes
}
func (m *memBackend) PutConsumer(context.Context, *Consumer, time.Time, PlanCheck) error {
	return errMemScopes
}
func (m *memBackend) DeletePlan(context.Context, string) error     { return errMemScopes }
func (m *memBackend) DeleteConsumer(context.Context, string) error { return errMemScopes }
