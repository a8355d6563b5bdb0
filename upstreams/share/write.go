package share

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/reply"
	"github.com/keygate/keygate/internal/storage"
)

// What an outside party writes from a share's page goes to the tracker
// through keygate's account: a comment, for now.
const (
	commentPattern = "/s/{uuid}/comments"
	fieldPattern   = "/s/{uuid}/fields/{field}"
	uploadPattern  = "/s/{uuid}/attachments"
	// The same writes on an issue opened from a list, board or timeline.
	listCommentPattern = "/s/{uuid}/issues/{issue}/comments"
	listFieldPattern   = "/s/{uuid}/issues/{issue}/fields/{field}"
	listUploadPattern  = "/s/{uuid}/issues/{issue}/attachments"
	// maxUpload bounds a file attached from a page.
	maxUpload = 10 << 20
	// maxComment bounds a comment's text (32 KiB).
	maxComment = 32 << 10
)

// The activities of writes from the page.
const (
	ActionCommented       = "commented"
	ActionEdited          = "edited"
	ActionAttachmentAdded = "attachment-added"
)

// comment adds a public comment to the shared issue: POST
// /s/{uuid}/comments with the field body, as a form (answered with a
// redirect back to the page) or JSON (answered 201 with the comment as
// sent). It needs what reading the page needs (the unlock), ADD on
// comment, a request from the page's own origin, and stays within the
// limit of writes per share and client.
func (v *viewer) comment(w http.ResponseWriter, r *http.Request) {
	v.write(w, r, "comment", PermAdd, func(rec *Record, issue, email string) (string, error) {
		body, err := readText(w, r, "body", maxComment, true)
		if err != nil {
			return "", err
		}
		return body, v.host.AddComment(r.Context(), issue, commentSource(email, rec.UUID)+body)
	}, ActionCommented, events.ShareCommented, http.StatusCreated, "body")
}

// field changes a field of the shared issue: POST /s/{uuid}/fields/{field}
// with the field value, where the share gives EDIT on it and keygate can
// write it (summary, description, duedate, startdate, custom fields).
// A form is answered with a redirect back to the page, JSON with 200 and
// the value as sent.
func (v *viewer) field(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("field")
	v.write(w, r, id, PermEdit, func(_ *Record, issue, _ string) (string, error) {
		if !slices.Contains(editable, id) && !isCustomField(id) {
			return "", problem.New(http.StatusForbidden, problem.CodeForbidden, id+" cannot be changed from a share's page")
		}
		value, err := readText(w, r, "value", maxFieldValue(id), id == "summary")
		if err != nil {
			return "", err
		}
		if err := checkFieldValue(id, value); err != nil {
			return "", err
		}
		return value, v.host.UpdateField(r.Context(), issue, id, value)
	}, ActionEdited, events.ShareEdited, http.StatusOK, "value")
}

// upload attaches a file to the shared issue: POST /s/{uuid}/attachments,
// multipart with the field file (at most 10 MiB), where the share gives
// ADD on attachment. Recorded as attachment-added; a form is answered
// with a redirect back to the page, JSON with 201 and the file's name.
func (v *viewer) upload(w http.ResponseWriter, r *http.Request) {
	v.write(w, r, "attachment", PermAdd, func(_ *Record, issue, _ string) (string, error) {
		name, contentType, content, err := readUpload(w, r)
		if err != nil {
			return "", err
		}
		return name, v.host.AddAttachment(r.Context(), issue, name, contentType, bytes.NewReader(content), int64(len(content)))
	}, ActionAttachmentAdded, "", http.StatusCreated, "file")
}

// readUpload reads the part file of a multipart form: its name (the
// base name, printable, at most 255 bytes), its media type and its
// content, at most maxUpload.
func readUpload(w http.ResponseWriter, r *http.Request) (name, contentType string, content []byte, err error) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return "", "", nil, problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMedia, "send the file as multipart/form-data, in the field file")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload+64<<10)
	mr, err := r.MultipartReader()
	if err != nil {
		return "", "", nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the form could not be read")
	}
	tooBig := problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "a file is at most 10 MiB")
	for {
		part, err := mr.NextPart()
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return "", "", nil, tooBig
		case errors.Is(err, io.EOF):
			return "", "", nil, problem.Invalid([]problem.FieldError{{Field: "file", Code: "required", Message: "choose a file"}})
		case err != nil:
			return "", "", nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the form could not be read")
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		content, err := io.ReadAll(io.LimitReader(part, maxUpload+1))
		part.Close()
		switch {
		case errors.As(err, &mbe) || len(content) > maxUpload:
			return "", "", nil, tooBig
		case err != nil:
			return "", "", nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the form could not be read")
		case len(content) == 0:
			return "", "", nil, problem.Invalid([]problem.FieldError{{Field: "file", Code: "required", Message: "the file is empty"}})
		}
		contentType = "application/octet-stream"
		if ct, _, err := mime.ParseMediaType(part.Header.Get("Content-Type")); err == nil {
			contentType = ct
		}
		return uploadName(part.FileName()), contentType, content, nil
	}
}

