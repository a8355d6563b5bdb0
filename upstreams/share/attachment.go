package share

import (
	"errors"
	"io"
	"mime"
	"net/http"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
)

// attachmentPattern downloads an attachment of a shared issue, and
// listAttachmentPattern one of an issue opened from a list.
const (
	attachmentPattern     = "/s/{uuid}/attachments/{id}"
	listAttachmentPattern = "/s/{uuid}/issues/{issue}/attachments/{id}"
)

// attachment streams an attachment of the shared issue, where the share
// lets the party view the attachments' content (VIEW_CONTENT): only one
// the issue has, as a download (Content-Disposition: attachment) that the
// browser may not sniff, run or frame. It needs what reading the page
// needs.
func (v *viewer) attachment(w http.ResponseWriter, r *http.Request) {
	now := v.s.now()
	rec, err := v.open(r, now)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if _, ok := v.s.openedBy(r, rec, now); !ok {
		v.fail(w, r, errNotOpened())
		return
	}
	listed := r.PathValue("issue")
	if v.host == nil || (rec.Type == TypeIssue) == (listed != "") || !rec.may("attachment", PermViewContent) {
		v.fail(w, r, problem.NotFound("no such attachment"))
		return
	}
	var in *sharedIssue
	if listed != "" {
		in, err = listedIssue(r.Context(), v.host, rec, listed)
	} else {
		in, err = viewIssue(r.Context(), v.host, rec)
	}
	if err != nil {
		v.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	var att *host.Attachment
	for i := range in.Attachments {
		if in.Attachments[i].ID == id {
			att = &in.Attachments[i]
		}
	}
	if att == nil {
		v.fail(w, r, problem.NotFound("the shared issue has no such attachment"))
		return
	}
	body, err := v.host.Download(r.Context(), id)
	switch {
	case errors.Is(err, host.ErrNotFound):
		v.fail(w, r, errItemGone())
		return
	case err != nil:
		v.fail(w, r, errHostUnavailable())
		return
	}
	defer body.Close()
	h := w.Header()
	problem.SecureHeaders(h)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": att.Name}))
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, body); err != nil {
		v.s.log.Debug("share: an attachment's download ended early", zap.Error(err))
	}
}
