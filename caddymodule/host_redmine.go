package caddymodule

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/host/redmine"
)

func init() {
	caddy.RegisterModule(RedmineHost{})
}

// HostModule is a webapi.hosts.* guest module: the issue tracker the
// APIs stand on (at most one per gateway). Another platform is one more
// module of the namespace.
type HostModule interface {
	// Host is the connector, ready to call.
	Host() host.Host
	// Cache is how long an item read from the tracker is reused.
	CacheFor() time.Duration
}

// RedmineHost connects the gateway to a Redmine (webapi.hosts.redmine):
//
//	host redmine {
//		url http://redmine.internal:3000
//		api_key_file /etc/keygate/redmine.key
//		cache 30s
//		timeout 5s
//		text_formatting common_mark
//	}
type RedmineHost struct {
	// URL is Redmine's base address.
	URL string `json:"url,omitempty"`
	// APIKeyFile holds the API key of keygate's own Redmine account. A
	// secret comes only from a file: the config (and the admin API's
	// /config/) names the file, never the key.
	APIKeyFile string `json:"api_key_file,omitempty"`
	// Cache is how long an item read from Redmine is reused; 0 reads
	// every time. Default 30s.
	Cache *caddy.Duration `json:"cache,omitempty"`
	// Timeout bounds one call to Redmine. Default 5s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// TextFormatting is Redmine's text formatting setting: common_mark
	// (the default) or textile; descriptions and comments are read as
	// that markup.
	TextFormatting string `json:"text_formatting,omitempty"`

	host host.Host
}

// defaultHostCache is how long an item read from the tracker is reused
// when the config does not say.
const defaultHostCache = 30 * time.Second

// CaddyModule returns the Caddy module information.
func (RedmineHost) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "webapi.hosts.redmine",
		New: func() caddy.Module { return new(RedmineHost) },
	}
}

// Provision reads the API key from its file and makes the connector.
func (h *RedmineHost) Provision(ctx caddy.Context) error {
	if h.APIKeyFile == "" {
		return errors.New("host redmine: api_key_file is required (the key of keygate's Redmine account, in a file)")
	}
	b, err := os.ReadFile(h.APIKeyFile)
	if err != nil {
		// The path is the operator's; the error never holds the content.
		return fmt.Errorf("host redmine: reading api_key_file: %w", err)
	}
	if fi, err := os.Stat(h.APIKeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		ctx.Logger().Warn("host redmine: api_key_file can be read by other users of this machine; make it 0600",
			zap.String("api_key_file", h.APIKeyFile), zap.String("mode", fi.Mode().Perm().String()))
	}
	if h.Timeout <= 0 {
		h.Timeout = caddy.Duration(5 * time.Second)
	}
	r, err := redmine.New(redmine.Config{
		URL:     h.URL,
		APIKey:  strings.TrimSpace(string(b)),
		Timeout: time.Duration(h.Timeout),
		Markup:  h.TextFormatting,
		Observe: observeHostCall,
	})
	if err != nil {
		return fmt.Errorf("host %w", err)
	}
	h.host = r
	return nil
}

// Validate checks the options.
func (h *RedmineHost) Validate() error {
	switch h.TextFormatting {
	case "", "common_mark", "textile", "none":
	default:
		return fmt.Errorf("host redmine: text_formatting must be common_mark, textile or none, not %q", h.TextFormatting)
	}
	if h.Cache != nil && *h.Cache < 0 {
		return errors.New("host redmine: cache must be 0 or more")
	}
	return nil
}

// Host implements HostModule.
func (h *RedmineHost) Host() host.Host { return h.host }

// CacheFor implements HostModule.
func (h *RedmineHost) CacheFor() time.Duration {
	if h.Cache == nil {
		return defaultHostCache
	}
	return time.Duration(*h.Cache)
}

// observeHostCall counts one call to the tracker in the metrics.
func observeHostCall(outcome string, d time.Duration) {
	metrics.hostRequests.WithLabelValues(outcome).Inc()
	metrics.hostDuration.Observe(d.Seconds())
}

// UnmarshalCaddyfile reads the host block after `host redmine`.
func (h *RedmineHost) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch d.Val() {
		case "url":
			err = oneArg(d, &h.URL)
		case "api_key_file":
			err = oneArg(d, &h.APIKeyFile)
		case "text_formatting":
			err = oneArg(d, &h.TextFormatting)
		case "timeout", "cache":
			name := d.Val()
			var s string
			if err = oneArg(d, &s); err != nil {
				break
			}
			dur, perr := caddy.ParseDuration(s)
			if perr != nil {
				return d.Errf("host redmine: %s %q: %v", name, s, perr)
			}
			if name == "timeout" {
				h.Timeout = caddy.Duration(dur)
			} else {
				c := caddy.Duration(dur)
				h.Cache = &c
			}
		default:
			return d.Errf("unknown host redmine option %q", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*RedmineHost)(nil)
	_ caddy.Validator       = (*RedmineHost)(nil)
	_ caddyfile.Unmarshaler = (*RedmineHost)(nil)
	_ HostModule            = (*RedmineHost)(nil)
)
