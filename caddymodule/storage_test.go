package caddymodule

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// The storage forms of docs/operators.md (Config): the Caddyfile
// adapts to exactly the JSON it shows, and a bad block is refused
// with a message.
func TestStorageCaddyfile(t *testing.T) {
	tests := []struct {
		name, block, want, err string
	}{
		{"bolt", "storage bolt", `{"module":"bolt"}`, ""},
		{"postgres with dsn", "storage postgres {\n dsn {env.KEYGATE_DATABASE_URL}\n max_conns 20\n}",
			`{"dsn":"{env.KEYGATE_DATABASE_URL}","max_conns":20,"module":"postgres"}`, ""},
		{"postgres with dsn_file and schema", "storage postgres {\n dsn_file /run/secrets/keygate-dsn\n schema kg\n}",
			`{"dsn_file":"/run/secrets/keygate-dsn","module":"postgres","schema":"kg"}`, ""},
		{"bolt with options", "storage bolt {\n path x\n}", "", "takes no options"},
		{"unknown postgres option", "storage postgres {\n password x\n}", "", `unknown storage postgres option "password"`},
		{"bad max_conns", "storage postgres {\n max_conns many\n}", "", "max_conns"},
		{"unknown backend", "storage etcd", "", "webapi.storage.etcd"},
		{"no backend", "storage", "", "argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := adapt(t, "{\n webapi {\n"+tt.block+"\n }\n}\n:8080 {\n respond ok\n}\n", tt.err)
			if out == nil {
				return
			}
			var cfg struct {
				Apps struct {
					WebAPI struct {
						Storage json.RawMessage `json:"storage"`
					} `json:"webapi"`
				} `json:"apps"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if got := string(cfg.Apps.WebAPI.Storage); got != tt.want {
				t.Errorf("storage %s\nwant    %s", got, tt.want)
			}
		})
	}
}

// The DSN comes from its placeholder or its file, and neither a bad DSN
// nor its pool key shows the password.
func TestPostgresStorageDSN(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	file := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(file, []byte("postgres://kg:"+secret+"@db.example:5433/app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KEYGATE_TEST_DSN", "host=db.example user=kg password="+secret+" dbname=app")
	t.Setenv(DefaultDSNEnv, "postgres://kg:"+secret+"@db.example:6543/env")
	tests := []struct {
		name    string
		s       PostgresStorage
		wantKey string
		wantErr string
	}{
		{"placeholder", PostgresStorage{DSN: "{env.KEYGATE_TEST_DSN}"}, "host=db.example dbname=app schema keygate", ""},
		{"file", PostgresStorage{DSNFile: file, Schema: "kg"}, "postgres://db.example:5433/app schema kg", ""},
		{"both", PostgresStorage{DSN: "x", DSNFile: file}, "", "not both"},
		{"empty placeholder", PostgresStorage{DSN: "{env.KEYGATE_TEST_UNSET}"}, "", "empty"},
		{"from KEYGATE_DATABASE_URL", PostgresStorage{}, "postgres://db.example:6543/env schema keygate", ""},
		{"an unencoded '@' in the password", PostgresStorage{DSN: "postgres://kg:" + secret + "@Zq9xW@127.0.0.1:5432/app"}, "", "percent-encode '@' as %40"},
		{"an encoded '@' in the password", PostgresStorage{DSN: "postgres://kg:" + secret + "%40Zq9xW@127.0.0.1:5432/app"}, "postgres://127.0.0.1:5432/app schema keygate", ""},
		{"missing file", PostgresStorage{DSNFile: file + ".missing"}, "", "dsn_file"},
		{"does not parse", PostgresStorage{DSN: "postgres://kg:" + secret + "@[::1/x"}, "", "does not parse"},
		{"max_conns 1", PostgresStorage{DSN: "postgres://kg@h/app", MaxConns: 1}, "", "max_conns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			err := s.Provision(caddy.Context{})
			if err == nil {
				err = s.Validate()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Zq9xW") {
					t.Fatalf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			key, err := s.PoolKey("")
			if err != nil || key != tt.wantKey || strings.Contains(key, "kg@") || strings.Contains(key, "user=") || strings.Contains(key, "Zq9xW") {
				t.Fatalf("PoolKey = %q, %v; want %q", key, err, tt.wantKey)
			}
		})
	}
}

// A gateway opens its stores on PostgreSQL through the module: the start
// is logged without the DSN's password, a second start with another
// master key is refused with a message that says so, and a server that
// does not answer stops the start with an error that names it but not
// the password.
func TestPostgresStorageOpens(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	srv := pgtest.Shared(t)
	u, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), secret) // the test server trusts loopback
	schema := srv.Schema(t)
	dir := t.TempDir()

	open := func(dsn, masterKey string) (*state, string, error) {
		core, logs := observer.New(zap.DebugLevel)
		st := &PostgresStorage{DSN: dsn, Schema: schema}
		if err := st.Provision(caddy.Context{}); err != nil {
			t.Fatal(err)
		}
		s, err := openState(st, dir, filepath.Join(dir, masterKey), 0, zap.New(core))
		var all strings.Builder
		for _, e := range logs.All() {
			fmt.Fprintf(&all, "%s %v\n", e.Message, e.ContextMap())
		}
		return s, all.String(), err
	}

	s, logs, err := open(u.String(), "master.key")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "database opened") || !strings.Contains(logs, "storage:postgres") {
		t.Errorf("start not logged: %s", logs)
	}
	if strings.Contains(logs, secret) {
		t.Errorf("the log shows the password: %s", logs)
	}
	if err := s.Destruct(); err != nil {
		t.Fatal(err)
	}

	if _, _, err := open(u.String(), "other.key"); err == nil || !strings.Contains(err.Error(), "master key does not match") {
		t.Fatalf("another master key: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	down := fmt.Sprintf("postgres://ku5er:%s@%s/app?sslmode=disable", secret, closed)
	_, _, err = open(down, "master.key")
	t.Logf("unreachable: %v", err)
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), closed[strings.LastIndex(closed, ":")+1:]) ||
		strings.Contains(err.Error(), "ku5er") {
		t.Fatalf("unreachable server (the error may name the server, not the user or the password): %v", err)
	}
}

// send_timeout adapts to its JSON field, and a bad duration is refused.
func TestSendTimeoutCaddyfile(t *testing.T) {
	adapter := caddyconfig.GetAdapter("caddyfile")
	adapt := func(line string) (string, error) {
		out, _, err := adapter.Adapt([]byte("{\n webapi {\n"+line+"\n }\n}\n:8080 {\n respond ok\n}\n"), map[string]any{"filename": "Caddyfile"})
		return string(out), err
	}
	if out, err := adapt("send_timeout 10s"); err != nil || !strings.Contains(out, `"send_timeout":10000000000`) {
		t.Errorf("send_timeout 10s: %v %s", err, out)
	}
	if _, err := adapt("send_timeout soon"); err == nil || !strings.Contains(err.Error(), "send_timeout") {
		t.Errorf("send_timeout soon: %v", err)
	}
}

// webhook_allow_networks and allow_shared_ports adapt to their JSON
// fields; a network that is no CIDR prefix or address is refused.
func TestWebhookAndPortOptionsCaddyfile(t *testing.T) {
	adapter := caddyconfig.GetAdapter("caddyfile")
	adapt := func(lines string) (string, error) {
		out, _, err := adapter.Adapt([]byte("{\n webapi {\n"+lines+"\n }\n}\n:8080 {\n respond ok\n}\n"), map[string]any{"filename": "Caddyfile"})
		return string(out), err
	}
	out, err := adapt("webhook_allow_networks 10.20.0.0/16 127.0.0.0/8\nwebhook_allow_networks ::1/128 192.0.2.7\nallow_shared_ports")
	if err != nil || !strings.Contains(out, `"webhook_allow_networks":["10.20.0.0/16","127.0.0.0/8","::1/128","192.0.2.7"]`) ||
		!strings.Contains(out, `"allow_shared_ports":true`) {
		t.Errorf("adapted: %v %s", err, out)
	}
	if out, err := adapt("webhook_allow_networks"); err != nil || strings.Contains(out, "webhook_allow_networks") {
		t.Errorf("no networks: %v %s", err, out)
	}
	for _, bad := range []string{"webhook_allow_networks 10.0.0.0/33", "webhook_allow_networks intranet", "allow_shared_ports yes"} {
		if _, err := adapt(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if out, err := adapt("key_expiry_warning 48h"); err != nil || !strings.Contains(out, `"key_expiry_warning":172800000000000`) {
		t.Errorf("key_expiry_warning 48h: %v %s", err, out)
	}
	if _, err := adapt("key_expiry_warning soon"); err == nil || !strings.Contains(err.Error(), "key_expiry_warning") {
		t.Errorf("key_expiry_warning soon: %v", err)
	}
	nets, err := parseNetworks([]string{"10.20.3.4/16", "192.0.2.7", "::1"})
	if err != nil || fmt.Sprint(nets) != "[10.20.0.0/16 192.0.2.7/32 ::1/128]" {
		t.Errorf("parseNetworks = %v, %v", nets, err)
	}
}
