package share

import (
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/reply"
)

// The public page's routes, under /s/ and without an API key.
const (
	pagePattern = "/s/{uuid}"
	// listIssuePattern is an issue opened from a JQL share's list.
	listIssuePattern = "/s/{uuid}/issues/{issue}"
	unlockPattern    = "/s/{uuid}/unlock"
	maxUnlockBody    = 64 << 10
)

// publicView is what an outside party sees of a share: what is shared,
// not who shared it nor who else may open it.
type publicView struct {
	UUID         string        `json:"uuid"`
	Type         string        `json:"type"`
	IssueID      *string       `json:"issueId"`
	ProjectID    *string       `json:"projectId"`
	Board        *Board        `json:"board"`
	JQL          *string       `json:"jql"`
	Expiration   *int64        `json:"expiration"`
	FieldsConfig *FieldsConfig `json:"fieldsConfig"`
	// Issue is the shared issue as the tracker has it, when a tracker is
	// connected and the share is of an issue.
	Issue *sharedIssue `json:"issue,omitempty"`
	// List is the page of issues a JQL share's query matches, when a
	// tracker is connected.
	List *sharedList `json:"list,omitempty"`
	// Board is the issues of a BOARD or TIMELINE share, when a tracker
	// is connected.
	BoardIssues *sharedBoard `json:"boardIssues,omitempty"`
	// Tracker says whether an issue tracker is connected.
	Tracker bool `json:"trackerConnected"`
}

func newPublicView(r *Record) *publicView {
	v := &publicView{UUID: r.UUID, Type: r.Type, IssueID: nonEmpty(r.IssueID), ProjectID: nonEmpty(r.ProjectID),
		Board: r.Board, JQL: r.JQL, FieldsConfig: r.FieldsConfig}
	if r.Expiration != 0 {
		exp := r.Expiration
		v.Expiration = &exp
	}
	return v
}

type viewer struct {
	s    *Store
	host host.Host // nil: no issue tracker connected
}

// NewViewer returns the public share pages: GET /s/{uuid} (HTML, or JSON
// with Accept: application/json) and POST /s/{uuid}/unlock. With h, the
// issue tracker, a share of an issue shows the issue itself.
func NewViewer(s *Store, h host.Host) http.Handler {
	v := &viewer{s: s, host: h}
	mux := http.NewServeMux()
	mux.HandleFunc(http.MethodGet+" "+pagePattern, v.page)
	mux.HandleFunc(http.MethodGet+" "+listIssuePattern, v.page)
	mux.HandleFunc(http.MethodPost+" "+unlockPattern, v.unlock)
	mux.HandleFunc(http.MethodPost+" "+commentPattern, v.comment)
	mux.HandleFunc(http.MethodPost+" "+fieldPattern, v.field)
	mux.HandleFunc(http.MethodPost+" "+uploadPattern, v.upload)
	mux.HandleFunc(http.MethodPost+" "+listCommentPattern, v.comment)
	mux.HandleFunc(http.MethodPost+" "+listFieldPattern, v.field)
	mux.HandleFunc(http.MethodPost+" "+listUploadPattern, v.upload)
	mux.HandleFunc(http.MethodGet+" "+listAttachmentPattern, v.attachment)
	mux.HandleFunc(http.MethodGet+" "+attachmentPattern, v.attachment)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow string
		switch {
		case access.MatchPattern(pagePattern, r.URL.Path), access.MatchPattern(attachmentPattern, r.URL.Path),
			access.MatchPattern(listIssuePattern, r.URL.Path), access.MatchPattern(listAttachmentPattern, r.URL.Path):
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				allow = "GET, HEAD"
			}
		case access.MatchPattern(unlockPattern, r.URL.Path), access.MatchPattern(commentPattern, r.URL.Path),
			access.MatchPattern(fieldPattern, r.URL.Path), access.MatchPattern(uploadPattern, r.URL.Path),
			access.MatchPattern(listCommentPattern, r.URL.Path), access.MatchPattern(listFieldPattern, r.URL.Path),
			access.MatchPattern(listUploadPattern, r.URL.Path):
			if r.Method != http.MethodPost {
				allow = "POST"
			}
		default:
			v.fail(w, r, problem.NotFound("no such page"))
			return
		}
		if allow != "" {
			w.Header().Set("Allow", allow)
			v.fail(w, r, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "use "+allow+" on this path"))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// fail answers a problem JSON to a JSON client and a page to a person.
