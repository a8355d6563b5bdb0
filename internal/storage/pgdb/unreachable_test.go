package pgdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
)

// errShape is an error as a store may get it, and whether it is the
// database's absence.
type errShape struct {
	name        string
	err         error
	unavailable bool
}

// safeToRetry is an error of pgx's kind that failed before anything was
// sent.
type safeToRetry struct{}

func (safeToRetry) Error() string     { return "failed before sending" }
func (safeToRetry) SafeToRetry() bool { return true }

// TestUnreachableShapes: every shape in which a lost or unreachable
// database reaches the stores, bare or wrapped, is storage.ErrUnavailable
// and answers a client 503 `unavailable` with Retry-After; a request's own
// errors and a cancelled caller are not.
func TestUnreachableShapes(t *testing.T) {
	wrapped := func(err error) error { return fmt.Errorf("reading a contract: %w", err) }
	opErr := func(op string, errno syscall.Errno) error {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
	}
	cases := []errShape{
		{"io.EOF", io.EOF, true},
		{"io.ErrUnexpectedEOF", io.ErrUnexpectedEOF, true},
		{"io.ErrUnexpectedEOF, wrapped", wrapped(io.ErrUnexpectedEOF), true},
		{"io.ErrUnexpectedEOF, in a batch", fmt.Errorf("error preprocessing batch (prepare): %w", io.ErrUnexpectedEOF), true},
		{"io.ErrUnexpectedEOF, joined", errors.Join(errors.New("rolling back"), io.ErrUnexpectedEOF), true},
		{"read reset", opErr("read", syscall.ECONNRESET), true},
		{"dial refused, wrapped", wrapped(opErr("dial", syscall.ECONNREFUSED)), true},
		{"write broken pipe", opErr("write", syscall.EPIPE), true},
		{"ECONNRESET", syscall.ECONNRESET, true},
		{"ECONNREFUSED, wrapped", wrapped(os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		{"EPIPE, wrapped", wrapped(syscall.EPIPE), true},
		{"ECONNABORTED", syscall.ECONNABORTED, true},
		{"ETIMEDOUT", syscall.ETIMEDOUT, true},
		{"net.ErrClosed", wrapped(net.ErrClosed), true},
		{"net timeout", &net.DNSError{Err: "i/o timeout", IsTimeout: true}, true},
		{"pgconn.ErrConnClosed, wrapped", wrapped(pgconn.ErrConnClosed), true},
		{"safe to retry", wrapped(safeToRetry{}), true},
		{"pool acquire deadline", fmt.Errorf("failed to acquire: %w", context.DeadlineExceeded), true},
		{"transaction closed", pgx.ErrTxClosed, true},
		{"08006 connection_failure", &pgconn.PgError{Code: "08006"}, true},
		{"08001, wrapped", wrapped(&pgconn.PgError{Code: "08001"}), true},
		{"57P01 admin_shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"57P02 crash_shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"57P03 cannot_connect_now", wrapped(&pgconn.PgError{Code: "57P03"}), true},
		{"53300 too_many_connections", &pgconn.PgError{Code: "53300"}, true},
		{"28P01 invalid_password", &pgconn.PgError{Code: "28P01"}, true},

		{"caller cancelled", context.Canceled, false},
		{"caller cancelled, wrapped", wrapped(context.Canceled), false},
		{"23505 unique_violation", &pgconn.PgError{Code: "23505"}, false},
		{"40001 serialization_failure", &pgconn.PgError{Code: "40001"}, false},
		{"57014 query_canceled", &pgconn.PgError{Code: "57014"}, false},
		{"53100 disk_full", &pgconn.PgError{Code: "53100"}, false},
		{"no rows", wrapped(pgx.ErrNoRows), false},
		{"a store's own error", errors.New("contract record does not decode"), false},
	}
	cases = append(cases, liveShapes(t)...)
	d := &DB{dsn: "postgres://keygate:pw@db.example/keygate"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := d.wrap("reading a contract", tc.err)
			if got := errors.Is(err, storage.ErrUnavailable); got != tc.unavailable {
				t.Fatalf("%v: unavailable %v, want %v", err, got, tc.unavailable)
			}
			if tc.unavailable && !isDBError(tc.err) {
				t.Errorf("%v: a transaction would hand it on unwrapped", tc.err)
			}
			w := httptest.NewRecorder()
			problem.WriteError(w, err)
			var body struct {
				Status int
				Code   string
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("%v: %s", err, w.Body)
			}
			retry, _ := strconv.Atoi(w.Header().Get("Retry-After"))
			if tc.unavailable {
				if w.Code != http.StatusServiceUnavailable || body.Status != w.Code || body.Code != problem.CodeUnavailable || retry <= 0 {
					t.Errorf("%v: %d Retry-After %q %s, want 503 unavailable with Retry-After", tc.err, w.Code, w.Header().Get("Retry-After"), w.Body)
				}
			} else if w.Code == http.StatusServiceUnavailable {
				t.Errorf("%v: 503 %s, for an error that is not the database's absence", tc.err, w.Body)
			}
		})
	}
}

// liveShapes are the errors pgx itself gives for a query and for a batch
// whose connection ends mid-statement, closed or reset, for the next
// statement on that connection, and for a server where nothing listens:
// from a fake server on loopback that greets, takes a statement and
// drops the connection unanswered.
func liveShapes(t *testing.T) []errShape {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	statements := []struct {
		name string
		run  func(*pgx.Conn) error
	}{
		{"query", func(c *pgx.Conn) error {
			var n int
			return c.QueryRow(ctx, "SELECT $1::int", 1).Scan(&n)
		}},
		{"batch", func(c *pgx.Conn) error {
			b := &pgx.Batch{}
			b.Queue("SELECT $1::int", 1)
			b.Queue("COMMIT")
			return c.SendBatch(ctx, b).Close()
		}},
	}
	var out []errShape
	for _, how := range []string{"closed", "reset"} {
		addr := cuttingServer(t, how == "reset")
		for _, st := range statements {
			conn, err := pgx.Connect(ctx, "postgres://keygate@"+addr+"/keygate?sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			for _, when := range []string{"mid-statement", "afterwards"} {
				err := st.run(conn)
				if err == nil {
					t.Fatalf("a %s on a connection %s succeeded", st.name, how)
				}
				out = append(out, errShape{fmt.Sprintf("live: %s, connection %s, %s", st.name, how, when), err, true})
			}
			conn.Close(ctx)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = pgx.Connect(ctx, "postgres://keygate@"+addr+"/keygate?sslmode=disable")
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	return append(out, errShape{"live: nothing listens", err, true})
}

// cuttingServer serves the start of PostgreSQL's protocol on loopback and
// drops each connection at its first query, unanswered: with a reset
// when reset, else a plain close.
func cuttingServer(t *testing.T, reset bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				be := pgproto3.NewBackend(c, c)
				if _, err := be.ReceiveStartupMessage(); err != nil {
					return
				}
				be.Send(&pgproto3.AuthenticationOk{})
				be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
				be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
				if be.Flush() != nil {
					return
				}
				if _, err := be.Receive(); err != nil {
					return
				}
				if reset {
					c.(*net.TCPConn).SetLinger(0)
				}
			}()
		}
	}()
	return ln.Addr().String()
}
