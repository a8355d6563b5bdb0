package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// bin is the keygate binary built for this test run.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := gatewayproc.ModuleRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "keygate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin = filepath.Join(tmp, "caddy")
	if err := gatewayproc.Build(root, bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Every reply the tests receive, through any client that sets no
	// Transport of its own (gatewayproc's admin calls included), is
	// checked against the OpenAPI documents (internal/openapitest).
	restore, err := openapitest.Install()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer restore()
	code := pgtest.Main(m)
	if openapitest.CheckUnreported(os.Stderr) && code == 0 {
		code = 1
	}
	return code
}

// start runs a gateway on a fresh data directory, stopped when the test
// ends. Tests change o's fields before calling it; Bin and Dir are set here
// unless given.
func start(t *testing.T, o gatewayproc.Options) *gatewayproc.Gateway {
	t.Helper()
	if o.Bin == "" {
		o.Bin = bin
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	g, err := gatewayproc.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstDocuments(g)
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Error(err)
		}
		// Mismatches of the requests made without the test at hand
		// (helpers without t, load goroutines) fail it now.
		openapitest.Unreported.Report(t)
	})
	return g
}

// checkAgainstDocuments names g's site and admin addresses to the OpenAPI
// check, in place of what an earlier gateway on the same ports was: a
// port freed by one gateway is often another's next.
func checkAgainstDocuments(g *gatewayproc.Gateway) {
	if v, err := openapitest.Default(); err == nil {
		v.SetHostsOf(g.Site, g.Admin)
	}
}
