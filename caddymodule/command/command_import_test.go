package command_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// TestImportCommand runs `caddy webapi keys import` as an operator does:
// a dry run, a JSON Lines file, a Kong dump with its privileges map in
// YAML, and a refused file whose every bad line is printed, no token in
// any output.
func TestImportCommand(t *testing.T) {
	write := importGateway(t)
	jsonl := write("keys.jsonl", `{"name":"crm","owner":"acme","privileges":["get","list"],"token":"crm-token-on-kong-0123"}
{"name":"fresh","owner":"acme","privileges":["get"]}
`)
	out, _, err := runCLI(t, "keys", "import", jsonl, "--service", "share", "--dry-run")
	if err != nil || !strings.Contains(out, "would import (dry run, nothing stored) 2 keys: 1 keep the token they came with, 1 get a new one") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "keys", "import", jsonl, "--service", "share")
	if err != nil || !strings.HasPrefix(out, "imported 2 keys") {
		t.Fatalf("import: %v\n%s", err, out)
	}
	grants := write("groups.yaml", "readers: {service: contracts, privileges: [get, search]}\nwriters: {service: contracts, privileges: [create]}\nshare-readers: {service: share, privileges: [get, list]}\n")
	out, _, err = runCLI(t, "keys", "import", "../../keystore/keyimport/testdata/kong.yaml", "--format", "kong", "--privileges-map", grants, "--json")
	if err != nil || !strings.Contains(out, `"imported": 3`) || !strings.Contains(out, `"owner": "cust-42"`) || !strings.Contains(out, `"externalId": "cust-42"`) {
		t.Fatalf("kong import: %v\n%s", err, out)
	}
	list, _, err := runCLI(t, "keys", "list")
	if err != nil || strings.Count(list, "\n") != 6 {
		t.Errorf("after the imports: %v\n%s", err, list)
	}
	_, _, err = runCLI(t, "keys", "import", write("bad.jsonl", `{"name":"again","owner":"acme","privileges":["get"],"token":"crm-token-on-kong-0123"}
{"name":"x","owner":"acme","privileges":["fly"],"token":"short"}
`), "--service", "share")
	msg := fmt.Sprint(err)
	for _, want := range []string{"lines[1].token: a key with this token exists already", "lines[2].privileges[0]", "lines[2].token"} {
		if !strings.Contains(msg, want) {
			t.Errorf("a refused import lacks %q:\n%s", want, msg)
		}
	}
	for _, secret := range []string{"crm-token-on-kong", "billing-live-key"} {
		if strings.Contains(msg+out+list, secret) {
			t.Errorf("the command printed %s", secret)
		}
	}
}

