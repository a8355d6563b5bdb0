package notify

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// slowSender takes a while over each message and records which instance
// sent which message.
type slowSender struct {
	name  string
	delay time.Duration
	log   *sendLog
}

type sendLog struct {
	mu   sync.Mutex
	sent map[uint64][]string // message id -> instances that sent it
}

func (l *sendLog) add(id uint64, by string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent == nil {
		l.sent = map[uint64][]string{}
	}
	l.sent[id] = append(l.sent[id], by)
}

func (l *sendLog) snapshot() map[uint64][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uint64][]string{}
	for id, by := range l.sent {
		out[id] = append([]string(nil), by...)
	}
	return out
}

func (s slowSender) Send(ctx context.Context, m Message) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	s.log.add(m.ID, s.name)
	return nil
}

// TestLeaseTwoInstances: two gateway instances (each its own pool, outbox
// and worker) deliver from one PostgreSQL schema; every message is sent
// exactly once, and both instances take part.
func TestLeaseTwoInstances(t *testing.T) {
	db1 := storetest.OpenPostgres(t).(*pgdb.DB)
	db2 := openInstance(t, db1)
	ob1, ob2 := newOutbox(t, db1), newOutbox(t, db2)
	var log sendLog
	runWorker(t, NewWorker(ob1, fastConfig(WorkerConfig{Email: slowSender{"one", 10 * time.Millisecond, &log}})))
	runWorker(t, NewWorker(ob2, fastConfig(WorkerConfig{Email: slowSender{"two", 10 * time.Millisecond, &log}})))

	const n = 80
	start := time.Now()
	for i := 0; i < n; i += 8 {
		var msgs []Message
		for j := i; j < i+8; j++ {
			msgs = append(msgs, Message{Channel: Email, To: fmt.Sprintf("s%d@example.org", j), Subject: "Invitation", Text: "Sign"})
		}
		if i%16 == 0 {
			enqueue(t, db1, ob1, msgs...)
		} else {
			enqueue(t, db2, ob2, msgs...)
		}
	}
	testwait.For(t, testwait.Generous, "delivery", func() bool { return pending(t, db1) == 0 })

	t.Logf("%d messages delivered in %v", n, time.Since(start))
	sent := log.snapshot()
	if len(sent) != n {
		t.Errorf("%d messages sent, want %d", len(sent), n)
	}
	per := map[string]int{}
	for id, by := range sent {
		if len(by) != 1 {
			t.Errorf("message %d sent %d times, by %v", id, len(by), by)
		}
		per[by[0]]++
	}
	t.Logf("sent per instance: %v", per)
	if per["one"] == 0 || per["two"] == 0 {
		t.Errorf("sent per instance: %v; want both to take part", per)
	}
}

// stuckSender never finishes its first send until released, whatever its
// context says: the process is hung or dead.
type stuckSender struct {
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *stuckSender) Send(context.Context, Message) error {
	s.once.Do(func() { close(s.held) })
	<-s.release
	return fmt.Errorf("the process died")
}

// stampedSender captures messages and when each send began.
type stampedSender struct {
	captured
	mu sync.Mutex
	at []time.Time
}

func (s *stampedSender) Send(ctx context.Context, m Message) error {
	now := time.Now()
	s.mu.Lock()
	s.at = append(s.at, now)
	s.mu.Unlock()
	return s.captured.Send(ctx, m)
}

// sentAt is when the i-th send began.
func (s *stampedSender) sentAt(i int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[i]
}

// TestLeaseOfDeadInstance: an instance that dies while sending (its
// context ends, its send never returns, nothing is released) keeps its
// message from the other instance only until its lease ends; the other
// then delivers it, once, and the dead one's late failure changes nothing.
func TestLeaseOfDeadInstance(t *testing.T) {
	const lease = time.Second
	db1 := storetest.OpenPostgres(t).(*pgdb.DB)
	db2 := openInstance(t, db1)
	ob1, ob2 := newOutbox(t, db1), newOutbox(t, db2)

	stuck := &stuckSender{held: make(chan struct{}), release: make(chan struct{})}
	cfg := fastConfig(WorkerConfig{Email: stuck})
	cfg.SendTimeout, cfg.Lease = lease/2, lease
	dead := NewWorker(ob1, cfg)
	ctx, kill := context.WithCancel(context.Background())
	deadDone := make(chan error, 1)
	go func() { deadDone <- dead.Run(ctx) }()
	t.Cleanup(func() {
		close(stuck.release)
		if err := <-deadDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	// The lease starts at the take's now(), after enqueued: no send by
	// the other instance may begin before enqueued+lease. (The server's
	// clock is this machine's: the tests' server runs on it.)
	enqueued := time.Now()
	enqueue(t, db1, ob1, Message{Channel: Email, To: "zoe@example.org", Subject: "Your password", Text: "123456"})
	<-stuck.held
	kill()

	email := &stampedSender{}
	cfg = fastConfig(WorkerConfig{Email: email})
	cfg.SendTimeout, cfg.Lease = lease/2, lease
	runWorker(t, NewWorker(ob2, cfg))
	testwait.For(t, testwait.Generous, "delivery by the other instance", func() bool { return len(email.all()) == 1 })
	if waited := email.sentAt(0).Sub(enqueued); waited < lease {
		t.Errorf("the other instance sent the message %v after it was queued, before the %v lease ended", waited, lease)
	}
	testwait.For(t, testwait.Generous, "removal", func() bool { return pending(t, db2) == 0 })

	// The dead instance's send fails at last: its reschedule must not
	// bring the message back, nor may it be sent again.
	close(stuck.release)
	if err := <-deadDone; err != nil {
		t.Fatal(err)
	}
	stuck.release = make(chan struct{})
	deadDone <- nil
	time.Sleep(50 * time.Millisecond)
	if n := pending(t, db2); n != 0 || len(email.all()) != 1 {
		t.Errorf("after the dead instance's failure: pending %d, sent %d; want 0 and 1", n, len(email.all()))
	}
}
