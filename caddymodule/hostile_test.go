package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/keygate/keygate/caddymodule"
)

// The default Caddyfile adapts, and its server keeps the timeouts that cut
// slow clients off and the catch-all's security headers: an edit that
// drops them fails here rather than silently.
func TestDefaultCaddyfileTimeouts(t *testing.T) {
	raw, err := os.ReadFile("../Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		t.Fatal("no caddyfile adapter")
	}
	out, warnings, err := adapter.Adapt(raw, map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %+v", warnings)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					ReadTimeout       time.Duration   `json:"read_timeout"`
					ReadHeaderTimeout time.Duration   `json:"read_header_timeout"`
					WriteTimeout      time.Duration   `json:"write_timeout"`
					IdleTimeout       time.Duration   `json:"idle_timeout"`
					Routes            json.RawMessage `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Apps.HTTP.Servers) == 0 {
		t.Fatalf("no servers in %s", out)
	}
	for name, srv := range cfg.Apps.HTTP.Servers {
		for _, c := range []struct {
			what      string
			got, want time.Duration
		}{
			{"read_header", srv.ReadHeaderTimeout, 10 * time.Second},
			{"read_body", srv.ReadTimeout, 30 * time.Second},
			{"write", srv.WriteTimeout, 60 * time.Second},
			{"idle", srv.IdleTimeout, 2 * time.Minute},
		} {
			if c.got != c.want {
				t.Errorf("server %s: %s timeout %v, want %v", name, c.what, c.got, c.want)
			}
		}
		if !hostileHasHeaders(srv.Routes) {
			t.Errorf("server %s: the catch-all sets no X-Content-Type-Options / X-Frame-Options", name)
		}
	}
}

// hostileHasHeaders reports whether a headers handler in routes sets both
// nosniff and DENY.
func hostileHasHeaders(routes json.RawMessage) bool {
	var found func(v any) bool
	found = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if set, ok := v["set"].(map[string]any); ok {
				n, _ := set["X-Content-Type-Options"].([]any)
				f, _ := set["X-Frame-Options"].([]any)
				if len(n) == 1 && n[0] == "nosniff" && len(f) == 1 && f[0] == "DENY" {
					return true
				}
			}
			for _, x := range v {
				if found(x) {
					return true
				}
			}
		case []any:
			for _, x := range v {
				if found(x) {
					return true
				}
			}
		}
		return false
	}
	var v any
	_ = json.Unmarshal(routes, &v)
	return found(v)
}

// TestDefaultCaddyfileWebhookTargets: the shipped Caddyfile lets webhooks
// reach public addresses only, unless KEYGATE_WEBHOOK_ALLOW_NETWORKS
// lists networks.
func TestDefaultCaddyfileWebhookTargets(t *testing.T) {
	raw, err := os.ReadFile("../Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	allowed := func() []string {
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(raw, map[string]any{"filename": "Caddyfile"})
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Apps struct {
				WebAPI caddymodule.App `json:"webapi"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Apps.WebAPI.WebhookAllowNetworks
	}
	for env, want := range map[string]string{"": "[]", "127.0.0.1/32": "[127.0.0.1/32]", "10.20.0.0/16 ::1/128": "[10.20.0.0/16 ::1/128]"} {
		t.Setenv("KEYGATE_WEBHOOK_ALLOW_NETWORKS", env)
		if got := fmt.Sprint(allowed()); got != want {
			t.Errorf("KEYGATE_WEBHOOK_ALLOW_NETWORKS=%q: %s, want %s", env, got, want)
		}
	}
}
