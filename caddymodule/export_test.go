package caddymodule

import (
	"os"
	"strconv"
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
