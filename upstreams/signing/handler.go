package signing

import (
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/reply"
	"github.com/keygate/keygate/upstreams/contracts"
)

// maxDecisionBody bounds a decision request: a 1 MiB signature image
// takes about 1.4 MiB as base64, so the gateway's usual 1 MiB would not
// let the largest image the API allows through.
const maxDecisionBody = 2 << 20

// Handler serves the public signing pages, without an API key:
//
//	GET  /sign/{token}           the page (HTML, or JSON with Accept: application/json)
//	POST /sign/{token}/otp       send a one-time password
//	POST /sign/{token}/decision  sign or reject (JSON, or an HTML form)
//	GET  /sign/{token}/document     the signed contract's finalized PDF
//	GET  /sign/{token}/certificate  and its certificate of completion
//
// A form post answers with the page (303 to it on success); anything else
// answers JSON, errors as application/problem+json. Tokens never reach a
// log line.
func (s *Service) Handler() http.Handler { return &handler{s: s} }

type handler struct{ s *Service }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// The token in the address is the signer's secret: no referrer
	// leaves the page, and nothing is cached or indexed.
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Robots-Tag", "noindex, nofollow")

	rest, ok := strings.CutPrefix(r.URL.Path, Prefix+"/")
	token, action, _ := strings.Cut(rest, "/")
	if !ok || !wellFormedToken(token) {
		h.fail(w, r, "", problem.NotFound("no signing link with this token"))
		return
	}
	var allow []string
	switch action {
	case "":
		allow = []string{http.MethodGet, http.MethodHead}
	case "document", "certificate":
		allow = []string{http.MethodGet, http.MethodHead}
	case "otp", "decision":
		allow = []string{http.MethodPost}
	default:
		h.fail(w, r, "", problem.NotFound("no such page"))
		return
	}
	if !slices.Contains(allow, r.Method) {
		allow := strings.Join(allow, ", ")
		hd.Set("Allow", allow)
		h.fail(w, r, "", problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "use "+allow+" on this path"))
		return
	}
	switch action {
	case "":
		h.page(w, r, token)
	case "otp":
		h.otp(w, r, token)
	case "document", "certificate":
		h.document(w, r, token, action == "certificate")
	default:
		h.decision(w, r, token)
	}
}

// document sends the signer the finalized PDF of their signed contract,
// or its certificate of completion, both sealed, as the signer's link
// allows for as long as the contract exists.
func (h *handler) document(w http.ResponseWriter, r *http.Request, token string, certificate bool) {
	ss, err := h.s.open(r.Context(), token, nil)
	if err != nil {
		h.fail(w, r, token, err)
		return
	}
	c := ss.c
	if beingSealed(c) {
		if c, err = h.s.awaitDocuments(r.Context(), c); err != nil {
			h.fail(w, r, token, err)
			return
		}
		if beingSealed(c) {
			w.Header().Set("Retry-After", "5")
			h.fail(w, r, token, problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable,
				"The contract is signed by everyone and its documents are being sealed: try again in a few seconds."))
			return
		}
	}
	if c.FinalizedPDF == nil || c.Status != contracts.StatusSigned {
		// The link is good: say why there is nothing to download yet.
		h.fail(w, r, token, problem.New(http.StatusConflict, problem.CodeConflict, "The contract is not signed by everyone yet: there is no signed document to download."))
		return
	}
	which := c.FinalizedPDF
	if certificate {
		which = c.CertificatePDF
	}
	if which == nil {
		h.fail(w, r, token, problem.NotFound("this contract has no such document"))
		return
	}
	a, data, err := h.s.store.Attachment(r.Context(), c.ID, which.ID)
	if err != nil {
		h.fail(w, r, token, err)
		return
	}
	hd := w.Header()
	problem.SecureHeaders(hd)
	hd.Set("Content-Type", contracts.PDFMediaType)
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.FileName}))
	hd.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
}

// wellFormedToken accepts 32 bytes as unpadded base64url, the only form
// a signing token has, before anything is hashed or looked up.
func wellFormedToken(t string) bool {
	if len(t) != 43 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(t)
	return err == nil && len(b) == 32
}

func (h *handler) page(w http.ResponseWriter, r *http.Request, token string) {
	var visit *contracts.Origin
	if r.Method == http.MethodGet {
		by := contracts.OriginOf(r)
		visit = &by
	}
	ss, err := h.s.open(r.Context(), token, visit)
	if err != nil {
		h.fail(w, r, token, err)
		return
	}
	v := newPageView(ss, h.s.now())
	if ss.c.FinalizedPDF != nil && ss.c.Status == contracts.StatusSigned {
		v.DocumentURL = Prefix + "/" + token + "/document"
		v.CertificateURL = Prefix + "/" + token + "/certificate"
	}
	if reply.WantsJSON(r) {
		reply.JSON(w, http.StatusOK, v)
		return
	}
	writePage(w, &pageData{Status: http.StatusOK, Token: token, View: v, Notice: noticeText(r.URL.Query().Get("notice"), v)})
}

func (h *handler) otp(w http.ResponseWriter, r *http.Request, token string) {
	ss, rec, err := h.s.requestOTP(r.Context(), token, contracts.OriginOf(r))
	if err != nil {
		h.fail(w, r, token, err)
		return
	}
	if !jsonMode(r) {
		seeOther(w, token, "otp-sent")
		return
	}
	sg := ss.signer()
	reply.JSON(w, http.StatusAccepted, otpReply{
		OTPMethod: sg.OTPMethod, SentTo: otpDestination(sg),
		ExpirationTimestamp: formatTime(rec.Expires),
		ResendTimestamp:     formatTime(rec.Sent.Add(otpResendAfter)),
	})
}

