package caddymodule

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
	dir := t.TempDir()
	tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: TestAdminPort})
	tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n\twebapi {\n\t\tdata_dir %s\n\t}\n}\n", TestAdminPort, dir), "caddyfile")
	t.Cleanup(func() { tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", TestAdminPort), "caddyfile") })

	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
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
	out, _, err = runCLI(t, "keys", "import", "../keystore/testdata/kong.yaml", "--format", "kong", "--privileges-map", grants, "--json")
	if err != nil || !strings.Contains(out, `"imported": 3`) || !strings.Contains(out, `"owner": "cust-42"`) {
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
