package signing

import (
	"net/http"
	"testing"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestDeliveryRetried checks that an e-mail and a text the servers refuse
// at first are retried until they are delivered, once each.
func TestDeliveryRetried(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		f.smtp.FailNext(2)
		f.sms.mu.Lock()
		f.sms.failNext = 2
		f.sms.mu.Unlock()

		c := f.create(`{"templateId":"PAGE-1","name":"Retry","signers":[
			{"fullName":"Rae","accessKind":"email","email":"rae@example.com","phone":"+14155552671"}]}`)
		testwait.For(t, testwait.Generous, "the invitation", func() bool { return len(f.smtp.To("rae@example.com", "Please sign")) == 1 })
		if n := f.smtp.Attempts(); n != 3 {
			t.Errorf("%d SMTP attempts, want 2 refused and 1 accepted", n)
		}
		if w := f.requestOTP(c.token(0)); w.Code != http.StatusAccepted {
			t.Fatalf("otp: %d %s", w.Code, w.Body)
		}
		f.otpSMS("+14155552671", 0)
		f.settle()
		if n := len(f.smtp.All()); n != 1 {
			t.Errorf("%d mails, want 1", n)
		}
		if n := len(f.sms.to("+14155552671")); n != 1 {
			t.Errorf("%d texts, want 1", n)
		}
	})
}

// TestRestartDelivers checks that mail queued when the process stops is
// delivered after a restart, and nothing twice.
func TestRestartDelivers(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		if w := f.create(`{"templateId":"PAGE-1","name":"Before","signers":[{"fullName":"Ida","accessKind":"email","email":"ida@example.com","otpMethod":"none"}]}`); w == nil {
			t.Fatal("no contract")
		}
		f.settle()

		// The worker stops with two invitations queued, and the process
		// ends (restart closes the database).
		f.worker.Stop()
		f.create(`{"templateId":"PAGE-1","name":"During","signers":[
			{"fullName":"Jo","accessKind":"email","email":"jo@example.com","otpMethod":"none"},
			{"fullName":"Lu","accessKind":"email","email":"lu@example.com","otpMethod":"none"}]}`)
		if f.outboxEmpty() {
			t.Fatal("nothing queued")
		}
		if n := len(f.smtp.All()); n != 1 {
			t.Fatalf("%d mails before the restart, want 1", n)
		}

		f.restart()
		f.settle()
		seen := map[string]bool{}
		for _, m := range f.smtp.All() {
			if seen[m.MessageID] {
				t.Errorf("message %s delivered twice", m.MessageID)
			}
			seen[m.MessageID] = true
		}
		want := map[string]int{"ida@example.com": 1, "jo@example.com": 1, "lu@example.com": 1}
		got := map[string]int{}
		for _, m := range f.smtp.All() {
			got[m.To]++
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s got %d mails, want %d", k, got[k], v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("mails to %v", got)
		}
	})
}
