package signing

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
	"github.com/keygate/keygate/upstreams/contracts"
)

// fuzzFixture is a database with the lifecycle and the signing pages but
// no delivery worker: queued notifications stay in the outbox, where the
// fuzz functions count them. One per fuzz function and backend, since
// f.Fuzz's body must be fast.
type fuzzFixture struct {
	name    string // the backend's
	db      storage.DB
	backend Backend
	svc     *Service
	api     http.Handler
	pages   http.Handler
	// token is the signing token of the first signer of the contract the
	// inputs go to; a decision that succeeds moves it to a new contract.
	token, id string
	// decided is the id of the signer whose decision was last recorded,
	// lastID its contract.
	decided, lastID string
}

// newFuzzFixtures opens a fixture on each backend an input runs on
// (storetest.FuzzBackends).
func newFuzzFixtures(f *testing.F) []*fuzzFixture {
	f.Helper()
	var out []*fuzzFixture
	for _, b := range storetest.FuzzBackends() {
		out = append(out, newFuzzFixture(f, b.Name, b.Open(f)))
	}
	return out
}

// runFuzz runs fn on each fixture, as subtests named after the backends.
func runFuzz(t *testing.T, fxs []*fuzzFixture, fn func(t *testing.T, fx *fuzzFixture)) {
	t.Helper()
	for _, fx := range fxs {
		t.Run(fx.name, func(t *testing.T) { fn(t, fx) })
	}
}

func newFuzzFixture(tb testing.TB, name string, db storage.DB) *fuzzFixture {
	tb.Helper()
	if d, ok := db.(*boltdb.DB); ok {
		// A crash of the test loses nothing worth keeping.
		d.Bolt.NoSync = true
	}
	cb, tpl := contractStores(tb, db)
	if _, err := tpl.Put(contracts.Template{ID: "PAGE-1", CollectionID: "SPACE-A", Title: "Lease", Body: "The tenant shall pay."}); err != nil {
		tb.Fatal(err)
	}
	sealer, err := seal.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		tb.Fatal(err)
	}
	backend := newBackend(tb, db)
	svc, err := New(contracts.Config{DB: db, Backend: cb, Templates: tpl, Sealer: sealer, PublicBaseURL: "https://sign.example.com",
		SMSConfigured: true, Now: testclock.New(t0).Now}, Config{Outbox: newOutbox(tb, db, sealer), Backend: backend, OTPKey: []byte(testOTPKey)})
	if err != nil {
		tb.Fatal(err)
	}
	f := &fuzzFixture{name: name, db: db, backend: backend, svc: svc, api: contracts.NewHandler(svc.Contracts()), pages: svc.Handler()}
	f.next(tb)
	return f
}

// next creates the contract the following inputs decide on: two signers
// in turn, so that the first one's signature completes nothing (no PDF
// is rendered), a signer without a one-time password, so that a valid
// body is a decision, and a watcher, so that a decision queues mail.
func (f *fuzzFixture) next(tb testing.TB) {
	tb.Helper()
	r := httptest.NewRequest(http.MethodPost, contracts.Prefix, strings.NewReader(`{"templateId":"PAGE-1","name":"Fuzz",
		"sequentialSigning":true,
		"signers":[{"fullName":"Sam Signer","accessKind":"url"},{"fullName":"Kim","accessKind":"url"}],
		"watchers":[{"name":"Desk","email":"desk@example.com","notificationKinds":"signed|rejected"}]}`))
	r.Header.Set("Content-Type", "application/json")
	r = r.WithContext(access.WithIdentity(r.Context(), &access.Identity{KeyID: "key-alice", Owner: "alice", Service: access.ServiceContracts}))
	w := httptest.NewRecorder()
	f.api.ServeHTTP(w, r)
	var c created
	if w.Code != http.StatusCreated || json.Unmarshal(w.Body.Bytes(), &c) != nil {
		tb.Fatalf("create: %d %s", w.Code, w.Body)
	}
	f.token, f.id = c.token(0), c.ID
}

