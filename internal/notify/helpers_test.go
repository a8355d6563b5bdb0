package notify

import (
	"context"
	"encoding/base64"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/seal"
)

// testSealer stands for the master key; one for every database of the
// tests, so a reopened database opens what it sealed before.
var testSealer = func() *seal.Sealer {
	s, err := seal.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return s
}()

// openDB opens (or reopens) the bbolt file at path and prepares the outbox.
func openDB(t *testing.T, path string) (*bbolt.DB, *Outbox) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := NewOutbox(db, testSealer)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return db, ob
}

func tempDB(t *testing.T) (*bbolt.DB, *Outbox) {
	t.Helper()
	db, ob := openDB(t, filepath.Join(t.TempDir(), "webapi.db"))
	t.Cleanup(func() { db.Close() })
	return db, ob
}

// enqueue commits msgs in one transaction.
func enqueue(t *testing.T, db *bbolt.DB, ob *Outbox, msgs ...Message) {
	t.Helper()
	err := db.Update(func(tx *bbolt.Tx) error {
		for _, m := range msgs {
			if err := ob.Enqueue(tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// counts returns the number of entries in each outbox bucket.
func counts(t *testing.T, db *bbolt.DB) map[string]int {
	t.Helper()
	n := map[string]int{}
	err := db.View(func(tx *bbolt.Tx) error {
		root := tx.Bucket(bucketRoot)
		for _, name := range [][]byte{bucketMsg, bucketAtt, bucketDue, bucketRef} {
			n[string(name)] = root.Bucket(name).Stats().KeyN
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pending(t *testing.T, db *bbolt.DB) int {
	t.Helper()
	return counts(t, db)["msg"]
}

// waitFor polls cond until it holds or a generous deadline passes; no
// timing is asserted.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// outcomes records OnOutcome calls.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) record(channel, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[channel+"/"+outcome]++
}

func (o *outcomes) get(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[key]
}

// fastConfig retries within milliseconds.
func fastConfig(cfg WorkerConfig) WorkerConfig {
	cfg.BaseDelay = 5 * time.Millisecond
	cfg.MaxDelay = 20 * time.Millisecond
	cfg.SendTimeout = 10 * time.Second
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour // only wake-ups and the schedule drive the tests
	}
	return cfg
}

// runWorker starts w and stops it at the end of the test.
func runWorker(t *testing.T, w *Worker) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		w.Stop()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func decodeBase64(t *testing.T, raw []byte) []byte {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
