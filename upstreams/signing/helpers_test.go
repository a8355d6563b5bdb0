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
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/docseal"
	"github.com/keygate/keygate/internal/seal"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/eventstest"
	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/upstreams/contracts"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)

// fixture is a database with the lifecycle, the contracts API and the
// signing pages, a real SMTP server and SMS endpoint, and a delivery
// worker sending to them.
type fixture struct {
	t       *testing.T
	db      storage.DB
	svc     *Service
	backend Backend // the signing records' backend of db
	tpl     *contracts.Templates
	api     http.Handler
	pages   http.Handler
	clock   *testclock.Clock
	outbox  *notify.Outbox
	worker  *notify.Worker
	smtp    *mailtest.Server
	sms     *testSMS
	// senders are the worker's, kept to restart it after a reopen.
	email, text notify.Sender
	// closed is set once close has stopped the worker and closed db.
	closed bool
	// events records the contract events the lifecycle emits, in db.
	events *eventstest.Recorder
}

const testOTPKey = "0123456789abcdef0123456789abcdef"

// newFixture runs the lifecycle on db, a fresh database of one backend
// (storetest.Run hands one of each).
func newFixture(t *testing.T, db storage.DB) *fixture {
	t.Helper()
	f := &fixture{t: t, db: db, clock: testclock.New(t0)}
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

// open builds the lifecycle on f.db and starts the worker.
func (f *fixture) open() {
	t := f.t
	t.Helper()
	f.closed = false
	cb, tpl := contractStores(t, f.db)
	f.tpl = tpl
	if _, err := tpl.Put(contracts.Template{ID: "PAGE-1", CollectionID: "SPACE-A", Title: "Lease agreement",
		Body: "The tenant shall pay the rent on the first day of each month.\nThe landlord shall keep the roof sound."}); err != nil {
		t.Fatal(err)
	}
	sealer, err := seal.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	f.outbox = newOutbox(t, f.db, sealer)
	f.backend = newBackend(t, f.db)
	f.events = eventstest.New(t, f.db)
	f.svc, err = New(contracts.Config{DB: f.db, Backend: cb, Templates: tpl, Sealer: sealer, PublicBaseURL: "https://sign.example.com",
		SMSConfigured: true, Now: f.clock.Now, Events: f.events,
		Idempotency: newIdempotency(t, f.db, sealer, f.clock.Now)}, Config{Outbox: f.outbox, Backend: f.backend, OTPKey: []byte(testOTPKey), Seal: testSeal(t)})
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

// close stops the worker and closes the database, as the process does
// when it ends.
func (f *fixture) close() {
	if f.closed {
		return
	}
	f.worker.Stop()
	f.svc.WaitSealing()
	f.db.Close()
	f.closed = true
}

// restart stops the worker, closes the database and opens it again with
// a new lifecycle and worker, as a restarted process does.
func (f *fixture) restart() {
	f.t.Helper()
	f.worker.Stop()
	f.svc.WaitSealing()
	f.db = reopen(f.t, f.db)
	f.open()
	// After reopen's cleanup, so that it runs first: the worker stops
	// before its database closes.
	f.t.Cleanup(f.close)
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
	r = r.WithContext(access.WithIdentity(r.Context(), &access.Identity{KeyID: "key-alice", Owner: "alice", Service: access.ServiceContracts}))
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
	return decodeCreated(f.t, w.Body.Bytes())
}

func decodeCreated(t testing.TB, body []byte) *created {
	t.Helper()
	var c created
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
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
func (f *fixture) outboxEmpty() bool { return f.count(storedMessages) == 0 }

// count counts the records of kind in the fixture's database.
func (f *fixture) count(kind storedKind) int {
	f.t.Helper()
	return count(f.t, f.db, kind)
}

// settle waits until every completion's documents are sealed and every
// queued message is delivered.
func (f *fixture) settle() {
	f.t.Helper()
	testwait.For(f.t, testwait.Generous, "the completions to be sealed and the outbox to drain", func() bool {
		return f.count(storedSealQueue) == 0 && f.outboxEmpty()
	})
}

// sealed waits until contract id's documents are sealed and returns the
// contract as the API shows it then.
func (f *fixture) sealed(id string) map[string]any {
	f.t.Helper()
	var got map[string]any
	testwait.For(f.t, testwait.Generous, "the documents of "+id+" to be sealed", func() bool {
		got = f.contract(id)
		return got["documentStatus"] == "sealed"
	})
	return got
}

// digest is storetest.Digest of the fixture's database once the worker
// has delivered what was queued: delivery changes the outbox, a refused
// request must not change anything.
func (f *fixture) digest() [32]byte {
	f.t.Helper()
	f.settle()
	return storetest.Digest(f.t, f.db)
}

// unchanged fails t unless the database is as it was when before was
// taken (f.digest).
func (f *fixture) unchanged(t *testing.T, before [32]byte, what string) {
	t.Helper()
	if f.digest() != before {
		t.Errorf("%s changed the database", what)
	}
}

var otpPattern = regexp.MustCompile(`\b(\d{6})\b`)

// otpMail waits for a one-time password e-mail to addr beyond the first
// seen ones and returns its code.
func (f *fixture) otpMail(addr string, seen int) string {
	f.t.Helper()
	var code string
	testwait.For(f.t, testwait.Generous, "a password e-mail to "+addr, func() bool {
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
	testwait.For(f.t, testwait.Generous, "a password text to "+phone, func() bool {
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
	problemtest.SecureHeaders(t, status, w.Header())
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

// otp reads signer's stored one-time password through the backend, nil
// when none. Backend.OTP locks the record, so it reads in a write
// transaction (that writes nothing).
func (f *fixture) otp(signerID string) *OTPRecord {
	f.t.Helper()
	return readOTP(f.t, f.db, f.backend, signerID)
}

func readOTP(tb testing.TB, db storage.DB, b Backend, signerID string) *OTPRecord {
	tb.Helper()
	var rec *OTPRecord
	if err := db.Update(context.Background(), func(tx storage.Tx) (err error) {
		rec, err = b.OTP(tx, signerID)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return rec
}

// testSeal seals completed contracts' documents as the gateway does, with
// a self-made certificate.
func testSeal(t testing.TB) func([]byte, *contracts.Contract) ([]byte, error) {
	cert, err := docseal.MakeSelfSigned("sign.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sealer := docseal.NewSigner(cert, "")
	return func(doc []byte, c *contracts.Contract) ([]byte, error) {
		out, _, err := sealer.Seal(doc, docseal.Info{Name: "keygate document seal", Reason: "contract " + c.ID + " completed", Time: time.Now()})
		return out, err
	}
}
