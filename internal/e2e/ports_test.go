package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/listenaddr"
	"github.com/keygate/keygate/internal/testkit/freeport"
	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestSecondGatewayOnTheSamePorts: Caddy listens with SO_REUSEPORT, so a
// second gateway on a running one's ports would start without a word and
// the kernel would split the requests between two databases. It refuses
// to start instead, naming the address, unless allow_shared_ports says
// the overlap is meant; a reload in the same process, and a restart right
// after a stop, still work.
func TestSecondGatewayOnTheSamePorts(t *testing.T) {
	if !listenaddr.Supported {
		t.Skip("another process's listeners are found through Linux's /proc")
	}
	first := start(t, gatewayproc.Options{})

	second, err := first.Twin(gatewayproc.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Launch(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.Exited():
	case <-time.After(60 * time.Second):
		second.Kill()
		t.Fatalf("the second gateway did not exit:\n%s", second.Tail(4096))
	}
	// Caddy's log, once the config set it up, has the error (a plain
	// `caddy run` prints it to the terminal).
	log, _ := os.ReadFile(filepath.Join(second.Dir(), "caddy.log"))
	out := second.Tail(8192) + string(log)
	if second.ExitErr() == nil || !strings.Contains(out, "another process already serves 127.0.0.1:") ||
		!strings.Contains(out, "allow_shared_ports") {
		t.Fatalf("second gateway: exit %v, output:\n%s", second.ExitErr(), out)
	}

	// Its own admin endpoint, the first one's site: refused all the same,
	// naming the listener.
	adminPort, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	sitePort, _ := strconv.Atoi(first.Site[strings.LastIndex(first.Site, ":")+1:])
	dir := t.TempDir()
	config := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(config, []byte(gatewayproc.Options{Dir: dir}.Caddyfile(adminPort, sitePort)), 0o600); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(bin, "run", "--config", config, "--adapter", "caddyfile")
	b, err := run.CombinedOutput()
	log2, _ := os.ReadFile(filepath.Join(dir, "caddy.log"))
	want := fmt.Sprintf(":%d, this config's listener :%d: is another gateway running?", sitePort, sitePort)
	if err == nil || !strings.Contains(string(b)+string(log2), want) {
		t.Fatalf("a gateway on the first one's site port: %v, want %q in:\n%s\n%s", err, want, b, log2)
	}

	// Said on purpose: it starts beside the first.
	shared, err := first.Twin(gatewayproc.Options{Dir: t.TempDir(), WebAPI: "allow_shared_ports"})
	if err != nil {
		t.Fatal(err)
	}
	if err := shared.Launch(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "the second gateway serving", func() bool {
		b, _ := os.ReadFile(filepath.Join(shared.Dir(), "caddy.log"))
		return strings.Contains(string(b), "serving initial configuration")
	})
	select {
	case <-shared.Exited():
		t.Fatalf("allow_shared_ports: the second gateway exited:\n%s", shared.Tail(4096))
	default:
	}
	if err := shared.Stop(); err != nil {
		t.Fatal(err)
	}

	// A reload in the same process keeps its own addresses.
	reload := exec.Command(bin, "reload", "--config", first.Config, "--adapter", "caddyfile", "--force",
		"--address", strings.TrimPrefix(first.Admin, "http://"))
	if b, err := reload.CombinedOutput(); err != nil {
		t.Fatalf("reload: %v\n%s", err, b)
	}
	// A restart right after a stop.
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := first.Restart(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(first.Site + "/webapi/contracts")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after the restart: %d", resp.StatusCode)
	}
}
