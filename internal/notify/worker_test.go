package notify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestWorkerRetriesFailedDelivery: a server that refuses a message once,
// temporarily or permanently, gets it again after the backoff, and the
// recipient ends up with one copy.
func TestWorkerRetriesFailedDelivery(t *testing.T) {
	for _, code := range []int{421, 451, 550, 554} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, db storage.DB) {
				ts := startSMTP(t, smtpSetup{mode: TLSNone})
				ts.failNext(1, code)
				ob := newOutbox(t, db)
				var oc outcomes
				runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{Email: smtpSender(t, ts, TLSNone, "", ""), OnOutcome: oc.record})))

				enqueue(t, db, ob, Message{Channel: Email, To: "zoe@example.org", Subject: "Invitation", Text: "Sign here"})
				testwait.For(t, testwait.Generous, "delivery", func() bool { return pending(t, db) == 0 })

				if got := len(ts.mails()); got != 1 {
					t.Fatalf("received %d copies, want 1", got)
				}
				if got := ts.dataAttempts(); got != 2 {
					t.Errorf("server saw %d DATA commands, want 2", got)
				}
				if oc.get("email/retry") != 1 || oc.get("email/sent") != 1 || oc.get("email/failed") != 0 {
					t.Errorf("outcomes = %v", oc.n)
				}
			})
		})
	}
}

// TestWorkerGivesUp: after MaxAttempts failures the message is reported
// failed and removed, with everything it stored.
func TestWorkerGivesUp(t *testing.T) {
	refusing := startSMTP(t, smtpSetup{mode: TLSNone})
	refusing.failNext(1000, 451)
	tests := []struct {
		name   string
		sender Sender
		msg    Message
	}{
		{"server refuses every time", smtpSender(t, refusing, TLSNone, "", ""),
			Message{Channel: Email, To: "a@example.org", Text: "x", Ref: "c9", Attachments: []Attachment{{Name: "a.pdf", MediaType: "application/pdf", Data: []byte("%PDF")}}}},
		{"no sender configured", nil, Message{Channel: SMS, To: "+15550100123", Text: "123456", Ref: "c9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, db storage.DB) {
				ob := newOutbox(t, db)
				var oc outcomes
				cfg := fastConfig(WorkerConfig{MaxAttempts: 3, OnOutcome: oc.record})
				cfg.Email = tt.sender
				runWorker(t, NewWorker(ob, cfg))

				enqueue(t, db, ob, tt.msg)
				ch := string(tt.msg.Channel)
				testwait.For(t, testwait.Generous, "give-up", func() bool { return oc.get(ch+"/failed") == 1 })
				testwait.For(t, testwait.Generous, "removal", func() bool { return pending(t, db) == 0 })
				if got := oc.get(ch + "/retry"); got != 2 {
					t.Errorf("retries = %d, want 2", got)
				}
				if c := counts(t, db); c["att"]+c["due"]+c["ref"] != 0 {
					t.Errorf("outbox left entries behind: %v", c)
				}
			})
		})
	}
}

// gatedSender holds the send number holdAt until release is closed, so a
// test can stop the worker while a message is in flight.
type gatedSender struct {
	next    Sender
	holdAt  int
	held    chan struct{}
	release chan struct{}

	mu    sync.Mutex
	calls int
}

func (g *gatedSender) Send(ctx context.Context, m Message) error {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	if n == g.holdAt {
		close(g.held)
		<-g.release
	}
	return g.next.Send(ctx, m)
}

// TestRestartDeliversPendingOnce stops the worker while a message is in
// flight, closes the database with messages still queued, reopens it in a
// new worker and checks that every message arrives exactly once.
func TestRestartDeliversPendingOnce(t *testing.T) { storetest.Run(t, testRestartDeliversPendingOnce) }

