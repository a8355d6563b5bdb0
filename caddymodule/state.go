package caddymodule

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
	"github.com/keygate/keygate/upstreams/signing"
)

// states holds one state per database file, shared by every config that
// names it, so a reload neither reopens the file (and waits on its lock)
// nor loses keys and usage counts held in memory.
var states = caddy.NewUsagePool()

// lockTimeout bounds the wait for another process's lock on the database.
const lockTimeout = 5 * time.Second

// state is what outlives a config reload.
type state struct {
	db            *bbolt.DB
	masterKeyPath string
	masterKey     []byte
	sealer        *keystore.Sealer
	keys          *keystore.Keys
	templates     *contracts.Templates
	// storage is db as a storage.DB, and contracts the contract store's
	// backend on it.
	storage   *boltdb.DB
	contracts *contracts.BoltBackend
	logger    *zap.Logger

	// outbox holds the notifications not yet delivered; worker, the one
	// deliverer of this process, sends them through the senders of the
	// config started last (notifications.go).
	outbox      *notify.Outbox
	worker      *notify.Worker
	senders     atomic.Pointer[senders]
	startWorker sync.Once
	workerDone  chan struct{}
}

func openState(dbPath, masterKeyPath string, logger *zap.Logger) (*state, error) {
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	masterKey, err := keystore.LoadOrCreateMasterKey(masterKeyPath)
	if err != nil {
		return nil, err
	}
	sealer, err := keystore.NewSealer(masterKey)
	if err != nil {
		return nil, err
	}
	db, err := bbolt.Open(dbPath, 0o600, &bbolt.Options{Timeout: lockTimeout})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("database %s is locked by another process (waited %s): stop the other gateway or give this one another data_dir", dbPath, lockTimeout)
	}
	if errors.Is(err, bbolt.ErrInvalid) || errors.Is(err, bbolt.ErrChecksum) || errors.Is(err, bbolt.ErrVersionMismatch) {
		return nil, fmt.Errorf("database %s is not a bbolt file or its header is damaged (%w): restore it from a backup, or give keygate a data_dir of its own", dbPath, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening database %s: %w", dbPath, err)
	}
	s := &state{db: db, masterKeyPath: masterKeyPath, masterKey: masterKey, sealer: sealer, logger: logger}
	if err := s.openChecked(dbPath); err != nil {
		db.Close()
		return nil, err
	}
	// A process killed while writing an .eml file left it under its
	// temporary name; its message is still queued and will be written
	// again. The lock is ours and the worker has not started, so nothing
	// writes there now.
	mailDir := filepath.Join(filepath.Dir(dbPath), "mail")
	if n, err := notify.RemoveEMLLeftovers(mailDir); err != nil {
		logger.Warn("removing temporary mail files", zap.Error(err))
	} else if n > 0 {
		logger.Info("removed temporary mail files left by a crash", zap.String("dir", mailDir), zap.Int("files", n))
	}
	s.newWorker(logger)
	logger.Info("database opened", zap.String("path", dbPath), zap.Int("contracts_keys", s.keys.Count(keystore.ServiceContracts)), zap.Int("share_keys", s.keys.Count(keystore.ServiceShare)))
	return s, nil
}

// openChecked checks that the file is whole and keygate's, then opens the
// stores on it. bbolt reads the file through a memory map and panics on
// a page it cannot make sense of; a page past the end of a cut file is a
// fault (SIGBUS) that would end the process. Both become an error naming
// the file, so that a damaged database stops the start with a message
// instead of a crash.
func (s *state) openChecked(dbPath string) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("database %s is damaged (%v): restore it from a backup", dbPath, r)
		}
	}()
	if err := checkWhole(s.db, dbPath); err != nil {
		return fmt.Errorf("database %s %w: restore it from a backup", dbPath, err)
	}
	if err := checkOwnDatabase(s.db); err != nil {
		return fmt.Errorf("database %s: %w", dbPath, err)
	}
	return s.open()
}

// checkWhole refuses a file shorter than the pages its last commit
// counts (a cut copy, a disk that lost its tail): reading such a page
// through the memory map is a fault, not an error.
func checkWhole(db *bbolt.DB, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return db.View(func(tx *bbolt.Tx) error {
		if want := tx.Size(); st.Size() < want {
			return fmt.Errorf("is truncated: %d bytes, its pages need %d", st.Size(), want)
		}
		return nil
	})
}