// decide posts body to the decision of the current contract's first
// signer and checks the property: a success records the decision (and
// the fixture moves on to a new contract); anything else is a 4xx, a
// problem body for JSON clients, with the database unchanged.
func (f *fuzzFixture) decide(t *testing.T, contentType string, body []byte, acceptJSON bool) *httptest.ResponseRecorder {
	t.Helper()
	if f.lastID != "" {
		// The contract of the previous success, once checked, goes: the
		// database stays small and the digests fast.
		if err := f.svc.Contracts().Delete(t.Context(), f.lastID); err != nil {
			t.Fatal(err)
		}
		f.lastID = ""
	}
	r := httptest.NewRequest(http.MethodPost, "/sign/"+f.token+"/decision", bytes.NewReader(body))
	r.RemoteAddr = "192.0.2.7:40000"
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if acceptJSON {
		r.Header.Set("Accept", "application/json")
	}
	before := storetest.Digest(t, f.db)
	w := httptest.NewRecorder()
	f.pages.ServeHTTP(w, r)
	if w.Code == http.StatusOK || w.Code == http.StatusSeeOther {
		c, err := f.svc.Contracts().Get(t.Context(), f.id)
		if err != nil {
			t.Fatal(err)
		}
		if d := c.Signers[0].Decision; d != contracts.DecisionSigned && d != contracts.DecisionRejected {
			t.Fatalf("%d, but the decision stored is %q", w.Code, d)
		}
		if storetest.Digest(t, f.db) == before {
			t.Fatalf("%d, but nothing was stored", w.Code)
		}
		f.decided, f.lastID = c.Signers[0].ID, f.id
		f.next(t)
		return w
	}
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("status %d; body %s", w.Code, w.Body)
	}
	if storetest.Digest(t, f.db) != before {
		t.Fatalf("a %d changed the database; body %s", w.Code, w.Body)
	}
	if jsonMode(r) {
		var d problem.Details
		if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
			t.Fatalf("%d with Content-Type %q", w.Code, ct)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || d.Code == "" || d.Status != w.Code {
			t.Fatalf("problem body %s: %v", w.Body, err)
		}
	} else if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("%d page with Content-Type %q", w.Code, ct)
	}
	return w
}

// FuzzDecision posts arbitrary decision bodies under arbitrary media
// types (JSON, urlencoded and multipart forms among the seeds).
func FuzzDecision(f *testing.F) {
	fxs := newFuzzFixtures(f)
	f.Add("application/json", []byte(`{"decision":"signed","method":"render","signature":"Sam Signer"}`), true)
	f.Add("application/json", []byte(`{"decision":"rejected","reason":"no"}`), false)
	f.Add("application/x-www-form-urlencoded", []byte("decision=signed&method=render&signature=Sam"), false)
	mt, body := multipartBody(map[string]string{"decision": "signed", "method": "upload"}, sigPNG(f, true))
	f.Add(mt, body, false)
	f.Fuzz(func(t *testing.T, contentType string, body []byte, acceptJSON bool) {
		runFuzz(t, fxs, func(t *testing.T, fx *fuzzFixture) {
			w := fx.decide(t, contentType, body, acceptJSON)
			if w.Code != http.StatusOK && w.Code != http.StatusSeeOther {
				return
			}
			// What was recorded is what was sent.
			c, err := fx.svc.Contracts().Get(t.Context(), fx.lastID)
			if err != nil {
				t.Fatal(err)
			}
			if sent := sentDecision(contentType, body); c.Signers[0].Decision != sent {
				t.Fatalf("sent decision %q, recorded %q", sent, c.Signers[0].Decision)
			}
		})
	})
}

// sentDecision reads the decision field of a body as the handler should
// have: JSON or a form, by media type.
func sentDecision(contentType string, body []byte) string {
	if mt, _, _ := mime.ParseMediaType(contentType); problem.IsJSON(mt) {
		var in decisionInput
		_ = json.Unmarshal(body, &in)
		return in.Decision
	}
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	_ = r.ParseMultipartForm(maxDecisionBody)
	return r.PostFormValue("decision")
}

