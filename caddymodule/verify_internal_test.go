package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/keygate/keygate/internal/docseal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/stores"
	"github.com/keygate/keygate/upstreams/contracts/contractpdf"
)

// TestVerifyLimitHoldsUnderManyAddresses: a flood from more addresses
// than are remembered does not give an address that spent its checks
// new ones.
func TestVerifyLimitHoldsUnderManyAddresses(t *testing.T) {
	h := &Verify{limiters: &verifyLimiters{all: make(map[netip.Prefix]*rate.Limiter)}}
	spent := netip.MustParseAddr("192.0.2.1")
	for range verifyBurst {
		if _, ok := h.allow(spent); !ok {
			t.Fatal("refused within the burst")
		}
	}
	for i := range maxVerifyUsers + 100 {
		h.allow(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	if _, ok := h.allow(spent); ok {
		t.Error("the spent address got a check back after a flood of other addresses")
	}
	if len(h.limiters.all) > maxVerifyUsers {
		t.Errorf("%d addresses remembered, at most %d", len(h.limiters.all), maxVerifyUsers)
	}
}

// unknownDocuments is an index of sealed documents that knows none.
type unknownDocuments struct{}

func (unknownDocuments) Record(storage.Tx, [32]byte, string) error { return nil }
func (unknownDocuments) Lookup([32]byte) (string, bool, error)     { return "", false, nil }

// verifyHandler is a /verify handler sealing with a fresh self-made
// certificate, whose index knows no document, allowing checks at once
// checks at a time; and a document it sealed.
func verifyHandler(t *testing.T, checks int) (*Verify, []byte) {
	t.Helper()
	cert, err := docseal.MakeSelfSigned("gw.example.com", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sealer := docseal.NewSigner(cert, "")
	now := time.Now()
	doc, err := contractpdf.Finalized(contractpdf.Input{
		ContractID: "01a2139b-46b7-72cb-bd43-7aba811f6931", Name: "NDA", Body: "Terms.", Created: now,
		Signers: []contractpdf.Signer{{FullName: "Bob Brook", Email: "bob@example.com", Method: contractpdf.MethodRender, TypedName: "Bob Brook",
			Decision: contractpdf.DecisionSigned, DecisionTime: now}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sealed, _, err := sealer.Seal(doc, docseal.Info{Name: "keygate", Time: now})
	if err != nil {
		t.Fatal(err)
	}
	h := &Verify{
		app:      &App{state: &state{stores: &stores.Stores{SealedDocuments: unknownDocuments{}}}, signer: sealer},
		limiters: &verifyLimiters{all: make(map[netip.Prefix]*rate.Limiter)},
		checks:   make(chan struct{}, checks),
	}
	return h, sealed
}

// postVerify posts doc to h as the form does, from its own address.
func postVerify(t *testing.T, h *Verify, doc []byte, accept string) *httptest.ResponseRecorder {
	t.Helper()
	return postVerifyFiles(t, h, accept, doc)
}

// postVerifyFiles posts each of docs in a part of its own, all named
// file.
func postVerifyFiles(t *testing.T, h *Verify, accept string, docs ...[]byte) *httptest.ResponseRecorder {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, doc := range docs {
		fw, err := mw.CreateFormFile("file", "document.pdf")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(doc)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/verify", &b)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r.Header.Set("Accept", accept)
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, r, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestVerifyHostileByteRanges: a genuine seal's signature under byte
// ranges that overflow, leave the file, run backwards or overlap is
// answered 200 unknown, never a panic and a dropped connection; the
// same seal under its own ranges is recognised (changed: the index
// here knows no document).
func TestVerifyHostileByteRanges(t *testing.T) {
	h, sealed := verifyHandler(t, 1)
	byteRange := regexp.MustCompile(`/ByteRange\s*\[[^\]]*\]`)
	for _, tc := range []struct {
		name, byteRange, want string
	}{
		{"its own ranges", "", "changed"},
		{"the end overflows", "0 10 20 9223372036854775807", "unknown"},
		{"the end overflows from the file's end", fmt.Sprintf("0 10 %d 9223372036854775807", len(sealed)), "unknown"},
		{"the largest numbers", "0 9223372036854775807 9223372036854775807 9223372036854775807", "unknown"},
		{"a number beyond 64 bits", "0 10 20 99999999999999999999999999", "unknown"},
		{"negative", "0 -10 20 5", "unknown"},
		{"beyond the file", fmt.Sprintf("0 10 20 %d", len(sealed)), "unknown"},
		{"backwards", "0 20 10 5", "unknown"},
		{"overlapping", "0 20 10 30", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := sealed
			if tc.byteRange != "" {
				doc = byteRange.ReplaceAll(bytes.Clone(sealed), []byte("/ByteRange ["+tc.byteRange+"]"))
			}
			w := postVerify(t, h, doc, "application/json")
			var res verifyResult
			if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || w.Code != http.StatusOK ||
				w.Header().Get("Content-Type") != "application/json" || res.Result != tc.want {
				t.Errorf("%d %s %s, want 200 %s", w.Code, w.Header().Get("Content-Type"), w.Body, tc.want)
			}
		})
	}
}

// TestVerifyBusy: with every check slot taken, a check is refused at
// once, 503 unavailable with Retry-After: 1, as a problem body or as the
// page; once a slot is free again, checks are answered.
func TestVerifyBusy(t *testing.T) {
	h, sealed := verifyHandler(t, 1)
	for _, tc := range []struct {
		name       string
		busy       bool
		accept     string
		status     int
		retryAfter string
		body       string
	}{
		{"JSON, busy", true, "application/json", http.StatusServiceUnavailable, "1", `"code":"unavailable"`},
		{"page, busy", true, "text/html", http.StatusServiceUnavailable, "1", "too many documents are being checked now"},
		{"JSON, free", false, "application/json", http.StatusOK, "", `"result": "changed"`},
		{"JSON, free again", false, "application/json", http.StatusOK, "", `"result": "changed"`},
		{"page, free", false, "text/html", http.StatusOK, "", "Changed after sealing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.busy {
				h.checks <- struct{}{}
				defer func() { <-h.checks }()
			}
			w := postVerify(t, h, sealed, tc.accept)
			if w.Code != tc.status || w.Header().Get("Retry-After") != tc.retryAfter || !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("%d Retry-After %q %s, want %d %q with %s", w.Code, w.Header().Get("Retry-After"), w.Body, tc.status, tc.retryAfter, tc.body)
			}
		})
	}
}

// TestVerifyEmptyFile: an empty upload is a 400 naming the field.
func TestVerifyEmptyFile(t *testing.T) {
	h, _ := verifyHandler(t, 1)
	if w := postVerify(t, h, nil, "application/json"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"file"`) {
		t.Errorf("an empty file: %d %s", w.Code, w.Body)
	}
}

// TestVerifyTwoFiles: two files in the field file are a 400, whatever
// they are: which one was checked would be a guess.
func TestVerifyTwoFiles(t *testing.T) {
	h, sealed := verifyHandler(t, 1)
	stranger := []byte("%PDF-1.4\n% a stranger's document\n%%EOF\n")
	if w := postVerifyFiles(t, h, "application/json", sealed, stranger); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "send one file") {
		t.Errorf("two files: %d %s", w.Code, w.Body)
	}
	if w := postVerifyFiles(t, h, "application/json", sealed); w.Code != http.StatusOK {
		t.Errorf("one file: %d %s", w.Code, w.Body)
	}
}