// ownBucket is the bucket that keygate creates first, in the first
// transaction it ever commits to a file: a keygate database without it
// is empty.
var ownBucket = []byte("keys")

// checkOwnDatabase refuses a bbolt file of another program: one that holds
// buckets, none of them keygate's, which keygate would otherwise fill
// with its own buckets beside the other program's data.
func checkOwnDatabase(db *bbolt.DB) error {
	return db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(ownBucket) != nil {
			return nil
		}
		var names []string
		err := tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			if len(names) < 5 {
				names = append(names, strconv.Quote(string(name)))
			}
			return nil
		})
		if err != nil || len(names) == 0 {
			return err
		}
		return fmt.Errorf("not a keygate database: it holds buckets of another program (%s) and none of keygate's; give keygate a data_dir of its own", strings.Join(names, ", "))
	})
}

func (s *state) open() error {
	backend, err := keystore.NewBoltBackend(s.db)
	if err != nil {
		return err
	}
	if s.keys, err = keystore.Open(backend, s.sealer, nil); err != nil {
		return fmt.Errorf("loading keys: %w", err)
	}
	s.storage = boltdb.New(s.db)
	if s.contracts, err = contracts.NewBoltBackend(s.storage); err != nil {
		return err
	}
	if s.templates, err = contracts.NewTemplates(s.storage, s.contracts); err != nil {
		return err
	}
	odb := boltdb.New(s.db)
	outboxBackend, err := notify.NewBoltBackend(odb)
	if err != nil {
		return err
	}
	if s.outbox, err = notify.NewOutbox(odb, outboxBackend, s.sealer); err != nil {
		return err
	}
	return nil
}

// flush writes pending usage counts and refreshes the key gauges.
func (s *state) flush(logger *zap.Logger) {
	start := time.Now()
	if _, err := s.keys.FlushUsage(); err != nil {
		logger.Error("flushing key usage", zap.Error(err))
	}
	metrics.usageFlush.Observe(time.Since(start).Seconds())
	s.updateKeyGauges()
}

func (s *state) updateKeyGauges() {
	for _, svc := range []keystore.Service{keystore.ServiceContracts, keystore.ServiceShare} {
		metrics.keys.WithLabelValues(string(svc)).Set(float64(s.keys.Count(svc)))
	}
}

// Destruct stops delivery, flushes what is pending and closes the
// database, when the last config using it goes away.
func (s *state) Destruct() error {
	s.stopWorker()
	if _, err := s.keys.FlushUsage(); err != nil {
		s.db.Close()
		return err
	}
	return s.db.Close()
}

// provisionAPIs builds the APIs of one config on the shared database.
// Their stores hold nothing that must outlive the config but pending share
// openings, which the app flushes when it stops.
func (s *state) provisionAPIs(a *App) error {
	s.updateKeyGauges()
	lifecycle, err := signing.New(contracts.Config{
		DB:               s.storage,
		Backend:          s.contracts,
		Templates:        s.templates,
		Sealer:           s.sealer,
		PublicBaseURL:    a.PublicBaseURL,
		ContractValidity: time.Duration(a.ContractValidity),
		SMSConfigured:    a.SMS != nil,
		Logger:           a.logger.Named("contracts"),
	}, signing.Config{
		Outbox: s.outbox,
		OTPKey: s.derivedKey("keygate signing one-time password v1"),
	})
	if err != nil {
		return err
	}
	cs := lifecycle.Contracts()
	sdb := boltdb.New(s.db)
	sb, err := share.NewBoltBackend(sdb)
	if err != nil {
		return err
	}
	ss, err := share.NewStore(share.Config{
		DB:            sdb,
		Backend:       sb,
		PublicBaseURL: a.PublicBaseURL,
		CookieKey:     s.derivedKey("keygate share unlock cookie v1"),
		Logger:        a.logger.Named("share"),
	})
	if err != nil {
		return err
	}
	a.shares = ss
	a.contracts = cs
	a.contractsAPI = contracts.NewHandler(cs)
	a.signingPages = lifecycle.Handler()
	a.shareAPI = share.NewHandler(ss)
	a.shareViewer = share.NewViewer(ss)
	return nil
}

// derivedKey is a key for one purpose derived from the master key, so
// that no two uses share a key.
func (s *state) derivedKey(purpose string) []byte {
	m := hmac.New(sha256.New, s.masterKey)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}
