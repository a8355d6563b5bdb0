package caddymodule

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"html/template"
	"io"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"golang.org/x/time/rate"

	"github.com/keygate/keygate/internal/docseal"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/upstreams/contracts"
)

func init() {
	caddy.RegisterModule(Verify{})
}

// Verify is the `webapi_verify` handler: a public page (GET /verify) and
// its form's target (POST /verify, the PDF in the multipart field
// `file`, up to 10 MiB) that say whether this gateway sealed a document
// and it has not changed since. It answers from the upload's SHA-256 (the
// index of sealed documents) and its seal (this gateway's certificate in
// the signature), never from text in the file, keeps nothing of the
// upload, and limits each client address and the checks running at once
// (per instance). JSON for a client that sends Accept: application/json.
type Verify struct {
	app      *App
	limiters *verifyLimiters
	// checks holds a token for each check running; when it is full, a
	// check is refused at once.
	checks chan struct{}
}

// verifyLimiters are the per-address limits of one handler.
type verifyLimiters struct {
	mu  sync.Mutex
	all map[netip.Prefix]*rate.Limiter
	// overflow is the one limit of the addresses beyond maxVerifyUsers.
	overflow *rate.Limiter
}

// CaddyModule returns the Caddy module information.
func (Verify) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_verify",
		New: func() caddy.Module { return new(Verify) },
	}
}

// Provision finds the webapi app.
func (h *Verify) Provision(ctx caddy.Context) error {
	app, err := webapiApp(ctx)
	if err != nil {
		return err
	}
	h.app = app
	h.limiters = &verifyLimiters{all: make(map[netip.Prefix]*rate.Limiter)}
	h.checks = make(chan struct{}, maxVerifyChecks())
	return nil
}

// maxVerifyChecks is how many checks run at once: half the CPUs the
// process may use, at least one, so that hashing uploads leaves the
// rest of the gateway (its database work above all) room to run.
func maxVerifyChecks() int { return max(1, runtime.GOMAXPROCS(0)/2) }

const (
	// maxVerifyUpload is the largest PDF /verify takes.
	maxVerifyUpload = 10 << 20
	// verifyBurst and verifyEvery limit each client address: 10 checks,
	// then one every 6 seconds.
	verifyBurst    = 10
	verifyEvery    = 6 * time.Second
	maxVerifyUsers = 10000
)

// verifyResult is the answer about one upload.
type verifyResult struct {
	// Result is sealed (this gateway's, unchanged), changed (sealed by
	// this gateway, changed since) or unknown (not a document of this
	// gateway).
	Result  string `json:"result"`
	Message string `json:"message"`
	SHA256  string `json:"sha256"`
	// Level is the PAdES baseline level the seal of a sealed document
	// reaches (B-B, B-T, B-LT, B-LTA; none for a seal made before
	// keygate wrote PAdES signatures), read from the file.
	Level    docseal.Level   `json:"level,omitempty"`
	Contract *verifyContract `json:"contract,omitempty"`
}

type verifyContract struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Completed time.Time `json:"completed"`
	Signers   []string  `json:"signers"`
}

func (h *Verify) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	asJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	if r.URL.Path != "/verify" && r.URL.Path != "/verify/" {
		h.fail(w, asJSON, problem.NotFound("no such page"))
		return nil
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.page(w, r, http.StatusOK, nil, "")
		return nil
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		h.fail(w, asJSON, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "GET the page or POST a PDF"))
		return nil
	}
	if wait, ok := h.allow(requestClientIP(r)); !ok {
		p := problem.New(http.StatusTooManyRequests, problem.CodeRateLimited, "too many checks from this address; try again later")
		p.RetryAfter = int(wait/time.Second) + 1
		h.fail(w, asJSON, p)
		return nil
	}
	doc, err := readUpload(w, r)
	if err != nil {
		h.fail(w, asJSON, err)
		return nil
	}
	// A check hashes and parses the upload and asks the database: beyond
	// the checks running at once, refuse at once rather than queue.
	select {
	case h.checks <- struct{}{}:
		defer func() { <-h.checks }()
	default:
		p := problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable, "too many documents are being checked now; try again in a moment")
		p.RetryAfter = 1
		h.fail(w, asJSON, p)
		return nil
	}
	res, err := h.check(r, doc)
	if err != nil {
		h.fail(w, asJSON, err)
		return nil
	}
	if asJSON {
		problem.SecureHeaders(w.Header())
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	h.page(w, r, http.StatusOK, res, "")
	return nil
}