// uploadName is a file's name as it may go to the tracker: its last path
// element, without control characters, at most 255 bytes.
func uploadName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	for len(name) > 255 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name = strings.TrimSpace(name); name == "" || name == "." || name == ".." {
		name = "attachment"
	}
	return name
}

// write runs one write from a share's page: the share open and unlocked,
// a request of the page's own origin, perm on field, within the limit of
// writes; do sends it to the tracker and returns what was written. The
// activity action and the event record it; a form gets a redirect back
// to the page, JSON status and {issueId, name: written}.
func (v *viewer) write(w http.ResponseWriter, r *http.Request, field, perm string,
	do func(rec *Record, issue, email string) (string, error), action, event string, status int, name string) {
	now := v.s.now()
	rec, err := v.open(r, now)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if err := v.s.sameOrigin(r); err != nil {
		v.fail(w, r, err)
		return
	}
	email, ok := v.s.openedBy(r, rec, now)
	if !ok {
		v.fail(w, r, errNotOpened())
		return
	}
	// The shared issue, or one opened from the share's list, board or
	// timeline: only while the share shows it.
	issue, page := rec.IssueID, "/s/"+rec.UUID
	listed := r.PathValue("issue")
	switch {
	case v.host == nil || (rec.Type == TypeIssue) == (listed != ""):
		v.fail(w, r, problem.NotFound("this share takes no changes here"))
		return
	case !rec.may(field, perm):
		v.fail(w, r, problem.New(http.StatusForbidden, problem.CodeForbidden, "this share does not let you change "+field))
		return
	case listed != "":
		if _, err := listedIssue(r.Context(), v.host, rec, listed); err != nil {
			v.fail(w, r, err)
			return
		}
		issue, page = listed, page+"/issues/"+listed
	}
	ip := clientip.From(r)
	if wait := v.s.writes.allow(rec.ID, ip, now); wait > 0 {
		d := problem.New(http.StatusTooManyRequests, problem.CodeRateLimited, "too many changes from your address: 10 comments, changes and files a minute; try again in a few seconds")
		d.RetryAfter = int(max(wait.Round(time.Second)/time.Second, 1))
		v.fail(w, r, d)
		return
	}
	written, err := do(rec, issue, email)
	var d *problem.Details
	switch {
	case errors.As(err, &d):
		v.fail(w, r, d)
		return
	case errors.Is(err, host.ErrNotFound):
		v.fail(w, r, errItemGone())
		return
	case errors.Is(err, host.ErrRejected):
		v.fail(w, r, problem.Invalid([]problem.FieldError{{Field: name, Code: "invalid", Message: strings.TrimPrefix(err.Error(), host.ErrRejected.Error()+": ")}}))
		return
	case err != nil:
		v.fail(w, r, errHostUnavailable())
		return
	}
	act := Activity{Timestamp: now.UnixMilli(), Source: activitySource, Action: action,
		Email: nonEmpty(email), IP: ipString(r)}
	if err := v.s.recordWrite(r.Context(), rec, act, event); err != nil {
		// The change is on the tracker; only its record here failed.
		v.s.log.Error("share: recording a change from the page", zap.String("action", action), zap.Error(err))
	}
	problem.SecureHeaders(w.Header())
	if reply.WantsJSON(r) {
		reply.JSON(w, status, map[string]string{"issueId": issue, name: written})
		return
	}
	http.Redirect(w, r, page, http.StatusSeeOther)
}

// may reports whether the share gives perm on field id.
func (r *Record) may(id, perm string) bool {
	if r.FieldsConfig == nil {
		return false
	}
	c, ok := r.FieldsConfig.FieldConfigs[id]
	return ok && slices.Contains(c.FieldPermissions, perm)
}

// commentSource is the line a comment from a page begins with, naming
// who wrote it and through which share (its uuid's first characters).
func commentSource(email, uuid string) string {
	who := "an unnamed visitor"
	if email != "" {
		who = email
	}
	return "From " + who + " via shared link " + uuid[:4] + "…\n\n"
}

