package signing

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/mailtest"
	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/pdftest"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/testclock"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)

// fixture is a database with the lifecycle, the contracts API and the
// signing pages, a real SMTP server and SMS endpoint, and a delivery
// worker sending to them.
type fixture struct {
	t      *testing.T
	dbPath string
	db     *bbolt.DB
	svc    *Service
	api    http.Handler
	pages  http.Handler
	clock  *testclock.Clock
	outbox *notify.Outbox
	worker *notify.Worker
	smtp   *mailtest.Server
	sms    *testSMS
	// senders are the worker's, kept to restart it after a reopen.
	email, text notify.Sender
}

const testOTPKey = "0123456789abcdef0123456789abcdef"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, dbPath: filepath.Join(t.TempDir(), "webapi.db"), clock: testclock.New(t0)}
	f.smtp = mailtest.Start(t)
	f.sms = startSMS(t)
	var err error
	if f.email, err = notify.NewSMTPSender(notify.SMTPConfig{Addr: f.smtp.Addr, From: "Contracts <contracts@example.com>", TLS: notify.TLSNone}); err != nil {
		t.Fatal(err)
	}
	if f.text, err = notify.NewSMSSender(notify.SMSConfig{URL: f.sms.srv.URL, Token: "sms-token", From: "+15550100"}); err != nil {
		t.Fatal(err)
	}
	f.open()
	t.Cleanup(f.close)
	return f
}