// TestImportCommandKong runs `caddy webapi keys import` on Kong files as
// an operator does: every problem of a file printed at once, a bad group
// of the privileges map named with its details, YAML syntax errors at
// their line and column, a decK dump without --format kong named in one
// line, and the consumers without credentials named in the summary, dry
// run included.
func TestImportCommandKong(t *testing.T) {
	write := importGateway(t)
	if _, _, err := runCLI(t, "keys", "import", write("stored.jsonl", `{"name":"there","owner":"o","privileges":["get"],"token":"stored-before-this-import-0123"}`), "--service", "share"); err != nil {
		t.Fatal(err)
	}
	groups := write("groups.yaml", "readers: {service: contracts, privileges: [get, search]}\nwriters: {service: contracts, privileges: [fly]}\nshare-readers: {service: share, privileges: [get, list]}\n")
	good := write("good-groups.yaml", "readers: {service: contracts, privileges: [get, search]}\nwriters: {service: contracts, privileges: [create]}\nshare-readers: {service: share, privileges: [get, list]}\n")
	tests := []struct {
		name string
		args []string
		// wantErr are in the error, one problem a line; lines is how
		// many problem lines it has (0: any).
		wantErr []string
		lines   int
		// wantOut are in what the command prints on success.
		wantOut []string
	}{
		{
			name: "every problem at once",
			args: []string{"../../keystore/keyimport/testdata/kong-every-problem.yaml", "--format", "kong", "--privileges-map", groups},
			wantErr: []string{"privilegesMap.writers.privileges[0]: group writers", "lines[6].plugins:", "lines[8].key:",
				"lines[14].acls:", "lines[14].rateLimits[0].limit:", "lines[24].key:", "lines[25].key:"},
			lines: 7,
		},
		{
			name:    "a syntax error of the privileges map",
			args:    []string{"../../keystore/keyimport/testdata/kong.yaml", "--format", "kong", "--privileges-map", write("bad-groups.yaml", "readers: {service: contracts, privileges: [get]\nwriters: x\n")},
			wantErr: []string{"--privileges-map", "line 2, column 1"},
		},
		{
			name:    "a syntax error of the dump",
			args:    []string{write("bad.yaml", "consumers:\n- username: a\n  keyauth_credentials:\n  - key: a-key-0123456789abcdef\n   acls: x\n"), "--format", "kong", "--privileges-map", good},
			wantErr: []string{"lines[5]: ", "line 5, column 4"},
			lines:   1,
		},
		{
			name:    "a decK dump without --format kong",
			args:    []string{"../../keystore/keyimport/testdata/kong.yaml"},
			wantErr: []string{"this looks like a decK dump", "--format kong"},
			lines:   1,
		},
		{
			name: "a consumer without credentials, dry run",
			args: []string{"../../keystore/keyimport/testdata/kong.yaml", "--format", "kong", "--privileges-map", good, "--dry-run"},
			wantOut: []string{"would import (dry run, nothing stored) 3 keys", "  2 consumers: 2 new, 0 existing\n",
				"line 27: consumer no-key has no key-auth credential: not imported"},
		},
		{
			name: "a consumer group, and a consumer whose own limit overrides it, dry run",
			args: []string{write("groups-dump.yaml", `consumer_groups:
- name: gold
  plugins: [{name: rate-limiting, config: {minute: 10}}]
consumers:
- username: alpha
  groups: [{name: gold}]
  keyauth_credentials: [{key: alpha-token-0123456789abcdef}]
  acls: [{group: readers}]
- username: beta
  groups: [{name: gold}]
  keyauth_credentials: [{key: beta-token-0123456789abcdef}]
  acls: [{group: readers}]
  plugins: [{name: rate-limiting, config: {minute: 100}}]
`), "--format", "kong", "--privileges-map", good, "--dry-run"},
			wantOut: []string{"would import (dry run, nothing stored) 2 keys", "  2 consumers: 2 new, 0 existing\n",
				"  line 2: plan gold (new), taken by 1 consumer\n",
				"  line 9: consumer beta: its own rate-limiting overrides consumer group gold's, as on Kong: it takes no plan\n"},
		},
		{
			name:    "a consumer without credentials, as JSON",
			args:    []string{"../../keystore/keyimport/testdata/kong.yaml", "--format", "kong", "--privileges-map", good, "--json"},
			wantOut: []string{`"imported": 3`, `"consumer": "no-key"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCLI(t, append([]string{"keys", "import"}, tt.args...)...)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				for _, w := range tt.wantOut {
					if !strings.Contains(out, w) {
						t.Errorf("the summary lacks %q:\n%s", w, out)
					}
				}
				return
			}
			msg := fmt.Sprint(err)
			if err == nil {
				t.Fatalf("no error; printed\n%s", out)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(msg, w) {
					t.Errorf("the error lacks %q:\n%s", w, msg)
				}
			}
			if n := strings.Count(msg, "\n  "); tt.lines > 0 && n != tt.lines {
				t.Errorf("%d problems printed, want %d:\n%s", n, tt.lines, msg)
			}
			for _, secret := range []string{"twice-in-this-file", "stored-before-this", "billing-live-key"} {
				if strings.Contains(msg+out, secret) {
					t.Errorf("the command printed %s", secret)
				}
			}
		})
	}
}

// importGateway runs a gateway with only the admin endpoint and the
// webapi app, for the import command, and returns what writes a file
// of the test's for it to read.
func importGateway(t *testing.T) (write func(name, text string) string) {
	t.Helper()
	dir := t.TempDir()
	tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: adminPort})
	tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n\twebapi {\n\t\tdata_dir %s\n\t}\n}\n", adminPort, dir), "caddyfile")
	t.Cleanup(func() { tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", adminPort), "caddyfile") })
	return func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
