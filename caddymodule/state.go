package caddymodule

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/docseal"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/stores"
	"github.com/keygate/keygate/internal/webhook"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
	"github.com/keygate/keygate/upstreams/signing"
)

// states holds one state per database (Storage.PoolKey), shared by every
// config that names it, so a reload neither reopens the database (and
// waits on its lock) nor loses keys and usage counts held in memory.
var states = caddy.NewUsagePool()

// state is what outlives a config reload.
type state struct {
	stores        *stores.Stores
	masterKeyPath string
	masterKey     []byte
	sealer        *seal.Sealer
	keys          *keystore.Keys
	templates     *contracts.Templates
	logger        *zap.Logger
	// idempotency keeps the replies of idempotent creates and the keys
	// this process is working on, for every config.
	idempotency *idempotency.Store

	// outbox holds the notifications not yet delivered; worker, the one
	// deliverer of this process, sends them through the senders of the
	// config started last (notifications.go).
	outbox      *notify.Outbox
	worker      *notify.Worker
	senders     atomic.Pointer[senders]
	startWorker sync.Once
	workerDone  chan struct{}

	// webhooks holds the subscriptions and their deliveries, and is the
	// events.Sink the stores emit into. webhookWorker delivers, on
	// goroutines of its own, started once by the first config's Start.
	webhooks      *webhook.Store
	webhookWorker *webhook.Worker
	startWebhooks sync.Once
	webhooksDone  chan struct{}

	// startRates starts the exchange of rate-limit counts with other
	// instances (a shared database only), which stopRates ends.
	startRates sync.Once
	stopRates  chan struct{}
	ratesDone  chan struct{}

	// stopFollow ends keys.Follow, the following of other instances'
	// key changes on a shared database; followDone closes when it has.
	stopFollow context.CancelFunc
	followDone chan struct{}

	// delivering, deliveringWebhooks and following are true while the
	// notification worker, the webhook worker and the key follower run:
	// what readiness reads, from any goroutine.
	delivering         atomic.Bool
	deliveringWebhooks atomic.Bool
	following          atomic.Bool
}

// keyResync is how often the keys are read again whole from a shared
// database, in case a change notification was lost; the notifications
// themselves bring changes within a second.
const keyResync = 30 * time.Second

// openState opens the database of storage and loads what lives in
// memory: the keys, the templates, the outbox.
func openState(storage Storage, dataDir, masterKeyPath string, sendTimeout time.Duration, logger *zap.Logger) (*state, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	masterKey, err := seal.LoadOrCreateMasterKey(masterKeyPath)
	if err != nil {
		return nil, err
	}
	sealer, err := seal.New(masterKey)
	if err != nil {
		return nil, err
	}
	stores, err := storage.OpenStores(StorageEnv{DataDir: dataDir, MasterKey: masterKey, Logger: logger})
	if err != nil {
		return nil, err
	}
	s := &state{stores: stores, masterKeyPath: masterKeyPath, masterKey: masterKey, sealer: sealer, logger: logger}
	if err := boltdb.Guard(stores.Where, s.load); err != nil {
		stores.DB.Close()
		return nil, err
	}
	// A process killed while writing an .eml file left it under its
	// temporary name; its message is still queued and will be written
	// again. The data_dir is this process's and the worker has not
	// started, so nothing writes there now.
	mailDir := filepath.Join(dataDir, "mail")
	if n, err := notify.RemoveEMLLeftovers(mailDir); err != nil {
		logger.Warn("removing temporary mail files", zap.Error(err))
	} else if n > 0 {
		logger.Info("removed temporary mail files left by a crash", zap.String("dir", mailDir), zap.Int("files", n))
	}
	s.newWorker(sendTimeout, logger)
	s.follow(logger)
	// Nothing waits to be written yet: the usage flush lag starts here.
	metrics.usageFlushed.SetToCurrentTime()
	logger.Info("database opened", zap.String("storage", stores.DB.Backend()), zap.String("database", stores.Where),
		zap.Int("contracts_keys", s.keys.Count(access.ServiceContracts)), zap.Int("share_keys", s.keys.Count(access.ServiceShare)))
	return s, nil
}

// follow keeps the keys in step with other instances' changes (only a
// shared database reports them).
func (s *state) follow(logger *zap.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopFollow, s.followDone = cancel, make(chan struct{})
	s.following.Store(true)
	go func() {
		defer close(s.followDone)
		defer s.following.Store(false)
		s.keys.Follow(ctx, keyResync, func(err error) {
			logger.Warn("following key changes of other instances", zap.Error(err))
		})
	}()
}