// open opens the database and starts the lifecycle and the worker.
func (f *fixture) open() {
	t := f.t
	t.Helper()
	db, err := bbolt.Open(f.dbPath, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
	sdb, cb, tpl := boltContracts(t, db)
	if _, err := tpl.Put(contracts.Template{ID: "PAGE-1", CollectionID: "SPACE-A", Title: "Lease agreement",
		Body: "The tenant shall pay the rent on the first day of each month.\nThe landlord shall keep the roof sound."}); err != nil {
		t.Fatal(err)
	}
	sealer, err := keystore.NewSealer([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	if f.outbox, err = newBoltOutbox(db, sealer); err != nil {
		t.Fatal(err)
	}
	f.svc, err = New(contracts.Config{DB: sdb, Backend: cb, Templates: tpl, Sealer: sealer, PublicBaseURL: "https://sign.example.com",
		SMSConfigured: true, Now: f.clock.Now}, Config{Outbox: f.outbox, OTPKey: []byte(testOTPKey)})
	if err != nil {
		t.Fatal(err)
	}
	f.api = contracts.NewHandler(f.svc.Contracts())
	f.pages = f.svc.Handler()
	f.startWorker()
}

func (f *fixture) startWorker() {
	f.worker = notify.NewWorker(f.outbox, notify.WorkerConfig{Email: f.email, SMS: f.text,
		BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	go f.worker.Run(context.Background())
}

func (f *fixture) close() {
	if f.db == nil {
		return
	}
	f.worker.Stop()
	f.db.Close()
	f.db = nil
}

// api sends a request to the contracts API as the key of owner alice.
func (f *fixture) apiDo(method, target, body string) *httptest.ResponseRecorder {
	f.t.Helper()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	}
	r = r.WithContext(keystore.WithIdentity(r.Context(), &keystore.Identity{KeyID: "key-alice", Owner: "alice", Service: keystore.ServiceContracts}))
	w := httptest.NewRecorder()
	f.api.ServeHTTP(w, r)
	return w
}

// created is what the tests need of a new contract.
type created struct {
	ID      string
	Signers []struct {
		ID        string `json:"id"`
		AccessURL string `json:"accessUrl"`
	}
}

// token is the signing token of signer i.
func (c *created) token(i int) string {
	u := c.Signers[i].AccessURL
	return u[strings.LastIndexByte(u, '/')+1:]
}

func (f *fixture) create(body string) *created {
	f.t.Helper()
	w := f.apiDo(http.MethodPost, contracts.Prefix, body)
	if w.Code != http.StatusCreated {
		f.t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var c created
	if err := json.Unmarshal(w.Body.Bytes(), &c); err != nil {
		f.t.Fatal(err)
	}
	return &c
}

// contract reads contract id through the API.
func (f *fixture) contract(id string) map[string]any {
	f.t.Helper()
	w := f.apiDo(http.MethodGet, contracts.Prefix+"/"+id, "")
	if w.Code != http.StatusOK {
		f.t.Fatalf("get: %d %s", w.Code, w.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// page sends a request to the signing pages from 192.0.2.7.
func (f *fixture) page(method, target, contentType, body string, header ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.RemoteAddr = "192.0.2.7:40000"
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	f.pages.ServeHTTP(w, r)
	return w
}

func (f *fixture) requestOTP(token string) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.page(http.MethodPost, "/sign/"+token+"/otp", "", "")
}

func (f *fixture) decide(token string, body map[string]string) *httptest.ResponseRecorder {
	f.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.page(http.MethodPost, "/sign/"+token+"/decision", "application/json", string(raw))
}

// view reads the JSON signing page of token.
func (f *fixture) view(token string) pageView {
	f.t.Helper()
	w := f.page(http.MethodGet, "/sign/"+token, "", "", "Accept", "application/json")
	if w.Code != http.StatusOK {
		f.t.Fatalf("page: %d %s", w.Code, w.Body)
	}
	var v pageView
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// outboxEmpty reports whether nothing waits for delivery.
func (f *fixture) outboxEmpty() bool {
	n := -1
	_ = f.db.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket([]byte("notify_outbox")).Bucket([]byte("msg")).Stats().KeyN
		return nil
	})
	return n == 0
}

// settle waits until every queued message is delivered.
func (f *fixture) settle() {
	f.t.Helper()
	waitFor(f.t, "the outbox to drain", f.outboxEmpty)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var otpPattern = regexp.MustCompile(`\b(\d{6})\b`)

// otpMail waits for a one-time password e-mail to addr beyond the first
// seen ones and returns its code.
func (f *fixture) otpMail(addr string, seen int) string {
	f.t.Helper()
	var code string
	waitFor(f.t, "a password e-mail to "+addr, func() bool {
		ms := f.smtp.To(addr, "Your one-time password")
		if len(ms) <= seen {
			return false
		}
		code = otpPattern.FindString(ms[len(ms)-1].Text)
		return true
	})
	return code
}

func (f *fixture) otpSMS(phone string, seen int) string {
	f.t.Helper()
	var code string
	waitFor(f.t, "a password text to "+phone, func() bool {
		ms := f.sms.to(phone)
		if len(ms) <= seen {
			return false
		}
		code = otpPattern.FindString(ms[len(ms)-1].Text)
		return true
	})
	return code
}

// decodeProblem checks a problem reply's status and code.
func decodeProblem(t *testing.T, w *httptest.ResponseRecorder, status int, code string) problem.Details {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type %q, want %q; body %s", ct, problem.ContentType, w.Body)
	}
	var d problem.Details
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != code {
		t.Fatalf("problem %+v, want code %s", d, code)
	}
	return d
}

// drawing is a PNG with a stroke on a transparent background.
func drawing(t *testing.T) string {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, 300, 100))
	for x := 20; x < 280; x++ {
		img.Set(x, 50+(x%20)-10, color.NRGBA{10, 20, 80, 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// testSMS is the SMS shipper: it records the texts it accepts.
type testSMS struct {
	srv *httptest.Server

	mu       sync.Mutex
	received []smsMsg
	failNext int
}

type smsMsg struct {
	To, From, Text string
}

func startSMS(t *testing.T) *testSMS {
	t.Helper()
	ts := &testSMS{}
	ts.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sms-token" {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		var m smsMsg
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if ts.failNext > 0 {
			ts.failNext--
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		ts.received = append(ts.received, m)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(ts.srv.Close)
	return ts
}

func (ts *testSMS) to(phone string) []smsMsg {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []smsMsg
	for _, m := range ts.received {
		if m.To == phone {
			out = append(out, m)
		}
	}
	return out
}

// pdfText is the text of a PDF made by contractpdf.
func pdfText(t *testing.T, data []byte) string { return pdftest.Read(t, data).Text }

// countBy counts mails by recipient and subject.
func countBy(ms []mailtest.Mail) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		out[fmt.Sprintf("%s | %s", m.To, m.Subject)]++
	}
	return out
}

// newBoltOutbox is the notification outbox on the bbolt database db.
func newBoltOutbox(db *bbolt.DB, sealer *keystore.Sealer) (*notify.Outbox, error) {
	sdb := boltdb.New(db)
	backend, err := notify.NewBoltBackend(sdb)
	if err != nil {
		return nil, err
	}
	return notify.NewOutbox(sdb, backend, sealer)
}
