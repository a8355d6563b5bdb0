package e2e

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/freeport"
	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestReadinessBehindBalancer runs two instances on one PostgreSQL
// database behind examples/balancer.Caddyfile, the second reaching the
// database through a proxy that can hang. While it hangs, the second
// instance's /readyz answers 503 within its time bound and the balancer
// sends every request to the first; once the database answers again, the
// second is ready and takes its share again.
func TestReadinessBehindBalancer(t *testing.T) {
	t.Parallel()
	pg, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	dsn, err := url.Parse(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startHangingProxy(t, dsn.Host)
	viaProxy := *dsn
	viaProxy.Host = proxy.addr()

	keyFile := filepath.Join(t.TempDir(), "master.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	instance := func(name, dsn string) *gatewayproc.Gateway {
		return start(t, gatewayproc.Options{
			WebAPI: fmt.Sprintf("storage postgres {\n\t\t\tdsn %q\n\t\t}\n\t\tmaster_key_file %s", dsn, keyFile),
			// Which instance answered, for the test to count.
			Site: "\theader X-Instance " + name + "\n" + gatewayproc.DefaultSite,
		})
	}
	a := instance("a", pg.DSN)
	b := instance("b", viaProxy.String())
	lb := startBalancer(t, a.Site, b.Site)

	// share sends n requests through the balancer and counts who answered.
	share := func(n int) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for range n {
			resp, err := http.Get(lb + "/livez")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("through the balancer: %d", resp.StatusCode)
			}
			seen[resp.Header.Get("X-Instance")]++
		}
		return seen
	}
	testwait.For(t, testwait.Generous, "both instances in the balancer", func() bool {
		s := share(10)
		return s["a"] > 0 && s["b"] > 0
	})

	// The database hangs for b: its /readyz says so within the bound,
	// each answer within 2 s and a margin, naming the storage.
	proxy.hang()
	hung := time.Now()
	var slowest time.Duration
	var notReady time.Duration
	testwait.For(t, 10*time.Second, "b's /readyz to answer 503", func() bool {
		began := time.Now()
		resp, err := http.Get(b.Site + "/readyz")
		took := time.Since(began)
		slowest = max(slowest, took)
		if took > 5*time.Second {
			t.Fatalf("/readyz took %v with the database hanging", took)
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return false
		}
		var p struct {
			Code, Detail string
			Checks       []struct {
				Name  string
				Ready bool
			}
		}
		if err := json.Unmarshal(body, &p); err != nil || p.Code != "not_ready" || !strings.Contains(p.Detail, "storage") ||
			resp.Header.Get("Content-Type") != "application/problem+json" || len(p.Checks) != 3 || p.Checks[0].Ready {
			t.Fatalf("not ready: %s %v", body, resp.Header)
		}
		notReady = time.Since(hung)
		return true
	})
	if resp, err := http.Get(b.Site + "/livez"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("b's /livez with its database hanging: %v %v", resp, err)
	}
	testwait.For(t, 10*time.Second, "the balancer to leave b out", func() bool { return share(1)["b"] == 0 && share(10)["b"] == 0 })
	out := time.Since(hung)
	if s := share(40); s["a"] != 40 {
		t.Fatalf("with b not ready, the balancer sent %v", s)
	}

	// The database answers again: b is ready, and back in the balancer.
	proxy.resume()
	resumed := time.Now()
	var readyAgain time.Duration
	testwait.For(t, 20*time.Second, "b's /readyz to answer 200", func() bool {
		resp, err := http.Get(b.Site + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		readyAgain = time.Since(resumed)
		return resp.StatusCode == http.StatusOK
	})
	testwait.For(t, 10*time.Second, "the balancer to take b back", func() bool { return share(10)["b"] > 0 })
	back := time.Since(resumed)
	t.Logf("database hung: /readyz 503 after %v (slowest answer %v), out of the balancer after %v; answering again: ready after %v, back in the balancer after %v",
		notReady.Round(10*time.Millisecond), slowest.Round(10*time.Millisecond), out.Round(10*time.Millisecond),
		readyAgain.Round(10*time.Millisecond), back.Round(10*time.Millisecond))
}

// startBalancer runs examples/balancer.Caddyfile, as shipped but for its
// addresses, in front of the two sites, and returns its base URL.
func startBalancer(t *testing.T, siteA, siteB string) string {
	t.Helper()
	root, err := gatewayproc.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "examples", "balancer.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	adminPort, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	config := string(raw)
	for _, r := range [][2]string{
		{"admin localhost:2029", fmt.Sprintf("admin 127.0.0.1:%d", adminPort)},
		{":8080 {", fmt.Sprintf("http://127.0.0.1:%d {", port)},
		{"localhost:8081 localhost:8082", strings.TrimPrefix(siteA, "http://") + " " + strings.TrimPrefix(siteB, "http://")},
	} {
		if !strings.Contains(config, r[0]) {
			t.Fatalf("examples/balancer.Caddyfile has no %q", r[0])
		}
		config = strings.Replace(config, r[0], r[1], 1)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	startProcess(t, cmd, filepath.Join(dir, "output.log"))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testwait.For(t, testwait.Generous, "the balancer to listen", func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return base
}

// startProcess starts cmd, its output to the file at logPath, and kills
// it when the test ends.
func startProcess(t *testing.T, cmd *exec.Cmd, logPath string) {
	t.Helper()
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		out.Close()
	})
}

// hangingProxy relays TCP connections to a target. Hung, it stops
// relaying bytes both ways on every connection, old and new, as a
// database behind a broken network does (no refusal, no reset, nothing),
// until resumed. Cut, it ends the connections open then mid-statement.
type hangingProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	hung  bool
	links []*proxyLink
}

// proxyLink is one relayed connection: the client's side and the
// target's.
type proxyLink struct {
	down, up net.Conn
	// doomed: the link ends once the client's next bytes reach the target.
	doomed atomic.Bool
}

func startHangingProxy(t *testing.T, target string) *hangingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangingProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			l := &proxyLink{down: c, up: up}
			p.mu.Lock()
			p.links = append(p.links, l)
			p.mu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); p.relay(up, c, l) }()
			go func() { defer conns.Done(); p.relay(c, up, nil) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.resume()
		p.mu.Lock()
		for _, l := range p.links {
			l.down.Close()
			l.up.Close()
		}
		p.mu.Unlock()
		conns.Wait()
	})
	return p
}

func (p *hangingProxy) addr() string { return p.ln.Addr().String() }

// relay copies from src to dst, holding each chunk while the proxy hangs.
// cut, given for the client's direction, ends the link after a chunk
// when it is doomed.
func (p *hangingProxy) relay(dst, src net.Conn, cut *proxyLink) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.hung {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if cut != nil && cut.doomed.Load() {
				cut.down.Close()
				cut.up.Close()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut dooms every connection open now: each ends as soon as its client's
// next statement has reached the target, which runs it while its answer
// never comes back, as when the database's host or the network fails
// mid-query. Connections made afterwards are relayed as usual.
func (p *hangingProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.doomed.Store(true)
	}
}

func (p *hangingProxy) hang() {
	p.mu.Lock()
	p.hung = true
	p.mu.Unlock()
}

func (p *hangingProxy) resume() {
	p.mu.Lock()
	p.hung = false
	p.cond.Broadcast()
	p.mu.Unlock()
}
