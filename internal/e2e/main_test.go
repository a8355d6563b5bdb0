package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/gatewayproc"
	"github.com/keygate/keygate/internal/pgtest"
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
	return pgtest.Main(m)
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
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// eventually polls cond every 20 ms until it holds or limit passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