func testRestartDeliversPendingOnce(t *testing.T, db storage.DB) {
	ts := startSMTP(t, smtpSetup{mode: TLSStartTLS, user: "bot", password: "pw"})
	const n = 8
	var msgs []Message
	for i := range n {
		msgs = append(msgs, Message{Channel: Email, To: fmt.Sprintf("s%d@example.org", i), Subject: "Signed", Text: "Done"})
	}

	// First process: three messages go out, the third while Stop is called.
	ob := newOutbox(t, db)
	enqueue(t, db, ob, msgs...)
	gate := &gatedSender{next: smtpSender(t, ts, TLSStartTLS, "bot", "pw"), holdAt: 3, held: make(chan struct{}), release: make(chan struct{})}
	w := NewWorker(ob, fastConfig(WorkerConfig{Email: gate}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	<-gate.held
	cancel() // the process is shutting down while the third send is in flight
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a send was in flight")
	default:
	}
	close(gate.release)
	<-stopped
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := len(ts.mails()); got != 3 {
		t.Fatalf("first process delivered %d, want 3 (the one in flight completes)", got)
	}
	if got := pending(t, db); got != n-3 {
		t.Fatalf("pending after stop = %d, want %d", got, n-3)
	}

	// Second process: the rest, none twice.
	db = reopen(t, db)
	ob = newOutbox(t, db)
	runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{Email: smtpSender(t, ts, TLSStartTLS, "bot", "pw")})))
	testwait.For(t, testwait.Generous, "remaining deliveries", func() bool { return pending(t, db) == 0 })

	seen := map[string]int{}
	for _, r := range ts.mails() {
		seen[strings.Join(r.to, ",")]++
	}
	for _, m := range msgs {
		if seen[m.To] != 1 {
			t.Errorf("%s received %d copies", m.To, seen[m.To])
		}
	}
	if len(seen) != n {
		t.Errorf("recipients = %d, want %d", len(seen), n)
	}
}

// TestRolledBackEnqueueIsNeverSent: a notification exists only if the
// change that caused it committed.
func TestRolledBackEnqueueIsNeverSent(t *testing.T) {
	storetest.Run(t, testRolledBackEnqueueIsNeverSent)
}

func testRolledBackEnqueueIsNeverSent(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	changeFailed := errors.New("change failed")
	err := db.Update(context.Background(), func(tx storage.Tx) error {
		if err := ob.Enqueue(tx, Message{Channel: Email, To: "a@example.org", Text: "x"}); err != nil {
			return err
		}
		return changeFailed
	})
	if !errors.Is(err, changeFailed) {
		t.Fatal(err)
	}
	if got := pending(t, db); got != 0 {
		t.Fatalf("pending = %d after rollback", got)
	}
}

func TestWorkerRunStop(t *testing.T) { storetest.Run(t, testWorkerRunStop) }

func testWorkerRunStop(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	w := NewWorker(ob, WorkerConfig{})
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	testwait.For(t, testwait.Generous, "worker start", func() bool { return ob.running.Load() })

	other := NewWorker(ob, WorkerConfig{})
	if err := other.Run(context.Background()); !errors.Is(err, ErrWorkerRunning) {
		t.Fatalf("second worker on the same outbox: %v, want ErrWorkerRunning", err)
	}
	w.Stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	w.Stop() // idempotent
	if err := w.Run(context.Background()); err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}

	// Ending the context also ends Run, and frees the outbox for another worker.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errc <- other.Run(ctx) }()
	testwait.For(t, testwait.Generous, "second worker start", func() bool { return ob.running.Load() })
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if ob.running.Load() {
		t.Fatal("outbox still marked running")
	}
}

func TestBackoff(t *testing.T) {
	base, maxDelay := time.Second, time.Minute
	tests := []struct {
		failed int
		want   time.Duration // before jitter
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {50, time.Minute},
	}
	for _, tt := range tests {
		for range 100 {
			d := backoff(base, maxDelay, tt.failed)
			if d < tt.want/2 || d > tt.want {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", tt.failed, d, tt.want/2, tt.want)
			}
		}
	}
}

// TestWorkerFullDiskAfterSend: a message delivered whose removal from the
// outbox fails (the disk is full) is not sent again; the worker retries
// the removal alone, soon, until the disk has room.
func TestWorkerFullDiskAfterSend(t *testing.T) { storetest.Run(t, testWorkerFullDiskAfterSend) }

func testWorkerFullDiskAfterSend(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	var sent captured
	w := NewWorker(ob, fastConfig(WorkerConfig{Email: &sent}))
	var mu sync.Mutex
	failures := 0
	// Once the message is sent, the next four writes fail.
	w.updateDB = func(ctx context.Context, fn func(storage.Tx) error) error {
		if len(sent.all()) > 0 {
			mu.Lock()
			fail := failures < 4
			if fail {
				failures++
			}
			mu.Unlock()
			if fail {
				return &os.PathError{Op: "write", Path: "webapi.db", Err: syscall.ENOSPC}
			}
		}
		return db.Update(ctx, fn)
	}
	runWorker(t, w)
	enqueue(t, db, ob, Message{Channel: Email, To: "zoe@example.org", Subject: "Invitation", Text: "Sign here"})
	testwait.For(t, testwait.Generous, "removal once the disk has room", func() bool { return pending(t, db) == 0 })
	if n := len(sent.all()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if failures != 4 {
		t.Errorf("%d failed removals, want 4", failures)
	}
}