// FuzzSignatureImage wraps arbitrary image bytes in a decision: as
// base64 in JSON (upload), as a data: URL in a form (draw) or as a
// multipart file part (upload), each under a few declared types and
// encodings (mode/3 picks one: the declared type is never trusted). Only
// a PNG or JPEG of at most 4096×4096 that decodes (and, drawn, is not
// blank) may be recorded, and what is recorded is the image as sent.
func FuzzSignatureImage(f *testing.F) {
	fxs := newFuzzFixtures(f)
	for _, img := range [][]byte{sigPNG(f, true), sigPNG(f, false), sigJPEG(f), pngBomb(f, 60000, 60000), []byte("GIF89a")} {
		for mode := range uint8(3) {
			f.Add(mode, img)
		}
	}
	for mode := uint8(3); mode < 12; mode++ {
		f.Add(mode, sigPNG(f, true))
	}
	f.Fuzz(func(t *testing.T, mode uint8, img []byte) {
		ct, body, method := imageDecision(mode, img)
		runFuzz(t, fxs, func(t *testing.T, fx *fuzzFixture) {
			w := fx.decide(t, ct, body, true)
			if w.Code != http.StatusOK {
				return
			}
			cfg, format, err := image.DecodeConfig(bytes.NewReader(img))
			if err != nil || (format != "png" && format != "jpeg") || cfg.Width > 4096 || cfg.Height > 4096 {
				t.Fatalf("recorded a signature that is not a PNG or JPEG within 4096×4096: %v %s %v", err, format, cfg)
			}
			var stored []byte
			var storedMethod string
			if err := fx.db.View(t.Context(), func(tx storage.Tx) (err error) {
				storedMethod, stored, _, err = fx.backend.Signature(tx, fx.decided)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if storedMethod != method || !bytes.Equal(stored, img) {
				t.Fatalf("sent a %d-byte %s signature, stored a %d-byte %s one", len(img), method, len(stored), storedMethod)
			}
		})
	})
}

// imageDecision is the decision body FuzzSignatureImage sends for mode:
// mode%3 picks JSON, form or multipart, mode/3%4 how the image is
// declared and encoded.
func imageDecision(mode uint8, img []byte) (contentType string, body []byte, method string) {
	variant := mode / 3 % 4
	switch mode % 3 {
	case 0:
		sig := base64.StdEncoding.EncodeToString(img)
		switch variant {
		case 1: // a data: URL declaring another type
			sig = "data:image/jpeg;base64," + sig
		case 2: // URL-safe, unpadded
			sig = base64.RawURLEncoding.EncodeToString(img)
		case 3: // MIME line breaks, wrong declared type
			var b strings.Builder
			b.WriteString("data:text/plain;base64,")
			for i := 0; i < len(sig); i += 76 {
				b.WriteString(sig[i:min(i+76, len(sig))] + "\r\n")
			}
			sig = b.String()
		}
		body, _ = json.Marshal(map[string]string{"decision": "signed", "method": "upload", "signature": sig})
		return "application/json", body, contracts.MethodUpload
	case 1:
		mt := [...]string{"image/png", "image/jpeg", "application/octet-stream", "text/html"}[variant]
		body = []byte("decision=signed&method=draw&signature=" + url.QueryEscape("data:"+mt+";base64,"+base64.StdEncoding.EncodeToString(img)))
		return "application/x-www-form-urlencoded", body, contracts.MethodDraw
	}
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.WriteField("decision", "signed")
	mw.WriteField("method", "upload")
	h := make(textproto.MIMEHeader)
	switch variant {
	case 0:
		h.Set("Content-Disposition", `form-data; name="signature"; filename="sig.png"`)
		h.Set("Content-Type", "application/octet-stream")
	case 1:
		h.Set("Content-Disposition", `form-data; name="signature"; filename="sig.jpg"`)
		h.Set("Content-Type", "image/jpeg")
	case 2:
		h.Set("Content-Disposition", `form-data; name="signature"; filename="sig.gif"`)
		h.Set("Content-Type", "image/gif")
	case 3:
		h.Set("Content-Disposition", `form-data; name="signature"; filename="notes.txt"`)
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
	fw, _ := mw.CreatePart(h)
	fw.Write(img)
	mw.Close()
	return mw.FormDataContentType(), b.Bytes(), contracts.MethodUpload
}

// multipartBody is a multipart form with fields and, if file is not nil,
// a signature file part.
func multipartBody(fields map[string]string, file []byte) (string, []byte) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("signature", "sig.png")
		fw.Write(file)
	}
	mw.Close()
	return mw.FormDataContentType(), b.Bytes()
}

// sigPNG is a small PNG with a stroke, or a blank one.
func sigPNG(tb testing.TB, stroke bool) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, 60, 20))
	if stroke {
		for x := 5; x < 55; x++ {
			img.Set(x, 10, color.NRGBA{10, 20, 80, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func sigJPEG(tb testing.TB) []byte {
	img := image.NewGray(image.Rect(0, 0, 40, 16))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, nil); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// pngBomb is a small PNG whose header claims w×h pixels: the decoder
// would allocate the canvas before finding the data short.
func pngBomb(tb testing.TB, w, h uint32) []byte {
	b := sigPNG(tb, true)
	// The IHDR chunk's width and height follow the 8-byte signature and
	// the chunk's length and type; its CRC must be recomputed.
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}
