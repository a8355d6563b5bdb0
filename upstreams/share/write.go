package share

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
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
	// maxComment bounds a comment's text (32 KiB), and maxCommentBody
	// the request that carries it.
	maxComment     = 32 << 10
	maxCommentBody = 2*maxComment + 4<<10
)

// ActionCommented is the activity of a comment added from the page.
const ActionCommented = "commented"

// comment adds a public comment to the shared issue: POST
// /s/{uuid}/comments with the field body, as a form (answered with a
// redirect back to the page) or JSON (answered 201 with the comment as
// sent). It needs what reading the page needs (the unlock), ADD on
// comment, a request from the page's own origin, and stays within the
// limit of writes per share and client.
func (v *viewer) comment(w http.ResponseWriter, r *http.Request) {
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
	var email string
	if rec.gated() {
		e, ok := v.s.unlockedBy(r, rec, now)
		if !ok || (rec.selectedOnly() && !rec.onList(e)) {
			v.fail(w, r, problem.New(http.StatusUnauthorized, problem.CodeForbidden, "open the share first"))
			return
		}
		email = e
	}
	switch {
	case v.host == nil || rec.Type != TypeIssue:
		v.fail(w, r, problem.NotFound("this share takes no comments"))
		return
	case !rec.may("comment", PermAdd):
		v.fail(w, r, problem.New(http.StatusForbidden, problem.CodeForbidden, "this share does not let you add comments"))
		return
	}
	body, err := readComment(w, r)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	ip := clientip.From(r)
	if wait := v.s.writes.allow(rec.ID, ip, now); wait > 0 {
		d := problem.New(http.StatusTooManyRequests, problem.CodeRateLimited, "too many changes from your address: try again in a minute")
		d.RetryAfter = int(max(wait.Round(time.Second)/time.Second, 1))
		v.fail(w, r, d)
		return
	}
	err = v.host.AddComment(r.Context(), rec.IssueID, commentSource(email, rec.UUID)+body)
	switch {
	case errors.Is(err, host.ErrNotFound):
		v.fail(w, r, errItemGone())
		return
	case errors.Is(err, host.ErrRejected):
		v.fail(w, r, problem.Invalid([]problem.FieldError{{Field: "body", Code: "invalid", Message: strings.TrimPrefix(err.Error(), host.ErrRejected.Error()+": ")}}))
		return
	case err != nil:
		v.fail(w, r, errHostUnavailable())
		return
	}
	act := Activity{Timestamp: now.UnixMilli(), Source: activitySource, Action: ActionCommented,
		Email: nonEmpty(email), IP: ipString(r)}
	if err := v.s.recordWrite(r.Context(), rec, act, events.ShareCommented); err != nil {
		// The comment is on the tracker; only its record here failed.
		v.s.log.Error("share: recording a comment", zap.Error(err))
	}
	problem.SecureHeaders(w.Header())
	if reply.WantsJSON(r) {
		reply.JSON(w, http.StatusCreated, map[string]string{"issueId": rec.IssueID, "body": body})
		return
	}
	http.Redirect(w, r, "/s/"+rec.UUID, http.StatusSeeOther)
}

// may reports whether the share gives perm on field id.
func (r *record) may(id, perm string) bool {
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

// readComment reads the field body of a form or a JSON object: 1 to
// 32 KiB of UTF-8 text that is not only space.
func readComment(w http.ResponseWriter, r *http.Request) (string, error) {
	var in struct {
		Body string `json:"body"`
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case problem.IsJSON(mt):
		if err := problem.DecodeJSON(w, r, &in); err != nil {
			return "", err
		}
	case mt == "application/x-www-form-urlencoded":
		r.Body = http.MaxBytesReader(w, r.Body, maxCommentBody)
		if err := r.ParseForm(); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return "", problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "a comment is at most 32 KiB")
			}
			return "", problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the form could not be read")
		}
		in.Body = r.PostForm.Get("body")
	default:
		return "", problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMedia,
			"send the comment as application/x-www-form-urlencoded or application/json")
	}
	in.Body = strings.ReplaceAll(in.Body, "\r\n", "\n")
	switch {
	case strings.TrimSpace(in.Body) == "":
		return "", problem.Invalid([]problem.FieldError{{Field: "body", Code: "required", Message: "write a comment"}})
	case len(in.Body) > maxComment:
		return "", problem.Invalid([]problem.FieldError{{Field: "body", Code: "too_long", Message: "a comment is at most 32 KiB"}})
	case !utf8.ValidString(in.Body) || strings.ContainsRune(in.Body, 0):
		return "", problem.Invalid([]problem.FieldError{{Field: "body", Code: "invalid", Message: "a comment is text"}})
	}
	return in.Body, nil
}

// sameOrigin refuses a write that a browser says came from another
// site: its Sec-Fetch-Site is not same-origin, or its Origin is not the
// gateway's public address nor the request's own host. The unlock cookie
// is SameSite=Strict as well; a client without either header (not a
// browser) carries no ambient credential to abuse.
func (s *Store) sameOrigin(r *http.Request) error {
	refused := problem.New(http.StatusForbidden, problem.CodeForbidden, "a change must come from the share's own page")
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return refused
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
// emits its event, in one transaction.
func (s *Store) recordWrite(ctx context.Context, rec *record, act Activity, event string) error {
	return s.db.Update(ctx, func(tx storage.Tx) error {
		if err := s.be.AddActivity(tx, rec.ID, act); err != nil {
			return err
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