func (v *viewer) fail(w http.ResponseWriter, r *http.Request, err error) {
	d, ok := err.(*problem.Details)
	if !ok {
		v.s.log.Error("share: page request failed", zap.String("path", r.URL.Path), zap.Error(err))
		d = problem.FromError(err)
	}
	if d.Code == problem.CodeHostUnavailable {
		// The cause is counted in keygate_host_requests_total; the log
		// says which pages it took down. The path holds a share's uuid,
		// which the audit log of the APIs shows as well.
		v.s.log.Warn("share: the issue tracker did not answer", zap.String("path", r.URL.Path))
	}
	if reply.WantsJSON(r) {
		problem.Write(w, d)
		return
	}
	if d.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(d.RetryAfter))
	}
	writePage(w, &pageData{Status: d.Status, Title: d.Title, Message: pageMessage(d)})
}

func pageMessage(d *problem.Details) string {
	switch d.Code {
	case problem.CodeNotFound:
		if d.Detail == noShare || d.Detail == "" {
			return "This share does not exist, or it was removed."
		}
		// A page under the share: say what is missing.
		return sentence(d.Detail)
	case problem.CodeGone:
		return "This share has expired."
	case problem.CodeInternal:
		return "Something went wrong. Please try again later."
	}
	if d.Detail == "" {
		return d.Title
	}
	return d.Detail
}

// open reads the share named in the path for an outside party: unknown
// is 404, expired 410.
func (v *viewer) open(r *http.Request, now time.Time) (*Record, error) {
	// One read outside a transaction: the page shows no opening count.
	var rec *Record
	var err error
	if _, ok := canonicalUUID(r.PathValue("uuid")); ok {
		rec, _, err = v.s.be.ShareNow(r.Context(), r.PathValue("uuid"), 0)
	}
	switch {
	case err != nil:
		return nil, err
	case rec == nil:
		return nil, problem.NotFound(noShare)
	case rec.expired(now.UnixMilli()):
		return nil, problem.New(http.StatusGone, problem.CodeGone, "the share has expired")
	}
	return rec, nil
}

// onList reports whether email is on the share's selected users, ignoring
// case as mail systems do in practice.
func (r *Record) onList(email string) bool {
	if r.SelectedUsersConfig == nil || email == "" {
		return false
	}
	for _, u := range r.SelectedUsersConfig.List {
		if strings.EqualFold(u.Email, email) {
			return true
		}
	}
	return false
}

// lockedPage is the unlock form, or for JSON a 401 naming what to send.
func (v *viewer) locked(w http.ResponseWriter, r *http.Request, rec *Record, status int, message, email string) {
	if reply.WantsJSON(r) {
		d := problem.New(status, problem.CodeForbidden, message)
		if status == http.StatusUnauthorized && message == lockedMessage {
			if rec.selectedOnly() {
				d.Errors = append(d.Errors, problem.FieldError{Field: "email", Code: "required", Message: "email is required to open this share"})
			}
			if rec.PasswordHash != "" {
				d.Errors = append(d.Errors, problem.FieldError{Field: "password", Code: "required", Message: "password is required to open this share"})
			}
		}
		problem.Write(w, d)
		return
	}
	if message == lockedMessage {
		message = ""
	}
	writePage(w, &pageData{Status: status, Title: "Open a share", Message: message, Locked: true,
		AskPass: rec.PasswordHash != "", AskEmail: rec.selectedOnly(), Email: email,
		UnlockURL: "/s/" + rec.UUID + "/unlock"})
}

const lockedMessage = "this share must be unlocked first: POST /s/{uuid}/unlock"