// readUpload reads the multipart field `file`: present, a PDF, at most
// maxVerifyUpload bytes.
func readUpload(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	fileErr := func(code, msg string) error {
		return problem.Invalid([]problem.FieldError{{Field: "file", Code: code, Message: msg}})
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxVerifyUpload+64<<10)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, fileErr("required", "send the PDF as multipart/form-data in the field file")
	}
	var doc []byte
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) && doc != nil {
			return doc, nil
		}
		if errors.Is(err, io.EOF) {
			return nil, fileErr("required", "send the PDF in the field file")
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the file is larger than 10 MiB")
		}
		if err != nil {
			return nil, fileErr("invalid", "the upload could not be read")
		}
		if part.FormName() != "file" {
			continue
		}
		if doc != nil {
			// Which of two files was checked would be a guess.
			return nil, fileErr("invalid", "send one file in the field file")
		}
		doc, err = io.ReadAll(io.LimitReader(part, maxVerifyUpload+1))
		switch {
		case errors.As(err, &tooLarge) || len(doc) > maxVerifyUpload:
			return nil, problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the file is larger than 10 MiB")
		case err != nil:
			return nil, fileErr("invalid", "the upload could not be read")
		case len(doc) == 0:
			return nil, fileErr("required", "the file is empty")
		case !bytes.HasPrefix(doc, []byte("%PDF-")):
			return nil, fileErr("not_pdf", "the file is not a PDF")
		}
	}
}

// check answers for doc: the contract of its hash, or whether it carries
// this gateway's seal at all.
func (h *Verify) check(r *http.Request, doc []byte) (*verifyResult, error) {
	sum := sha256.Sum256(doc)
	res := &verifyResult{SHA256: hex.EncodeToString(sum[:])}
	id, ok, err := h.app.state.stores.SealedDocuments.Lookup(sum)
	if err != nil {
		return nil, err
	}
	if ok {
		// The file is one this gateway sealed (its hash says so), so
		// reading its structure is safe.
		res.Level = docseal.LevelOf(doc)
		c, err := h.app.contracts.Get(r.Context(), id)
		if err == nil {
			res.Result, res.Message = "sealed", "This gateway sealed this document, and it has not changed since."
			res.Contract = &verifyContract{ID: c.ID, Name: c.Name, Completed: completionTime(c), Signers: []string{}}
			for _, s := range c.Signers {
				res.Contract.Signers = append(res.Contract.Signers, s.FullName)
			}
			return res, nil
		}
		if !problem.IsNotFound(err) {
			return nil, err
		}
		// The contract was deleted since: the seal still stands.
		res.Result, res.Message = "sealed", "This gateway sealed this document, and it has not changed since; its contract has been deleted."
		return res, nil
	}
	// A seal of this gateway's key whose sealed bytes are intact, in a
	// file that is not one it sealed: bytes were added after the seal, or
	// changed inside the seal's own signature field.
	if end, ok := docseal.SealedUpTo(doc, h.app.signer.Certificate().Cert); ok {
		res.Result = "changed"
		if end < len(doc) {
			res.Message = "This gateway sealed this document, but it has changed since: bytes were added after the seal."
		} else {
			res.Message = "This gateway sealed this document, but it has changed since: bytes inside the seal's signature field were changed; the sealed content itself is intact."
		}
		return res, nil
	}
	res.Result, res.Message = "unknown", "This is not a document this gateway sealed, or it was changed where the seal covers it."
	return res, nil
}

// completionTime is when the last signer decided.
func completionTime(c *contracts.Contract) time.Time {
	var t time.Time
	for _, s := range c.Signers {
		if s.DecisionTimestamp.After(t) {
			t = s.DecisionTimestamp
		}
	}
	return t.UTC()
}

