package command_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// TestMigrateCommand runs `caddy webapi migrate` on the data directory of
// a gateway on bbolt, whose keys the CLI created: every bad invocation is
// refused with an error that says what to do, none prints the DSN's
// password, and a good one prints what it copied, once.
func TestMigrateCommand(t *testing.T) {
	dataDir := t.TempDir()
	cliGateway(t, dataDir, "ok")
	for _, args := range [][]string{
		{"--service", "contracts", "--name", "ci", "--privileges", "get"},
		{"--service", "share", "--name", "portal", "--privileges", "list"},
	} {
		if _, _, err := runCLI(t, append([]string{"keys", "create", "--owner", "alice"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}

	srv := pgtest.Shared(t)
	const password = "pw-Zq7-secret"
	u, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password) // the test server trusts loopback
	files := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(files, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dsnFile := file("dsn", u.String()+"\n")
	schema := srv.Schema(t)
	args := func(extra ...string) []string {
		return append([]string{"migrate", "--to", "postgres", "--dsn-file", dsnFile, "--data-dir", dataDir, "--schema", schema}, extra...)
	}
	unreachable := *u
	unreachable.Host = "127.0.0.1:1"
	otherKey := file("other.key", strings.Repeat("k", 32))
	os.Chmod(otherKey, 0o600)
	openKey := file("open.key", strings.Repeat("k", 32))
	os.Chmod(openKey, 0o644)

	// While the gateway holds the file.
	_, _, err = runCLI(t, args()...)
	if err == nil || !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("migrate of a running gateway's file: %v", err)
	}
	stopGateway(t)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no target", []string{"migrate", "--dsn-file", dsnFile, "--data-dir", dataDir}, "--to is required"},
		{"other target", []string{"migrate", "--to", "mysql", "--dsn-file", dsnFile}, `--to "mysql": postgres is the only target`},
		{"no dsn file", []string{"migrate", "--to", "postgres", "--data-dir", dataDir}, "--dsn-file is required"},
		{"argument", append(args(), "extra"), `unknown command "extra"`},
		{"missing dsn file", []string{"migrate", "--to", "postgres", "--dsn-file", filepath.Join(files, "nope")}, "reading --dsn-file"},
		{"empty dsn file", []string{"migrate", "--to", "postgres", "--dsn-file", file("empty", " \n")}, "is empty: it must hold the PostgreSQL DSN"},
		{"dsn that does not parse", []string{"migrate", "--to", "postgres", "--dsn-file", file("bad", "postgres://x:"+password+"@[::1/x")}, "does not parse as a libpq URL"},
		{"an unencoded '@' in the password", []string{"migrate", "--to", "postgres", "--dsn-file", file("at", "postgres://keygate:"+password+"@Zq9xW@127.0.0.1:5432/keygate")}, "percent-encode '@' as %40"},
		{"no database", []string{"migrate", "--to", "postgres", "--dsn-file", dsnFile, "--data-dir", t.TempDir(), "--master-key-file", otherKey}, "webapi.db: stat"},
		{"no master key", []string{"migrate", "--to", "postgres", "--dsn-file", dsnFile, "--data-dir", t.TempDir()}, "no master key at"},
		{"readable master key", args("--master-key-file", openKey), "chmod 600"},
		{"other master key", args("--master-key-file", otherKey), "does not open with this master key"},
		{"bad schema", []string{"migrate", "--to", "postgres", "--dsn-file", dsnFile, "--data-dir", dataDir, "--schema", "Bad-Name"}, "must be a lower-case identifier"},
		{"server down", []string{"migrate", "--to", "postgres", "--dsn-file", file("down", unreachable.String()), "--data-dir", dataDir, "--schema", schema}, "connecting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runCLI(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if stdout != "" {
				t.Errorf("a refused migrate printed %q", stdout)
			}
			for _, out := range []string{err.Error(), stdout, stderr} {
				if strings.Contains(out, password) || strings.Contains(out, "Zq9xW") {
					t.Errorf("the DSN's password is shown: %q", out)
				}
			}
		})
	}

	stdout, stderr, err := runCLI(t, args()...)
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, stderr)
	}
	for _, want := range []string{
		"Copied " + filepath.Join(dataDir, "webapi.db") + " into postgres://127.0.0.1:",
		", schema " + schema + ", in one transaction:",
		"  keys                2  (1 contracts, 1 share; 0 used; 0 hourly usage rows, 0 quota periods)\n",
		"  contracts           0\n",
		"  pending messages    0  (0 attachments in 0 chunks)\n",
		"  shares              0  (0 with a password; 0 openings)\n",
		"  webhooks            0  (0 enabled)\n",
		"check value of the master key " + filepath.Join(dataDir, "master.key"),
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout+stderr, password) {
		t.Errorf("the DSN's password is shown:\n%s\n%s", stdout, stderr)
	}
	db, err := pgdb.Open(context.Background(), pgdb.Config{DSN: srv.DSN, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM keys").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d keys in the schema, %v; want 2", n, err)
	}

	_, _, err = runCLI(t, args()...)
	if err == nil || !strings.Contains(err.Error(), "schema "+schema+" is not empty: it holds keys (2 rows); a copy goes into an empty schema only") {
		t.Fatalf("a second migrate: %v", err)
	}
}