// readText reads field name of a form or a JSON object: UTF-8 text of at
// most limit bytes, not only space when required.
func readText(w http.ResponseWriter, r *http.Request, name string, limit int, required bool) (string, error) {
	var value string
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case problem.IsJSON(mt):
		var in map[string]json.RawMessage
		if err := problem.DecodeJSON(w, r, &in); err != nil {
			return "", err
		}
		if raw, ok := in[name]; ok && json.Unmarshal(raw, &value) != nil {
			return "", problem.Invalid([]problem.FieldError{{Field: name, Code: "invalid_type", Message: name + " must be a string"}})
		}
	case mt == "application/x-www-form-urlencoded":
		r.Body = http.MaxBytesReader(w, r.Body, int64(2*limit+4<<10))
		if err := r.ParseForm(); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return "", problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the form is too large")
			}
			return "", problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the form could not be read")
		}
		value = r.PostForm.Get(name)
	default:
		return "", problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMedia,
			"send it as application/x-www-form-urlencoded or application/json")
	}
	value = strings.ReplaceAll(value, "\r\n", "\n")
	switch {
	case required && strings.TrimSpace(value) == "":
		return "", problem.Invalid([]problem.FieldError{{Field: name, Code: "required", Message: name + " is required"}})
	case len(value) > limit:
		return "", problem.Invalid([]problem.FieldError{{Field: name, Code: "too_long", Message: name + " is at most " + strconv.Itoa(limit) + " bytes"}})
	case !utf8.ValidString(value) || strings.ContainsRune(value, 0):
		return "", problem.Invalid([]problem.FieldError{{Field: name, Code: "invalid", Message: name + " is text"}})
	}
	return value, nil
}

// maxFieldValue bounds a field's new value: a subject 255 bytes, a
// description 64 KiB, a date or custom field 1 KiB.
func maxFieldValue(id string) int {
	switch id {
	case "summary":
		return 255
	case "description":
		return 64 << 10
	}
	return 1 << 10
}

// checkFieldValue refuses a date that is not YYYY-MM-DD (or empty, to
// clear it) and a one-line field with a line break.
func checkFieldValue(id, value string) error {
	switch {
	case (id == "duedate" || id == "startdate") && value != "":
		if _, err := time.Parse(time.DateOnly, value); err != nil {
			return problem.Invalid([]problem.FieldError{{Field: "value", Code: "invalid", Message: id + " is a date, YYYY-MM-DD, or empty"}})
		}
	case id != "description" && strings.ContainsAny(value, "\n\r"):
		return problem.Invalid([]problem.FieldError{{Field: "value", Code: "invalid", Message: id + " is one line"}})
	}
	return nil
}

// sameOrigin refuses a write that a browser says came from another
// site. A browser that sends Sec-Fetch-Site is believed: same-origin
// passes, anything else is refused (the page's no-referrer policy makes
// Chromium send Origin: null on its own forms, so Origin alone cannot
// decide). Without it, Origin must be the gateway's public address or
// the request's own host. The unlock cookie is SameSite=Strict as well;
// a client with neither header (not a browser) carries no ambient
// credential to abuse.
func (s *Store) sameOrigin(r *http.Request) error {
	refused := problem.New(http.StatusForbidden, problem.CodeForbidden, "a change must come from the share's own page")
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		if site != "same-origin" {
			return refused
		}
		return nil
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return refused // "null" and the like
	}
	if base, err := url.Parse(s.baseURL); err == nil && base.Host != "" && strings.EqualFold(u.Host, base.Host) && u.Scheme == base.Scheme {
		return nil
	}
	if strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	return refused
}

// recordWrite records a write from the page in the share's activity and
// emits its event (if any), in one transaction.
func (s *Store) recordWrite(ctx context.Context, rec *Record, act Activity, event string) error {
	return s.db.Update(ctx, func(tx storage.Tx) error {
		if err := s.be.AddActivity(tx, rec.ID, act); err != nil {
			return err
		}
		if event == "" {
			return nil
		}
		return s.emit(tx, event, rec.toShare(s.baseURL, act.Timestamp, 0), act.Timestamp)
	})
}

// writeLimiter bounds the writes of one client at one share.
type writeLimiter struct{ l *unlockLimiter }

func newWriteLimiter() *writeLimiter {
	return &writeLimiter{l: newClientLimiter(writeEvery, writeBurst)}
}

// allow takes one write of ip at share id at now; it returns how long
// to wait when there is none left.
func (w *writeLimiter) allow(id uint64, ip netip.Addr, now time.Time) time.Duration {
	res, wait := w.l.reserve(id, ip, now)
	if res == nil {
		return wait
	}
	return 0
}