// load reads the keys, the templates and the outbox into memory.
func (s *state) load() (err error) {
	if s.keys, err = keystore.Open(s.stores.Keys, s.sealer, nil); err != nil {
		return fmt.Errorf("loading keys: %w", err)
	}
	if s.templates, err = contracts.NewTemplates(s.stores.DB, s.stores.Templates); err != nil {
		return fmt.Errorf("loading templates: %w", err)
	}
	if s.outbox, err = notify.NewOutbox(s.stores.DB, s.stores.Outbox, s.sealer); err != nil {
		return fmt.Errorf("opening the outbox: %w", err)
	}
	if s.webhooks, err = webhook.NewStore(webhook.Config{DB: s.stores.DB, Backend: s.stores.Webhooks, Sealer: s.sealer}); err != nil {
		return fmt.Errorf("opening the webhooks: %w", err)
	}
	s.keys.EmitTo(s.webhooks) // key.disabled
	s.idempotency, err = idempotency.NewStore(idempotency.Config{DB: s.stores.DB, Backend: s.stores.Idempotency,
		Sealer: s.sealer, Logger: s.logger.Named("idempotency")})
	return err
}

// flush writes pending usage counts and refreshes the key gauges.
func (s *state) flush(logger *zap.Logger) {
	start := time.Now()
	if _, err := s.keys.FlushUsage(); err != nil {
		logger.Error("flushing key usage", zap.Error(err))
	} else {
		metrics.usageFlushed.SetToCurrentTime()
	}
	metrics.usageFlush.Observe(time.Since(start).Seconds())
	s.updateKeyGauges()
}

func (s *state) updateKeyGauges() {
	for _, svc := range []access.Service{access.ServiceContracts, access.ServiceShare} {
		metrics.keys.WithLabelValues(string(svc)).Set(float64(s.keys.Count(svc)))
	}
}

// startRateSync exchanges rate-limit counts with the other instances
// every interval, once per process and database.
func (s *state) startRateSync(interval time.Duration) {
	s.startRates.Do(func() {
		s.stopRates, s.ratesDone = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(s.ratesDone)
			t := time.NewTicker(interval)
			defer t.Stop()
			failing := false
			for {
				select {
				case <-s.stopRates:
					return
				case now := <-t.C:
					err := s.keys.SyncRates(now)
					switch {
					case err != nil && !failing:
						// Once per outage: the limits go on from memory.
						s.logger.Warn("sharing rate-limit counts with other instances", zap.Error(err))
					case err == nil && failing:
						s.logger.Info("sharing rate-limit counts again")
					}
					failing = err != nil
				}
			}
		}()
	})
}

// Destruct stops delivery, flushes what is pending and closes the
// database, when the last config using it goes away.
func (s *state) Destruct() error {
	s.stopFollow()
	<-s.followDone
	if s.stopRates != nil {
		close(s.stopRates)
		<-s.ratesDone
	}
	s.stopWorker()
	s.stopWebhookWorker()
	// Unspent quota blocks go back for other instances to spend.
	if n, err := s.keys.ReturnQuota(); err != nil {
		s.logger.Warn("giving back unspent quota blocks", zap.Error(err))
	} else if n > 0 {
		s.logger.Info("gave back unspent quota", zap.Int64("units", n))
	}
	if _, err := s.keys.FlushUsage(); err != nil {
		s.stores.DB.Close()
		return err
	}
	return s.stores.DB.Close()
}

// provisionAPIs builds the APIs of one config on the shared database.
// Their stores hold nothing that must outlive the config but pending share
// openings, which the app flushes when it stops.
func (s *state) provisionAPIs(a *App) error {
	s.updateKeyGauges()
	var err error
	if a.signer, err = s.buildSigner(a); err != nil {
		return err
	}
	lifecycle, err := signing.New(contracts.Config{
		DB:               s.stores.DB,
		Backend:          s.stores.Contracts,
		Templates:        s.templates,
		Pages:            a.host,
		Sealer:           s.sealer,
		PublicBaseURL:    a.PublicBaseURL,
		ContractValidity: time.Duration(a.ContractValidity),
		SMSConfigured:    a.SMS != nil,
		Logger:           a.logger.Named("contracts"),
		Events:           s.webhooks,
		Idempotency:      s.idempotency,
	}, signing.Config{
		Outbox:   s.outbox,
		Backend:  s.stores.Signing,
		OTPKey:   s.derivedKey("keygate signing one-time password v1"),
		Seal:     sealFunc(a.signer, a.logger.Named("documents")),
		Sealed:   sealedFunc(s.stores.SealedDocuments),
		SealWait: docseal.TimestampTimeout,
	})
	if err != nil {
		return err
	}
	cs := lifecycle.Contracts()
	ss, err := share.NewStore(share.Config{
		Host:          a.host,
		DB:            s.stores.DB,
		Backend:       s.stores.Shares,
		PublicBaseURL: a.PublicBaseURL,
		CookieKey:     s.derivedKey("keygate share unlock cookie v1"),
		Logger:        a.logger.Named("share"),
		Events:        s.webhooks,
		Idempotency:   s.idempotency,
	})
	if err != nil {
		return err
	}
	a.shares = ss
	a.contracts = cs
	a.contractsAPI = contracts.NewHandler(cs)
	a.signingPages = lifecycle.Handler()
	a.signing = lifecycle
	a.shareAPI = share.NewHandler(ss)
	a.shareViewer = share.NewViewer(ss, a.host)
	return nil
}

// derivedKey is a key for one purpose derived from the master key, so
// that no two uses share a key.
func (s *state) derivedKey(purpose string) []byte {
	m := hmac.New(sha256.New, s.masterKey)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}
