package notify

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

// smsShipper is a real HTTP endpoint that records the messages it accepts.
type smsShipper struct {
	mu       sync.Mutex
	fail     []int // status codes of the next answers, then 200
	accepted []smsRequest
	calls    int
	badAuth  int
}

func (s *smsShipper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Authorization") != "Bearer sms-token" {
		s.badAuth++
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if len(s.fail) > 0 {
		code := s.fail[0]
		s.fail = s.fail[1:]
		http.Error(w, "try later", code)
		return
	}
	var body smsRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.accepted = append(s.accepted, body)
	w.WriteHeader(http.StatusAccepted)
}

func TestSMSDelivery(t *testing.T) {
	tests := []struct {
		name        string
		fail        []int
		wantRetries int
	}{
		{"accepted at once", nil, 0},
		{"server error once", []int{http.StatusInternalServerError}, 1},
		{"rate limited twice", []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shipper := &smsShipper{fail: tt.fail}
			srv := httptest.NewServer(shipper)
			defer srv.Close()
			sender, err := NewSMSSender(SMSConfig{URL: srv.URL + "/send", Token: "sms-token", From: "+15550100"})
			if err != nil {
				t.Fatal(err)
			}
			db, ob := tempDB(t)
			var oc outcomes
			runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{SMS: sender, OnOutcome: oc.record})))

			enqueue(t, db, ob,
				Message{Channel: SMS, To: "+15550100123", Text: "Your keygate code: 123456"},
				Message{Channel: SMS, To: "+4915112345678", Text: "Дмитрий, code 654321"},
			)
			testwait.For(t, testwait.Generous, "delivery", func() bool { return pending(t, db) == 0 })

			shipper.mu.Lock()
			defer shipper.mu.Unlock()
			if len(shipper.accepted) != 2 {
				t.Fatalf("shipper accepted %d messages, want 2", len(shipper.accepted))
			}
			got := map[string]smsRequest{}
			for _, a := range shipper.accepted {
				got[a.To] = a
			}
			if a := got["+4915112345678"]; a.From != "+15550100" || a.Text != "Дмитрий, code 654321" {
				t.Errorf("accepted %+v", a)
			}
			if _, ok := got["+15550100123"]; !ok {
				t.Errorf("first message missing: %+v", shipper.accepted)
			}
			if oc.get("sms/retry") != tt.wantRetries || oc.get("sms/sent") != 2 {
				t.Errorf("outcomes = %v", oc.n)
			}
		})
	}
}

func TestSMSWrongTokenFails(t *testing.T) {
	shipper := &smsShipper{}
	srv := httptest.NewServer(shipper)
	defer srv.Close()
	sender, err := NewSMSSender(SMSConfig{URL: srv.URL, Token: "wrong", From: "keygate"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(t.Context(), Message{Channel: SMS, To: "+15550100123", Text: "x"}); err == nil {
		t.Fatal("401 counted as delivered")
	}
	if shipper.badAuth != 1 {
		t.Fatalf("badAuth = %d", shipper.badAuth)
	}
}

// TestSMSRefusalEchoingTheText: a shipper that echoes the message in its
// refusal (JSON-escaped, as validation errors often do) gets its status and
// reason into the error, never the password.
func TestSMSRefusalEchoingTheText(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"sender not registered","request":%q}`, body)
	}))
	defer srv.Close()
	sender, err := NewSMSSender(SMSConfig{URL: srv.URL, Token: "sms-token", From: "keygate"})
	if err != nil {
		t.Fatal(err)
	}
	err = sender.Send(t.Context(), Message{Channel: SMS, To: "+15550100123", Text: "493817 is your password to sign “NDA 2”."})
	if err == nil || strings.Contains(err.Error(), "493817") || !strings.Contains(err.Error(), "sender not registered") {
		t.Fatalf("Send = %v; want the reason without the password", err)
	}
}

func TestNewSMSSenderRejectsBadConfig(t *testing.T) {
	for _, cfg := range []SMSConfig{
		{URL: "ftp://sms.example.com", Token: "t"},
		{URL: "https://", Token: "t"},
		{URL: "https://sms.example.com/send"},
	} {
		if _, err := NewSMSSender(cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}
