package command_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/spf13/cobra"

	// The gateway the commands talk to; it registers the command too.
	_ "github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/testkit/freeport"
	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// The gateway's ports: free ones, so that these tests and caddymodule's
// (on fixed ports) may run at once, each test binary with its own
// in-process Caddy.
var adminPort, sitePort, tlsPort = freePorts()

func freePorts() (admin, site, tls int) {
	ports, err := freeport.Take(3)
	if err != nil {
		panic(err)
	}
	return ports[0], ports[1], ports[2]
}

// Every reply a test receives from the gateway through a client that sets
// no Transport of its own (adminGet; the commands' client has its own) is
// checked against the OpenAPI documents, as in caddymodule.
func init() {
	if _, err := openapitest.Install(); err != nil {
		panic(err)
	}
	v, _ := openapitest.Default()
	v.SetHostsOf(fmt.Sprintf("http://localhost:%d", sitePort), fmt.Sprintf("http://localhost:%d", adminPort))
}

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if openapitest.CheckUnreported(os.Stderr) && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// runCLI runs `caddy webapi args...` against the test admin endpoint,
// through the command this package registers with Caddy.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	registered, ok := caddycmd.Commands()["webapi"]
	if !ok {
		t.Fatal("no webapi command registered with Caddy")
	}
	root := &cobra.Command{Use: "webapi", SilenceUsage: true, SilenceErrors: true}
	registered.CobraFunc(root)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--address", fmt.Sprintf("localhost:%d", adminPort)))
	err = root.Execute()
	return out.String(), errOut.String(), err
}

// cliGateway runs a gateway on the test ports, with data in dir and the
// webapi app's further options, whose contracts site answers respond
// behind the key check: what the CLI tests talk to.
func cliGateway(t *testing.T, dir, respond string, options ...string) {
	t.Helper()
	tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: adminPort})
	tester.InitServer(fmt.Sprintf(`{
	admin localhost:%[2]d
	http_port %[3]d
	https_port %[4]d
	webapi {
		data_dir %[1]s
		%[6]s
	}
}
http://localhost:%[3]d {
	handle /webapi/contracts* {
		webapi_auth contracts
		respond %[5]q
	}
}`, dir, adminPort, sitePort, tlsPort, respond, strings.Join(options, "\n\t\t")), "caddyfile")
}

// stopGateway unloads the webapi app, which closes its database: the
// admin endpoint alone goes on.
func stopGateway(t *testing.T) {
	t.Helper()
	caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: adminPort}).
		InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", adminPort), "caddyfile")
}

// TestCommandTrees: `caddy webapi` has every command tree, each with its
// commands.
func TestCommandTrees(t *testing.T) {
	root := &cobra.Command{Use: "webapi"}
	caddycmd.Commands()["webapi"].CobraFunc(root)
	want := map[string][]string{
		"keys":      {"create", "list", "show", "update", "reveal", "roll", "delete", "disable", "enable", "usage", "import"},
		"consumers": {"create", "list", "show", "update", "delete", "usage"},
		"plans":     {"create", "list", "show", "update", "delete"},
		"templates": {"add", "list", "remove"},
		"webhooks":  {"add", "list", "show", "update", "rotate-secret", "test", "deliveries", "remove"},
		"migrate":   nil,
		"openapi":   nil,
		"seal":      {"show"},
		"host":      {"check"},
	}
	if got := len(root.Commands()); got != len(want) {
		t.Errorf("%d command trees, want %d", got, len(want))
	}
	for tree, subs := range want {
		c, rest, err := root.Find([]string{tree})
		if err != nil || len(rest) != 0 || c.Name() != tree {
			t.Errorf("%s: %v", tree, err)
			continue
		}
		for _, sub := range subs {
			if s, _, err := c.Find([]string{sub}); err != nil || s.Name() != sub {
				t.Errorf("%s %s: not found (%v)", tree, sub, err)
			}
		}
	}
}

// TestUnknownCommand: a command that only groups others refuses a
// subcommand it does not have, with an error (a non-zero exit), and
// prints its help when given none.
func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"consumers", "frobnicate"}, {"keys", "rm"}, {"seal", "shwo"}} {
		out, _, err := runCLI(t, args...)
		if want := fmt.Sprintf("unknown command %q", args[len(args)-1]); err == nil || !strings.Contains(err.Error(), want) || out != "" {
			t.Errorf("webapi %s: %v, printed %q; want an error saying %s", strings.Join(args, " "), err, out, want)
		}
	}
	if out, _, err := runCLI(t, "consumers"); err != nil || !strings.Contains(out, "Available Commands:") {
		t.Errorf("webapi consumers: %v, printed %q; want its help", err, out)
	}
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