// allow takes a check of ip's network (an IPv6 client's /64).
func (h *Verify) allow(ip netip.Addr) (time.Duration, bool) {
	bits := 32
	if ip.Is6() && !ip.Is4In6() {
		bits = 64
	}
	key, _ := ip.Unmap().Prefix(bits)
	v := h.limiters
	v.mu.Lock()
	defer v.mu.Unlock()
	l, ok := v.all[key]
	if !ok {
		if len(v.all) >= maxVerifyUsers {
			// Forget the addresses whose limit is whole again (they would
			// start afresh anyway); while every one is still spending,
			// new addresses share one limit rather than reset anyone's.
			now := time.Now()
			for k, old := range v.all {
				if old.TokensAt(now) >= verifyBurst {
					delete(v.all, k)
				}
			}
		}
		if len(v.all) >= maxVerifyUsers {
			if v.overflow == nil {
				v.overflow = rate.NewLimiter(rate.Every(verifyEvery), verifyBurst)
			}
			l = v.overflow
		} else {
			l = rate.NewLimiter(rate.Every(verifyEvery), verifyBurst)
			v.all[key] = l
		}
	}
	res := l.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		return d, false
	}
	return 0, true
}

// fail answers err as a problem to a JSON client, else as the page with
// the message.
func (h *Verify) fail(w http.ResponseWriter, asJSON bool, err error) {
	p := problem.FromError(err)
	if asJSON {
		problem.Write(w, p)
		return
	}
	msg := p.Detail
	if len(p.Errors) > 0 {
		msg = p.Errors[0].Message
	}
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	h.page(w, nil, p.Status, nil, msg)
}

var verifyPage = template.Must(template.New("verify").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Check a document</title>
</head>
<body>
<main>
<h1>Check a document</h1>
<p>Choose a PDF that this gateway sealed, a signed contract or its certificate of completion, to see whether it is unchanged. The file is checked and not kept.</p>
<form method="post" action="/verify" enctype="multipart/form-data">
<p><label for="file">PDF file (at most 10 MiB)</label>
<input id="file" name="file" type="file" accept="application/pdf" required></p>
<p><button type="submit">Check</button></p>
</form>
{{with .Error}}<section aria-labelledby="outcome"><h2 id="outcome">Not checked</h2><p role="alert">{{.}}</p></section>{{end}}
{{with .Result}}<section aria-labelledby="outcome"><h2 id="outcome">{{if eq .Result "sealed"}}Sealed and unchanged{{else if eq .Result "changed"}}Changed after sealing{{else}}Not a document of this gateway{{end}}</h2>
<p role="status">{{.Message}}</p>
{{with .Contract}}<dl>
<dt>Contract</dt><dd>{{.Name}}</dd>
<dt>Contract id</dt><dd>{{.ID}}</dd>
<dt>Completed</dt><dd>{{.Completed.Format "2 January 2006, 15:04:05 UTC"}}</dd>
<dt>Signers</dt><dd>{{range $i, $s := .Signers}}{{if $i}}, {{end}}{{$s}}{{end}}</dd>
</dl>{{end}}
{{with .Level}}{{if eq . "none"}}<p>Seal: a PDF signature of the kind this gateway made before PAdES (adbe.pkcs7.detached); it proves as well that the document is unchanged, but holds no validation data for after its certificate ends.</p>{{else}}<p>Seal: PAdES baseline level <strong>{{.}}</strong>{{if eq . "B-LTA"}}, with validation data and a document timestamp: it can be checked after its certificate expires{{else if eq . "B-LT"}}, with validation data{{else if eq . "B-T"}}, timestamped{{end}}.</p>{{end}}{{end}}
<p>SHA-256 of the file: <code>{{.SHA256}}</code></p></section>{{end}}
</main>
</body>
</html>
`))

// page writes the verify page with res or msg.
func (h *Verify) page(w http.ResponseWriter, r *http.Request, status int, res *verifyResult, msg string) {
	hdr := w.Header()
	problem.SecureHeaders(hdr)
	hdr.Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	var b bytes.Buffer
	_ = verifyPage.Execute(&b, struct {
		Result *verifyResult
		Error  string
	}{res, msg})
	w.WriteHeader(status)
	if r == nil || r.Method != http.MethodHead {
		_, _ = w.Write(b.Bytes())
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Verify)(nil)
	_ caddyhttp.MiddlewareHandler = (*Verify)(nil)
)