func (h *handler) decision(w http.ResponseWriter, r *http.Request, token string) {
	in, err := readDecision(w, r)
	if err != nil {
		h.fail(w, r, token, err)
		return
	}
	ss, err := h.s.decide(r.Context(), token, in, contracts.OriginOf(r))
	if err != nil {
		h.fail(w, r, token, err)
		return
	}
	if !jsonMode(r) {
		seeOther(w, token, ss.signer().Decision)
		return
	}
	reply.JSON(w, http.StatusOK, newPageView(ss, h.s.now()))
}

// seeOther sends a form's poster back to the page, relative to the
// posted path (/sign/{token}/otp → /sign/{token}), so the pages work
// under any prefix a proxy puts before them.
func seeOther(w http.ResponseWriter, token, notice string) {
	problem.SecureHeaders(w.Header())
	w.Header().Set("Location", "../"+token+"?notice="+notice)
	w.WriteHeader(http.StatusSeeOther)
}

// readDecision reads a decision sent as JSON, as a URL-encoded form or as
// a multipart form (whose signature may be a file part).
func readDecision(w http.ResponseWriter, r *http.Request) (*decisionInput, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxDecisionBody)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	in := new(decisionInput)
	var err error
	switch {
	case problem.IsJSON(mt):
		// The shared decoder's rules (UTF-8, depth, repeated keys), with
		// this body's larger limit.
		if err := problem.DecodeJSONBody(w, r, in, maxDecisionBody); err != nil {
			return nil, err
		}
	case mt == "application/x-www-form-urlencoded":
		err = r.ParseForm()
	case mt == "multipart/form-data":
		if err = r.ParseMultipartForm(maxDecisionBody); err == nil {
			defer r.MultipartForm.RemoveAll()
			if fhs := r.MultipartForm.File["signature"]; len(fhs) > 0 {
				f, ferr := fhs[0].Open()
				if ferr != nil {
					return nil, ferr
				}
				in.file, err = io.ReadAll(io.LimitReader(f, maxSignatureBytes+1))
				f.Close()
				in.hasFile = true
			}
		}
	default:
		return nil, problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMedia,
			"send the decision as application/json, application/x-www-form-urlencoded or multipart/form-data")
	}
	if err != nil {
		return nil, bodyProblem(err)
	}
	if !problem.IsJSON(mt) {
		in.Decision, in.OTP, in.Method = r.PostFormValue("decision"), r.PostFormValue("otp"), r.PostFormValue("method")
		in.Signature, in.Reason = r.PostFormValue("signature"), r.PostFormValue("reason")
	}
	return in, nil
}

func bodyProblem(err error) error {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the request body is larger than 2 MiB")
	case errors.Is(err, io.EOF):
		return problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the request body is empty")
	}
	return problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the request body could not be read")
}

// jsonMode tells whether to answer JSON: when the client asks for it, or
// posts anything but an HTML form.
func jsonMode(r *http.Request) bool {
	if reply.WantsJSON(r) {
		return true
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt != "application/x-www-form-urlencoded" && mt != "multipart/form-data"
}

// fail answers err: a problem to a JSON client; to a person, the signer's
// page with the message, or a bare page when there is no signer to show.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, token string, err error) {
	var d *problem.Details
	var rl *rateLimited
	switch {
	case errors.As(err, &rl):
		d = rl.Details
		if rl.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(rl.retryAfter))
		}
	case errors.As(err, &d):
	default:
		if r.Context().Err() == nil {
			// The path holds the token: log the route, not the path.
			h.s.log.Error("signing: request failed", zap.String("method", r.Method), zap.String("route", route(r)), zap.Error(err))
		}
		d = problem.FromError(err)
	}
	if jsonMode(r) {
		problem.Write(w, d)
		return
	}
	if d.RetryAfter > 0 && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", strconv.Itoa(d.RetryAfter))
	}
	data := &pageData{Status: d.Status, Title: http.StatusText(d.Status), Message: pageMessage(d)}
	for _, e := range d.Errors {
		data.Details = append(data.Details, e.Message)
	}
	if token != "" && d.Status != http.StatusNotFound && d.Status != http.StatusInternalServerError {
		if ss, err := h.s.open(r.Context(), token, nil); err == nil {
			data.Token, data.View = token, newPageView(ss, h.s.now())
		}
	}
	writePage(w, data)
}

// route is the request path with the token masked, for logs.
func route(r *http.Request) string {
	rest, _ := strings.CutPrefix(r.URL.Path, Prefix+"/")
	_, action, _ := strings.Cut(rest, "/")
	if action == "" {
		return Prefix + "/{token}"
	}
	return Prefix + "/{token}/" + action
}

func pageMessage(d *problem.Details) string {
	switch d.Code {
	case problem.CodeNotFound:
		return "This signing link is not valid. It may be mistyped, or the contract was deleted."
	case problem.CodeInternal:
		return "Something went wrong. Please try again later."
	case problem.CodeInvalidRequest:
		if len(d.Errors) > 0 {
			return "Please check what you entered."
		}
	}
	return d.Detail
}

// noticeText is the line shown after a successful form post.
func noticeText(notice string, v *pageView) string {
	switch notice {
	case "otp-sent":
		by := "e-mail"
		if v.Signer.OTPMethod == "sms" {
			by = "text message"
		}
		return "We sent a one-time password by " + by + " to " + v.Signer.OTPDestination + ". It is valid for 10 minutes."
	case "signed":
		if v.Signer.Decision == "signed" {
			return "Thank you: your signature is recorded."
		}
	case "rejected":
		if v.Signer.Decision == "rejected" {
			return "You rejected the contract. The people who follow it are told."
		}
	}
	return ""
}
