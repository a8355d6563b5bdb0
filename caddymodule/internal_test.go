package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/spf13/cobra"
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

	// os.Executable, not os.Args[0]: the CLI tests set os.Args.
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

// runCLI runs `caddy webapi args...` against the test admin endpoint.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "webapi", SilenceUsage: true, SilenceErrors: true}
	setupWebapiCommand(root)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--address", fmt.Sprintf("localhost:%d", TestAdminPort)))
	err = root.Execute()
	return out.String(), errOut.String(), err
}

// cliGateway runs a gateway on the test ports, with data in dir, whose
// contracts site answers respond behind the key check: what the CLI
// tests talk to.
func cliGateway(t *testing.T, dir, respond string) {
	t.Helper()
	tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: TestAdminPort})
	tester.InitServer(fmt.Sprintf(`{
	admin localhost:%[2]d
	http_port %[3]d
	https_port %[4]d
	webapi {
		data_dir %[1]s
	}
}
http://localhost:%[3]d {
	handle /webapi/contracts* {
		webapi_auth contracts
		respond %[5]q
	}
}`, dir, TestAdminPort, TestSitePort, TestSitePort+363, respond), "caddyfile")
}

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	cliGateway(t, dir, "owner={http.webapi.key.owner}")

	token, _, err := runCLI(t, "keys", "create", "--service", "contracts", "--name", "ci", "--owner", "alice",
		"--privileges", "get,search,create", "--allowed-ips", "127.0.0.1,::1", "--description", "from the CLI")
	if err != nil {
		t.Fatal(err)
	}
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, "kg_") || len(token) != 53 || strings.Contains(token, "\n") {
		t.Fatalf("create printed %q, want the token alone", token)
	}

	list, _, err := runCLI(t, "keys", "list", "--service", "contracts")
	if err != nil || !strings.Contains(list, "ci") || !strings.Contains(list, "alice") || strings.Contains(list, token) {
		t.Fatalf("list: %v\n%s", err, list)
	}
	id := strings.Fields(strings.Split(list, "\n")[1])[0]

	revealed, _, err := runCLI(t, "keys", "reveal", id)
	if err != nil || strings.TrimSpace(revealed) != token {
		t.Fatalf("reveal: %v %q", err, revealed)
	}

	shown, _, err := runCLI(t, "keys", "update", id, "--name", "ci-2", "--privileges", "get", "--json")
	if err != nil || !strings.Contains(shown, `"name": "ci-2"`) || strings.Contains(shown, token) {
		t.Fatalf("update: %v %s", err, shown)
	}

	// disable and enable switch it off and on; show and list say which.
	for _, step := range []struct{ cmd, want string }{{"disable", "false"}, {"enable", "true"}} {
		_, said, err := runCLI(t, "keys", step.cmd, id)
		if err != nil || !strings.Contains(said, "key "+id+" "+step.cmd+"d") {
			t.Fatalf("keys %s: %v %q", step.cmd, err, said)
		}
		shown, _, err := runCLI(t, "keys", "show", id)
		if err != nil || !regexp.MustCompile(`(?m)^enabled:\s+`+step.want+`$`).MatchString(shown) {
			t.Fatalf("show after %s: %v\n%s", step.cmd, err, shown)
		}
		list, _, err := runCLI(t, "keys", "list")
		if err != nil || !regexp.MustCompile(`(?m)^`+id+`\s.*\s`+step.want+`\s+\d+\s`).MatchString(list) {
			t.Fatalf("list after %s: %v\n%s", step.cmd, err, list)
		}
	}
	// roll prints the new token alone; the old one works for --grace.
	rolledOut, _, err := runCLI(t, "keys", "roll", id, "--grace", "2h")
	rolled := strings.TrimSpace(rolledOut)
	if err != nil || !strings.HasPrefix(rolled, "kg_") || len(rolled) != 53 || rolled == token {
		t.Fatalf("keys roll: %v %q", err, rolledOut)
	}
	if shown, _, err := runCLI(t, "keys", "show", id); err != nil || !regexp.MustCompile(`(?m)^previous token until:\s+20`).MatchString(shown) {
		t.Fatalf("show after roll: %v\n%s", err, shown)
	}
	if revealed, _, err := runCLI(t, "keys", "reveal", id); err != nil || strings.TrimSpace(revealed) != rolled {
		t.Fatalf("reveal after roll: %v %q", err, revealed)
	}
	if _, _, err := runCLI(t, "keys", "roll", id, "--grace", "1500ms"); err == nil || !strings.Contains(err.Error(), "whole seconds") {
		t.Fatalf("roll --grace 1500ms: %v", err)
	}
	if _, _, err := runCLI(t, "keys", "roll", id, "--grace", "721h"); err == nil || !strings.Contains(err.Error(), "--grace 721h: from 0 to 30d") {
		t.Fatalf("roll --grace 721h: %v", err)
	}
	if _, _, err := runCLI(t, "keys", "disable", "00000000-0000-4000-8000-000000000000"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("disable an unknown key: %v", err)
	}

	_, _, err = runCLI(t, "keys", "create", "--service", "contracts", "--name", strings.Repeat("n", 41), "--owner", "bob", "--privileges", "get,fly")
	if err == nil || !strings.Contains(err.Error(), "name:") || !strings.Contains(err.Error(), "privileges[1]:") {
		t.Fatalf("bad create: %v", err)
	}

	body := filepath.Join(dir, "nda.txt")
	os.WriteFile(body, []byte("Both parties keep it secret."), 0o600)
	if _, _, err := runCLI(t, "templates", "add", "--id", "PAGE-7", "--collection", "LEGAL", "--title", "NDA", "--body-file", body); err != nil {
		t.Fatal(err)
	}
	tl, _, err := runCLI(t, "templates", "list", "--json")
	if err != nil || !strings.Contains(tl, "Both parties keep it secret.") {
		t.Fatalf("templates list: %v %s", err, tl)
	}
	if _, _, err := runCLI(t, "templates", "remove", "PAGE-7"); err != nil {
		t.Fatal(err)
	}

	if _, _, err := runCLI(t, "keys", "delete", id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "keys", "show", id); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("show deleted key: %v", err)
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
