// Package caddymodule is everything of keygate that speaks Caddy: the
// webapi app, the HTTP handlers, Caddyfile parsing, the admin API, the
// `caddy webapi` command and metrics. The packages it wires in (keystore,
// upstreams/*) know nothing of Caddy.
package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/keygate/keygate/caddymodule/auditlog"
	"github.com/keygate/keygate/caddymodule/bufferedfile"
	"github.com/keygate/keygate/internal/docseal"
	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/webhook"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
	"github.com/keygate/keygate/upstreams/signing"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the `webapi` app: it owns the database (its storage module's),
// the key store and the background work (usage flush, expiry sweep,
// notification delivery). The database, key store and delivery worker
// outlive config reloads: they sit in a usage pool keyed by the storage's
// PoolKey (the bbolt file's path, or PostgreSQL's server and schema).
type App struct {
	// DataDir holds webapi.db, master.key and mail/. Default ./data.
	DataDir string `json:"data_dir,omitempty"`
	// MasterKeyFile holds the 32-byte AES-256-GCM master key that seals
	// tokens for reveal; created with mode 0600 on first start. Default
	// <data_dir>/master.key.
	MasterKeyFile string `json:"master_key_file,omitempty"`
	// PublicBaseURL is how clients reach this gateway, for links it hands
	// out (signing pages, share pages). Default http://localhost:8080.
	PublicBaseURL string `json:"public_base_url,omitempty"`
	// UsageFlushInterval is how often usage counts are written. Default 1s.
	UsageFlushInterval caddy.Duration `json:"usage_flush_interval,omitempty"`
	// ContractValidity is a contract's lifetime when the create request
	// names no expirationTimestamp. Default 168h.
	ContractValidity caddy.Duration `json:"contract_validity,omitempty"`
	// StorageRaw is where the data lives: a webapi.storage.* module,
	// `bolt` (the file <data_dir>/webapi.db) when absent.
	StorageRaw json.RawMessage `json:"storage,omitempty" caddy:"namespace=webapi.storage inline_key=module"`
	// HostRaw is the issue tracker the APIs stand on: a webapi.hosts.*
	// module (`redmine`), at most one. Without it, share pages show the
	// share's own settings and say that no issue tracker is connected.
	HostRaw json.RawMessage `json:"host,omitempty" caddy:"namespace=webapi.hosts inline_key=module"`
	// SMTP delivers e-mail; without it, mail is written as .eml files to
	// <data_dir>/mail/.
	SMTP *SMTPConfig `json:"smtp,omitempty"`
	// SMS is the HTTP shipper for one-time passwords by SMS.
	SMS *SMSConfig `json:"sms,omitempty"`
	// SendTimeout bounds one delivery attempt of a notification. Where
	// instances share a database, a message taken by an instance that
	// died is sent by another once this and a margin (as long, at most
	// 30 s) have passed. Default 2m. Read when the database is opened,
	// not at a reload.
	SendTimeout caddy.Duration `json:"send_timeout,omitempty"`
	// WebhookTimeout bounds one webhook delivery attempt, connection and
	// reply. Default 15s. Read by the config that starts first, not at a
	// reload.
	WebhookTimeout caddy.Duration `json:"webhook_timeout,omitempty"`
	// WebhookAllowNetworks are networks (CIDR, or single addresses) that
	// webhook deliveries may reach beyond the public unicast addresses:
	// an internal receiver's 10.20.0.0/16, or 127.0.0.0/8 and ::1/128
	// for one on this machine. The addresses this gateway serves (its
	// admin endpoint and listeners) stay refused whatever this says.
	WebhookAllowNetworks []string `json:"webhook_allow_networks,omitempty"`
	// KeyExpiryWarning is how long before a key's notValidAfter the
	// webhook event key.expiring is sent, once per key and end of
	// validity. Default 168h (7 days).
	KeyExpiryWarning caddy.Duration `json:"key_expiry_warning,omitempty"`
	// RateLimitSync is how often instances that share a PostgreSQL
	// database exchange their rate-limit counts: each instance checks
	// limits from memory, and learns what the others let through at
	// this pace. Default 100ms. Read by the config that starts first,
	// not at a reload; bbolt (one process) has nothing to exchange.
	RateLimitSync caddy.Duration `json:"rate_limit_sync,omitempty"`
	// DocumentSeal is the certificate that seals completed contracts'
	// documents: the operator's PKCS#12 file, or by default one the
	// gateway makes at first start and keeps in the database.
	DocumentSeal *DocumentSealConfig `json:"document_seal,omitempty"`
	// AllowSharedPorts lets this gateway start on an address that
	// another process serves too, which it refuses by default: Caddy
	// listens with SO_REUSEPORT, so the kernel would split the
	// connections between the two. For a hand-over to a new binary on
	// one PostgreSQL database, where both run for a while on purpose.
	AllowSharedPorts bool `json:"allow_shared_ports,omitempty"`

	ctx           caddy.Context
	allowNetworks []netip.Prefix
	storage       Storage
	host          host.Host // nil: no tracker connected
	state         *state
	contractsAPI  http.Handler
	signingPages  http.Handler
	// signing is the lifecycle behind signingPages, whose completions'
	// documents are sealed in the background.
	signing     *signing.Service
	shareAPI    http.Handler
	shareViewer http.Handler
	contracts   *contracts.Store
	shares      *share.Store
	senders     *senders
	replaced    *senders // the senders installed before ours
	signer      *docseal.Signer
	poolKey     string
	logger      *zap.Logger
	audit       *auditlog.Log
	stop        chan struct{}
	stopped     chan struct{}
	// readiness answers /readyz for this config.
	readiness *readiness
	// lastExpiryScan is when sweep last looked for keys about to expire
	// and lastUsagePurge when it last purged old hourly usage (the
	// background goroutine's only).
	lastExpiryScan time.Time
	// lastSealWarning is when sweep last warned that the seal
	// certificate is about to expire: once a day in its last 30.
	lastSealWarning time.Time
	lastUsagePurge  time.Time
}

// SMTPConfig is the `smtp` block of the webapi global option.
type SMTPConfig struct {
	// Address is host:port of the mail server.
	Address string `json:"address,omitempty"`
	// Username for SMTP AUTH; none when empty.
	Username string `json:"username,omitempty"`
	// PasswordFile holds the SMTP password (never inline in config).
	PasswordFile string `json:"password_file,omitempty"`
	// From is the sender, for example "Contracts <contracts@example.com>".
	From string `json:"from,omitempty"`
	// TLS is starttls (default), implicit or none.
	TLS string `json:"tls,omitempty"`
}

// SMSConfig is the `sms` block of the webapi global option.
type SMSConfig struct {
	// URL receives POST {"to","from","text"} with the bearer token.
	URL string `json:"url,omitempty"`
	// TokenFile holds the shipper's bearer token.
	TokenFile string `json:"token_file,omitempty"`
	// From is the sender number.
	From string `json:"from,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "webapi",
		New: func() caddy.Module { return new(App) },
	}
}

const (
	defaultDataDir            = "./data"
	defaultPublicBaseURL      = "http://localhost:8080"
	defaultUsageFlushInterval = time.Second
	defaultContractValidity   = 168 * time.Hour
	defaultKeyExpiryWarning   = 168 * time.Hour
	defaultRateLimitSync      = 100 * time.Millisecond
	// usagePurgeInterval spaces the purges of hourly usage older than
	// 90 days.
	usagePurgeInterval = time.Hour
	// expiryScanInterval spaces the scans for keys about to expire: each
	// reads every key in memory.
	expiryScanInterval = time.Second
)

// Provision opens (or joins) the shared database and key store.
func (a *App) Provision(ctx caddy.Context) error {
	a.readiness = &readiness{app: a}
	a.ctx = ctx
	a.logger = ctx.Logger()
	var err error
	if a.allowNetworks, err = parseNetworks(a.WebhookAllowNetworks); err != nil {
		return err
	}
	// What is cheap to check is checked before the database is opened:
	// Caddy calls Validate only after Provision, which a bad option would
	// otherwise reach having opened (and, on bbolt, locked) the database.
	if err := a.Validate(); err != nil {
		return err
	}
	// The admin endpoint, which Caddy opened before provisioning, is
	// checked before the database is opened (a bbolt file another
	// gateway holds takes 5 s to refuse): the shorter the time two
	// processes answer on one address, the better. Start checks again,
	// with the HTTP listeners.
	if !a.AllowSharedPorts {
		admin, err := servedAddrs(ctx, false)
		if err != nil {
			return err
		}
		if err := refuseSharedPorts(admin, a.logger); err != nil {
			return err
		}
	}
	a.audit = auditlog.New(a.logger.Named("audit"))
	if a.DataDir == "" {
		a.DataDir = defaultDataDir
	}
	if a.MasterKeyFile == "" {
		a.MasterKeyFile = filepath.Join(a.DataDir, "master.key")
	}
	if a.PublicBaseURL == "" {
		a.PublicBaseURL = defaultPublicBaseURL
	}
	a.PublicBaseURL = strings.TrimRight(a.PublicBaseURL, "/")
	if a.UsageFlushInterval <= 0 {
		a.UsageFlushInterval = caddy.Duration(defaultUsageFlushInterval)
	}
	if a.ContractValidity <= 0 {
		a.ContractValidity = caddy.Duration(defaultContractValidity)
	}
	if a.KeyExpiryWarning <= 0 {
		a.KeyExpiryWarning = caddy.Duration(defaultKeyExpiryWarning)
	}
	if a.RateLimitSync <= 0 {
		a.RateLimitSync = caddy.Duration(defaultRateLimitSync)
	}
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	if a.HostRaw != nil {
		mod, err := ctx.LoadModule(a, "HostRaw")
		if err != nil {
			return fmt.Errorf("loading host module: %w", err)
		}
		hm := mod.(HostModule)
		a.host = host.Cached(hm.Host(), hm.CacheFor(), nil)
	}
	a.storage = new(BoltStorage)
	if a.StorageRaw != nil {
		mod, err := ctx.LoadModule(a, "StorageRaw")
		if err != nil {
			return fmt.Errorf("loading storage module: %w", err)
		}
		a.storage = mod.(Storage)
	}
	poolKey, err := a.storage.PoolKey(a.DataDir)
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(a.DataDir)
	if err != nil {
		return err
	}
	keyPath, err := filepath.Abs(a.MasterKeyFile)
	if err != nil {
		return err
	}
	val, _, err := states.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		return openState(a.storage, dataDir, keyPath, time.Duration(a.SendTimeout), a.logger)
	})
	if err != nil {
		return err
	}
	a.poolKey = poolKey
	a.state = val.(*state)
	a.audit.RedactPath = a.state.keys.RedactPath
	if a.state.masterKeyPath != keyPath {
		return fmt.Errorf("master_key_file changed from %s to %s: the database stays open across reloads, so restart to change it", a.state.masterKeyPath, keyPath)
	}
	if a.senders, err = a.buildSenders(); err != nil {
		return err
	}
	return a.state.provisionAPIs(a)
}

// Validate checks the config.
func (a *App) Validate() error {
	if a.SMTP != nil {
		switch a.SMTP.TLS {
		case "", "starttls", "implicit", "none":
		default:
			return fmt.Errorf("smtp tls must be starttls, implicit or none, not %q", a.SMTP.TLS)
		}
		if a.SMTP.Address == "" || a.SMTP.From == "" {
			return errors.New("smtp needs an address and a from")
		}
	}
	if a.SMS != nil && a.SMS.URL == "" {
		return errors.New("sms needs a URL")
	}
	return nil
}

// Start refuses addresses that another process serves, makes this
// config's senders and webhook targets the ones in use and runs the
// background work: usage flush and expiry sweep.
func (a *App) Start() error {
	served, err := servedAddrs(a.ctx, true)
	if err != nil {
		return err
	}
	if !a.AllowSharedPorts {
		if err := refuseSharedPorts(served, a.logger); err != nil {
			return err
		}
	}
	a.state.webhooks.SetTargets(&webhook.Targets{Allow: a.allowNetworks, Self: selfAddrs(served)})
	a.replaced = a.state.useSenders(a.senders)
	a.state.startWebhookWorker(time.Duration(a.WebhookTimeout))
	a.state.startRateSync(time.Duration(a.RateLimitSync))
	a.audit.Start()
	a.stop, a.stopped = make(chan struct{}), make(chan struct{})
	a.readiness.sweeping.Store(true)
	go a.background(a.stop, a.stopped)
	ready.Store(a)
	a.announce(a.stop)
	return nil
}

// Stop ends the background work and flushes what is pending, so no usage
// is lost on a reload or shutdown.
func (a *App) Stop() error {
	ready.CompareAndSwap(a, nil)
	if a.stop != nil {
		close(a.stop)
		<-a.stopped
		a.stop = nil
	}
	a.flush()
	a.auditUnaudited(time.Now(), true)
	a.audit.Close()
	// Down to the file: at a process's exit Caddy may not close the log's
	// writer, and a buffered one would keep the last entries.
	bufferedfile.SyncAll()
	a.state.dropSenders(a.senders, a.replaced)
	return nil
}

// flush writes what the hot path keeps in memory: key usage and share
// openings.
func (a *App) flush() {
	a.state.flush(a.logger)
	if err := a.shares.Flush(); err != nil {
		a.logger.Error("flushing share openings", zap.Error(err))
	}
}

// Cleanup releases this config's hold on the shared state; the last one
// closes the database.
func (a *App) Cleanup() error {
	if a.poolKey == "" {
		return nil
	}
	// Documents being sealed are stored before the database may close;
	// one still waiting on a timestamp authority past sealDrain stays
	// queued, for the next start.
	if a.signing != nil {
		a.signing.StopSealing()
		drained := make(chan struct{})
		go func() { a.signing.WaitSealing(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(sealDrain):
			a.logger.Warn("documents still being sealed at shutdown stay queued; the next start seals them")
		}
	}
	// Apps stop in no set order, so requests may still have counted share
	// openings after Stop; every app has stopped by now.
	if a.shares != nil {
		if err := a.shares.Flush(); err != nil {
			a.logger.Error("flushing share openings", zap.Error(err))
		}
	}
	_, err := states.Delete(a.poolKey)
	return err
}

// sealDrain bounds how long a stopping config waits for the seals under
// way to end (each stops at its next step once StopSealing ran; one may
// still wait on its timestamp authority).
const sealDrain = docseal.TimestampTimeout + 2*time.Second

func (a *App) background(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	defer a.readiness.sweeping.Store(false)
	t := time.NewTicker(time.Duration(a.UsageFlushInterval))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			a.flush()
			a.sweep()
		}
	}
}

// sweepBatch bounds the contracts one sweep writes down, so a backlog
// becomes several short write transactions, one per tick.
const sweepBatch = 1000

// sweep writes down the expiry of contracts whose time has come and
// purges the idempotency records whose 24 h have passed. Reads already
// show the contracts expired and ignore the records; with nothing due
// each costs one read transaction.
func (a *App) sweep() {
	if _, err := a.contracts.SweepExpired(context.Background(), sweepBatch); err != nil {
		a.logger.Error("sweeping expired contracts", zap.Error(err))
	}
	if _, err := a.state.idempotency.Purge(context.Background(), sweepBatch); err != nil {
		a.logger.Error("purging expired idempotency records", zap.Error(err))
	}
	if now := time.Now(); now.Sub(a.lastExpiryScan) >= expiryScanInterval {
		a.lastExpiryScan = now
		if _, err := a.state.keys.WarnExpiring(now, time.Duration(a.KeyExpiryWarning)); err != nil {
			a.logger.Error("sending key.expiring", zap.Error(err))
		}
	}
	a.auditUnaudited(time.Now(), false)
	a.warnSealExpiry(time.Now())
	// Completions whose documents no instance sealed (a crash, a seal
	// that failed): in the background, never holding up this tick.
	a.signing.SealQueued(sweepBatch)
	if now := time.Now(); now.Sub(a.lastUsagePurge) >= usagePurgeInterval {
		a.lastUsagePurge = now
		if err := a.state.stores.Keys.PurgeUsage(context.Background(), now.Add(-keystore.UsageRetention)); err != nil {
			a.logger.Error("purging hourly key usage older than 90 days", zap.Error(err))
		}
	}
}

// auditUnaudited writes an entry for the rate-limit and quota refusals
// of each key that its once-a-second entries did not stand for (a flood
// that stopped): `key refused` with the reason and the count, without a
// request's method, path or address, which differ among them.
func (a *App) auditUnaudited(now time.Time, force bool) {
	a.state.keys.UnauditedRefusals(now, force, func(k *keystore.Key, reason string, n uint64) {
		consumer, plan := k.Scopes()
		a.audit.Add(auditlog.Record{
			ConsumerID: consumer,
			PlanID:     plan,
			At:         now,
			Msg:        "key refused",
			KeyID:      k.ID,
			KeyName:    k.Name,
			Owner:      k.Owner,
			Service:    string(k.Service),
			Operation:  "none",
			Status:     http.StatusTooManyRequests,
			Reason:     reason,
			Duration:   -1,
			Refusals:   n,
		})
	})
}

// parseNetworks reads webhook_allow_networks: CIDR prefixes, or single
// addresses.
func parseNetworks(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			ip, ipErr := netip.ParseAddr(s)
			if ipErr != nil {
				return nil, fmt.Errorf("webhook_allow_networks: %q is neither a CIDR prefix (10.20.0.0/16) nor an IP address", s)
			}
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
