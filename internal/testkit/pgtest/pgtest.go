// Package pgtest gives tests (and the bench) a PostgreSQL of their own: a
// throwaway server started from the system's binaries on a free loopback
// port, in a temporary directory, stopped and removed again; or, when
// KEYGATE_TEST_POSTGRES holds a DSN, that server. Each test gets a fresh
// schema in it, dropped when the test ends, so tests never see each
// other's rows and nothing depends on a server left running.
//
// The binaries are Debian's (scripts/test-deps.sh installs the
// `postgresql` package when missing): PATH first, then the newest
// /usr/lib/postgresql/*/bin. PostgreSQL refuses to run as root, so as root
// the server runs as the `postgres` user.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keygate/keygate/internal/testkit/freeport"
)

// EnvDSN names the variable that points the tests at an existing server
// instead of a throwaway one. "off" skips the PostgreSQL tests.
const EnvDSN = "KEYGATE_TEST_POSTGRES"

// Options shape a throwaway server.
type Options struct {
	// Durable keeps fsync and synchronous_commit on, as a production
	// server has them (the bench). Tests run without: a crash of the test
	// machine loses nothing a test needs.
	Durable bool
	// MaxConnections is the server's max_connections; 200 if 0.
	MaxConnections int
}

// Server is one PostgreSQL that tests connect to.
type Server struct {
	// DSN reaches its `postgres` database as a superuser.
	DSN string

	dir  string    // temporary directory of a throwaway server
	cmd  *exec.Cmd // its postmaster; nil for an external server
	done chan struct{}

	// What Resume needs to start the postmaster again.
	bin  string
	cred *syscall.Credential
	opts Options
	port int
}

// Start starts a throwaway server. Stop it when done.
func Start(o Options) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "keygate-pg-")
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 200
	}
	// A port chosen free may be taken before the postmaster binds it:
	// try a few.
	var lastErr error
	for range 5 {
		s, err := launch(bin, dir, cred, o, 0)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// launch starts the postmaster of dir on port, or on a free one if 0.
func launch(bin, dir string, cred *syscall.Credential, o Options, port int) (*Server, error) {
	if port == 0 {
		var err error
		if port, err = freeport.One(); err != nil {
			return nil, err
		}
	}
	durable := "off"
	if o.Durable {
		durable = "on"
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	if cred != nil {
		_ = os.Chown(logPath, int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections="+strconv.Itoa(o.MaxConnections),
		"-c", "fsync="+durable,
		"-c", "synchronous_commit="+durable,
		"-c", "full_page_writes="+durable,
		"-c", "shared_buffers=128MB",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The postmaster goes when the test process does, however it ends,
	// so that no server outlives its tests.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{
		DSN:  fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		dir:  dir,
		cmd:  cmd,
		done: make(chan struct{}),
		bin:  bin, cred: cred, opts: o, port: port,
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(30 * time.Second); err != nil {
		s.kill()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("pgtest: postgres did not start: %v\n%s", err, tail(log, 2000))
	}
	return s, nil
}

func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-s.done:
			return errors.New("the postmaster exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.DSN)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGQUIT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// Halt shuts a throwaway server down and keeps its data, for tests of a
// database outage; Resume starts it again on the same port.
func (s *Server) Halt() error {
	if s.cmd == nil {
		return errors.New("pgtest: only a throwaway server can be halted")
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
		return nil
	case <-time.After(30 * time.Second):
		s.kill()
		return errors.New("pgtest: the postmaster did not stop within 30 s")
	}
}

// Freeze stops every process of a throwaway server (SIGSTOP) without
// closing a connection: a database that does not answer, as behind a
// lost network. Thaw lets it go on.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw ends Freeze.
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

// signal sends sig to the postmaster and to each of its children: every
// backend is a session (and process group) of its own, so a signal to the
// postmaster's group would leave open connections answering.
func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil {
		return errors.New("pgtest: only a throwaway server can be signalled")
	}
	// The postmaster first, so that it forks no new backend meanwhile;
	// then its children, scanned again until no new one shows (one it
	// was forking as it stopped).
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	done := map[int]bool{}
	for {
		fresh := 0
		for _, child := range children(pid) {
			if !done[child] {
				done[child] = true
				fresh++
				syscall.Kill(child, sig)
			}
		}
		if fresh == 0 {
			return nil
		}
	}
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		rest := b[bytes.LastIndexByte(b, ')')+1:]
		var state string
		var ppid int
		if _, err := fmt.Sscan(string(rest), &state, &ppid); err == nil && ppid == pid {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, child)
		}
	}
	return out
}

// Resume starts a halted server again with its data, on its port.
func (s *Server) Resume() error {
	if s.cmd == nil {
		return errors.New("pgtest: only a throwaway server can be resumed")
	}
	n, err := launch(s.bin, s.dir, s.cred, s.opts, s.port)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}

// Stop shuts a throwaway server down (fast shutdown: its data is thrown
// away anyway) and removes its directory. An external server is left
// alone.
func (s *Server) Stop() error {
	if s == nil || s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.kill()
	}
	return os.RemoveAll(s.dir)
}

// Schema creates an empty schema for tb and drops it, with everything in
// it, when tb ends. It returns the schema's name.
func (s *Server) Schema(tb testing.TB) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "kg_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Errorf("pgtest: dropping schema %s: %v", name, err)
		}
	})
	return name
}

// Exec runs statements on a connection of its own.
func (s *Server) Exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
	skip bool
}

// Shared is the test binary's server: KEYGATE_TEST_POSTGRES's, or a
// throwaway one started on first use and stopped by Main. With
// KEYGATE_TEST_POSTGRES=off the test is skipped.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.once.Do(func() {
		switch env := os.Getenv(EnvDSN); env {
		case "off":
			shared.skip = true
			return
		case "":
			if shared.srv, shared.err = Start(Options{}); shared.err != nil {
				return
			}
		default:
			shared.srv = &Server{DSN: env}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// pg_trgm in the database's public schema, which no test drops:
		// else the first test schema to be migrated creates it in itself,
		// the other schemas' trigram indexes depend on it there, and
		// dropping that schema while parallel tests run drops their
		// indexes mid-test (or deadlocks with them), and two schemas
		// migrated at once both try to create it.
		if err := shared.srv.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public"); err != nil {
			shared.err = fmt.Errorf("pgtest: creating pg_trgm in %s: %w", serverName(), err)
		}
	})
	if shared.skip {
		tb.Skipf("%s=off: PostgreSQL tests skipped", EnvDSN)
	}
	if shared.err != nil {
		tb.Fatalf("%v", shared.err)
	}
	return shared.srv
}

// serverName names the shared server in errors.
func serverName() string {
	if os.Getenv(EnvDSN) != "" {
		return "the server of " + EnvDSN
	}
	return "the throwaway server"
}

// Main runs a package's tests and then stops the shared server, if one
// was started: call it from TestMain as os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// binDir finds the directory of initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "initdb")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgtest: no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql/*/bin: run scripts/test-deps.sh, or set %s to a DSN (or to off)", EnvDSN)
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// serverCredential is whom the server runs as: nil (this process's user)
// unless that is root, which PostgreSQL refuses; then `postgres`.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs a `postgres` user to run the server as: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
