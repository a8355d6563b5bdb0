package contracts

import (
	"context"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/clientip"
)

// Origin is where a request that changed a contract came from, as the
// certificate of completion records each step: the API key that made it
// (a creation through the API), the client address (Caddy's client_ip,
// never a header) and the user agent.
type Origin struct {
	KeyID     string
	KeyName   string
	IP        string
	UserAgent string
}

// maxUserAgent bounds the stored user agent: real ones stay well below;
// a longer one is a client's choice the record need not keep whole.
const maxUserAgent = 512

// OriginOf reads the origin of r: the key from the identity that the key
// check set, if any, the client address, and the User-Agent made
// printable and cut to maxUserAgent bytes.
func OriginOf(r *http.Request) Origin {
	var o Origin
	if id := access.IdentityFrom(r.Context()); id != nil {
		o.KeyID, o.KeyName = id.KeyID, id.KeyName
	}
	if addr := clientip.From(r); addr.IsValid() {
		o.IP = addr.String()
	}
	o.UserAgent = cleanUserAgent(r.UserAgent())
	return o
}

// cleanUserAgent keeps the printable characters of ua, each run of
// spaces as one space, up to maxUserAgent bytes: it is shown in a PDF and
// must neither break a line, nor push text to where a line of the
// certificate's own would start, nor hide what it is.
func cleanUserAgent(ua string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.TrimSpace(ua) {
		switch {
		case r == utf8.RuneError:
			r = '?'
		case unicode.IsSpace(r):
			if space {
				continue
			}
			r = ' '
		case !unicode.IsPrint(r):
			continue
		}
		space = r == ' '
		if b.Len()+utf8.RuneLen(r) > maxUserAgent {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

type originKey struct{}

// WithOrigin returns ctx carrying o, for the store's OnCreate hook: a
// creation's origin travels with the call as its key's identity does.
func WithOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

// OriginFrom returns the origin set by WithOrigin; the zero Origin when
// none was (a contract created by a program, not a request).
func OriginFrom(ctx context.Context) Origin {
	o, _ := ctx.Value(originKey{}).(Origin)
	return o
}