func (v *viewer) page(w http.ResponseWriter, r *http.Request) {
	now := v.s.now()
	rec, err := v.open(r, now)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	email, ok := v.s.openedBy(r, rec, now)
	if !ok {
		status := http.StatusUnauthorized
		if !reply.WantsJSON(r) {
			status = http.StatusOK // a person opening a link gets the form, not an error
		}
		v.locked(w, r, rec, status, lockedMessage, "")
		return
	}
	if r.Method == http.MethodGet {
		v.s.recordPageEvent(rec.ID, Activity{Timestamp: now.UnixMilli(), Source: activitySource,
			Action: ActionViewed, Email: nonEmpty(email), IP: ipString(r)}, true)
	}
	view := newPublicView(rec)
	view.Tracker = v.host != nil
	issueID := r.PathValue("issue")
	switch {
	case v.host == nil && issueID != "":
		v.fail(w, r, problem.NotFound("no such page"))
		return
	case v.host == nil:
	case rec.Type == TypeIssue && issueID == "":
		view.Issue, err = viewIssue(r.Context(), v.host, rec)
	case rec.Type == TypeJQL && issueID != "":
		view.Issue, err = queryIssue(r.Context(), v.host, rec, issueID)
	case rec.Type == TypeJQL:
		page, perr := strconv.Atoi(r.URL.Query().Get("page"))
		if perr != nil || page < 1 {
			page = 1
		}
		view.List, err = viewList(r.Context(), v.host, rec, page)
	case (rec.Type == TypeBoard || rec.Type == TypeTimeline) && issueID != "":
		view.Issue, err = boardIssue(r.Context(), v.host, rec, issueID)
	case rec.Type == TypeBoard || rec.Type == TypeTimeline:
		view.BoardIssues, err = viewBoard(r.Context(), v.host, rec)
	case issueID != "":
		err = problem.NotFound("no such page")
	}
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if reply.WantsJSON(r) {
		reply.JSON(w, http.StatusOK, view)
		return
	}
	title := "Shared " + typeTitles[rec.Type]
	switch {
	case rec.IssueID != "":
		title += " " + rec.IssueID
	case issueID != "":
		title += ": issue " + issueID
	}
	d := &pageData{Status: http.StatusOK, Title: title, View: view,
		Fields: pageFields(rec.FieldsConfig), Expires: formatMillis(view.Expiration)}
	if view.Issue != nil && rec.may("comment", PermAdd) {
		d.CommentURL = view.Issue.base + "/comments"
	}
	writePage(w, d)
}

// openedBy reports whether req may see rec: an open share, or one its
// unlock cookie opened (for a share limited to selected users, by an
// e-mail on the list); email is the unlocking one.
func (s *Store) openedBy(req *http.Request, rec *Record, now time.Time) (email string, ok bool) {
	if !rec.gated() {
		return "", true
	}
	email, ok = s.unlockedBy(req, rec, now)
	if !ok || (rec.selectedOnly() && !rec.onList(email)) {
		return "", false
	}
	return email, true
}

// errNotOpened is the refusal of a write or download by a party that
// has not unlocked the share.
func errNotOpened() *problem.Details {
	return problem.New(http.StatusUnauthorized, problem.CodeForbidden, "open the share first")
}

// noShare is the detail of a 404 for a share that does not exist.
const noShare = "no share with this uuid"

// typeTitles name the share types in a page's title.
var typeTitles = map[string]string{TypeIssue: "issue", TypeJQL: "query", TypeBoard: "board", TypeTimeline: "timeline"}

// sentence is detail as a sentence: a capital first and a full stop.
func sentence(detail string) string {
	detail = strings.ToUpper(detail[:1]) + detail[1:]
	if !strings.HasSuffix(detail, ".") {
		detail += "."
	}
	return detail
}

func ipString(r *http.Request) *string {
	if ip := clientip.From(r); ip.IsValid() {
		s := ip.String()
		return &s
	}
	return nil
}

// unlockInput is the unlock form or JSON body.
type unlockInput struct {
	Password string `json:"password"`
	Email    string `json:"email"`
}

