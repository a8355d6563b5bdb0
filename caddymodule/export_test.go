package caddymodule

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// Test ports: tests load configs into one in-process Caddy. Two test runs
// at once (two engineers, or CI beside a developer) pick other ports with
// KEYGATE_TEST_ADMIN_PORT and KEYGATE_TEST_SITE_PORT.
var (
	TestAdminPort = envPort("KEYGATE_TEST_ADMIN_PORT", 2999)
	TestSitePort  = envPort("KEYGATE_TEST_SITE_PORT", 9080)
)

func envPort(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// AdaptCaddyfile is adapt, for the external tests.
var AdaptCaddyfile = adapt

// adapt adapts the Caddyfile src to JSON. With wantErr, it expects an
// error holding wantErr and returns nil; else it fails on any error.
func adapt(t *testing.T, src, wantErr string) []byte {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
