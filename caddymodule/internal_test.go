package caddymodule

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// TestMain lets the test binary play a second gateway process that opens
// a database file another process holds.
func TestMain(m *testing.M) {
	if path := os.Getenv("KEYGATE_TEST_OPEN_DB"); path != "" {
		start := time.Now()
		_, err := openState(BoltStorage{}, filepath.Dir(path), filepath.Join(filepath.Dir(path), "master.key"), 0, zap.NewNop())
		fmt.Printf("elapsed=%s err=%v\n", time.Since(start).Round(time.Millisecond), err)
		if err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	code := pgtest.Main(m)
	// Mismatches with the OpenAPI documents that no test reported (a
	// request made after its test's gateway stopped) fail the run.
	if openapitest.CheckUnreported(os.Stderr) && code == 0 {
		code = 1
	}
	os.Exit(code)
}

func TestSecondProcessFailsClearly(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "webapi.db")
	s, err := openState(BoltStorage{}, dir, filepath.Join(dir, "master.key"), 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destruct()

	// os.Executable, not os.Args[0]: caddytest sets os.Args.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEYGATE_TEST_OPEN_DB="+db)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 3 {
		t.Fatalf("second process: %v, output %s", err, out)
	}
	if !strings.Contains(string(out), "locked by another process") || !strings.Contains(string(out), db) {
		t.Errorf("unclear message: %s", out)
	}
	if elapsed > 10*time.Second {
		// Not a timing assertion of our code: the lock wait is bounded at
		// 5 s, this only catches a wait that never ends.
		t.Errorf("second process took %s", elapsed)
	}
}

func TestMasterKeyFileMode(t *testing.T) {
	dir := t.TempDir()
	s, err := openState(BoltStorage{}, dir, filepath.Join(dir, "keys", "master.key"), 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destruct()
	fi, err := os.Stat(filepath.Join(dir, "keys", "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Errorf("master key file mode %v size %d", fi.Mode().Perm(), fi.Size())
	}
}

// TestSendersAcrossReloads: a config that stops while its senders are
// installed (a reload that failed after it started) puts back the senders
// of the config still running; a config replaced normally changes nothing.
func TestSendersAcrossReloads(t *testing.T) {
	dir := t.TempDir()
	s, err := openState(BoltStorage{}, dir, filepath.Join(dir, "master.key"), 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destruct()
	a, b, c := &senders{}, &senders{}, &senders{}

	prevA := s.useSenders(a) // first config
	prevB := s.useSenders(b) // reload: b starts, then a stops
	s.dropSenders(a, prevA)
	if s.senders.Load() != b {
		t.Fatal("stopping the replaced config took its successor's senders away")
	}
	prevC := s.useSenders(c) // a reload that fails after c started
	s.dropSenders(c, prevC)
	if s.senders.Load() != b {
		t.Fatal("a failed reload left its senders installed")
	}
	_ = prevB
}

// TestBadOptionOpensNothing: a config whose webapi app has a bad option
// is refused before the database is opened: no data file appears, and
// the error names the option.
func TestBadOptionOpensNothing(t *testing.T) {
	for _, tc := range []struct {
		name, app, want string
	}{
		{"smtp tls", `"smtp": {"address": "127.0.0.1:25", "from": "a@example.com", "tls": "bogus"}`, "smtp tls"},
		{"smtp without from", `"smtp": {"address": "127.0.0.1:25"}`, "smtp needs an address and a from"},
		{"sms without url", `"sms": {}`, "sms needs a URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := fmt.Sprintf(`{"admin": {"disabled": true}, "apps": {"webapi": {"data_dir": %q, "allow_shared_ports": true, %s}}}`, dir, tc.app)
			var c caddy.Config
			if err := json.Unmarshal([]byte(cfg), &c); err != nil {
				t.Fatal(err)
			}
			err := caddy.Validate(&c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("the data directory holds %d entries (%s...): the database was opened", len(entries), entries[0].Name())
			}
		})
	}
}
