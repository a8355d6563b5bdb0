// Package e2e holds the tests that run the real keygate binary as a
// separate process (internal/gatewayproc): crashes (kill -9 under load),
// faults (full disk, SMTP down, corrupt files), and the secrets sweep over
// everything a README flow leaves behind. They build bin/caddy once per
// test binary, in TestMain.
package e2e