func (v *viewer) readUnlock(w http.ResponseWriter, r *http.Request) (unlockInput, error) {
	var in unlockInput
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case problem.IsJSON(mt):
		err := problem.DecodeJSON(w, r, &in)
		return in, err
	case mt == "application/x-www-form-urlencoded":
		r.Body = http.MaxBytesReader(w, r.Body, maxUnlockBody)
		if err := r.ParseForm(); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return in, problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the form is too large")
			}
			return in, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the form could not be read")
		}
		in.Password = r.PostForm.Get("password")
		in.Email = strings.TrimSpace(r.PostForm.Get("email"))
		return in, nil
	}
	return in, problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMedia,
		"send the unlock as application/x-www-form-urlencoded or application/json")
}

// unlock checks the password and, for a share limited to selected users,
// the e-mail. Wrong ones answer 401, write "unlock-failed" and spend one
// of the client's attempts; right ones set the signed cookie.
func (v *viewer) unlock(w http.ResponseWriter, r *http.Request) {
	// Answer a JSON body in kind, errors of open and readUnlock included.
	asJSON := reply.WantsJSON(r) || problem.IsJSON(r.Header.Get("Content-Type"))
	if asJSON {
		r.Header.Set("Accept", "application/json")
	}
	now := v.s.now()
	rec, err := v.open(r, now)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	// Another site must not open the share in a visitor's browser with a
	// password it knows (login CSRF): the visitor would then write, in
	// its name, on a share they think is theirs.
	if err := v.s.sameOrigin(r); err != nil {
		v.fail(w, r, err)
		return
	}
	in, err := v.readUnlock(w, r)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if !rec.gated() {
		v.unlocked(w, r, rec, asJSON)
		return
	}
	var f problem.Fields
	if rec.selectedOnly() && in.Email == "" {
		f.Add("email", "required", "email is required to open this share")
	}
	if rec.PasswordHash != "" && in.Password == "" {
		f.Add("password", "required", "password is required to open this share")
	}
	if err := f.Err(); err != nil {
		if asJSON {
			v.fail(w, r, err)
			return
		}
		v.locked(w, r, rec, http.StatusBadRequest, "Please fill in every field.", in.Email)
		return
	}
	ip := clientip.From(r)
	cancel, wait, err := v.s.reserveUnlock(r.Context(), rec.ID, ip, now)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if cancel == nil {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		msg := "too many wrong attempts; try again in " + strconv.Itoa(secs) + " seconds"
		if asJSON {
			v.fail(w, r, problem.New(http.StatusTooManyRequests, problem.CodeRateLimited, msg))
			return
		}
		v.locked(w, r, rec, http.StatusTooManyRequests, "Too many wrong attempts. Try again in "+strconv.Itoa(secs)+" seconds.", in.Email)
		return
	}
	ok := !rec.selectedOnly() || rec.onList(in.Email)
	if rec.PasswordHash != "" {
		match, err := v.s.hasher.verify(rec.PasswordHash, in.Password)
		if err != nil {
			cancel(r.Context(), now)
			v.fail(w, r, err)
			return
		}
		ok = ok && match
	}
	email := ""
	if rec.selectedOnly() {
		email = in.Email
	}
	if !ok {
		v.s.recordPageEvent(rec.ID, Activity{Timestamp: now.UnixMilli(), Source: activitySource,
			Action: ActionUnlockFailed, Email: nonEmpty(in.Email), IP: ipString(r)}, false)
		v.locked(w, r, rec, http.StatusUnauthorized, wrongMessage(rec), in.Email)
		return
	}
	cancel(r.Context(), now)
	secure := r.TLS != nil || strings.HasPrefix(v.s.baseURL, "https://")
	http.SetCookie(w, v.s.unlockCookie(rec, email, now, secure))
	v.unlocked(w, r, rec, asJSON)
}

func wrongMessage(rec *Record) string {
	switch {
	case rec.PasswordHash != "" && rec.selectedOnly():
		return "The e-mail address or the password is wrong."
	case rec.PasswordHash != "":
		return "The password is wrong."
	}
	return "This e-mail address may not open the share."
}

// unlocked sends a person back to the page and tells a JSON client 204.
func (v *viewer) unlocked(w http.ResponseWriter, r *http.Request, rec *Record, asJSON bool) {
	problem.SecureHeaders(w.Header()) // may carry the unlock cookie
	if asJSON {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, "/s/"+rec.UUID, http.StatusSeeOther)
}
