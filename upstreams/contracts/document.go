package contracts

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/richtext"
	"github.com/keygate/keygate/internal/text"
)

// Document is a contract's text, copied at its creation from a template
// of the registry or a page of the issue tracker, and stored once for
// every contract that holds the same text.
type Document struct {
	Title string `json:"title"`
	Body  string `json:"body"`
	// Markup is the body's format: "markdown" (CommonMark) for a page of
	// the tracker written in it, "" for plain text (a registry template,
	// or a tracker page in a markup keygate does not render).
	Markup string `json:"markup,omitempty"`
}

// encode is the stored form of d.
func (d *Document) encode() ([]byte, error) { return json.Marshal(d) }

// encodeDocument is the stored copy of t's title and body.
func encodeDocument(t *Template) ([]byte, error) {
	return (&Document{Title: t.Title, Body: t.Body}).encode()
}

// digest names d by its content: the same text gives the same digest, so
// contracts made from an unchanged template share one stored copy, and
// an edited template gives a new one.
func (d *Document) digest() [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	if d.Markup != "" {
		// A title length no title has marks a document with markup, so
		// that it never shares a digest with a plain one.
		binary.BigEndian.PutUint64(n[:], math.MaxUint64)
		h.Write(n[:])
		binary.BigEndian.PutUint64(n[:], uint64(len(d.Markup)))
		h.Write(n[:])
		h.Write([]byte(d.Markup))
	}
	binary.BigEndian.PutUint64(n[:], uint64(len(d.Title)))
	h.Write(n[:])
	h.Write([]byte(d.Title))
	h.Write([]byte(d.Body))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// documentDigest is the digest of a plain document: a registry
// template's title and body.
func documentDigest(title, body string) [sha256.Size]byte {
	return (&Document{Title: title, Body: body}).digest()
}

// PageReader reads the issue tracker's pages that contracts may be made
// from; host.Host is one.
type PageReader interface {
	// Page reads page ref with its version, host.ErrNotFound if the
	// tracker has none (or keygate's account may not see it),
	// host.ErrUnavailable if the tracker did not answer.
	Page(ctx context.Context, ref string) (*host.Page, error)
}

// trackerPage is a page of the tracker as a contract copies it.
type trackerPage struct {
	// ref is the page's reference as the tracker names it, the
	// contract's templateId.
	ref        string
	doc        Document
	digest     [sha256.Size]byte
	collection string
	source     string
}

// errOnTracker stops a create's transaction whose template the registry
// does not have, for the tracker to be asked outside it.
var errOnTracker = errors.New("contracts: the template is not in the registry")

// MaxPageReads is how many tracker pages creates read at once, on one
// instance; a create beyond is refused at once (503, Retry-After 1)
// rather than queued, so that a flood of creates leaves the tracker's
// capacity to the share pages and the tracker itself unhurt.
const MaxPageReads = 4

// readPage reads page id from the tracker for a contract: a 400
// unknown_template if it has none, a 503 host_unavailable if it fails
// otherwise (no answer, keygate's account refused) or MaxPageReads are in
// flight, as a share's check answers, a 400 if the page cannot be a
// contract's text.
func (s *Store) readPage(ctx context.Context, id string) (*trackerPage, error) {
	select {
	case s.pageReads <- struct{}{}:
		defer func() { <-s.pageReads }()
	default:
		d := problem.HostUnavailable("too many contracts are being made from the issue tracker's pages at once; no contract was created: try again")
		d.RetryAfter = 1
		return nil, d
	}
	p, err := s.cfg.Pages.Page(ctx, id)
	switch {
	case errors.Is(err, host.ErrNotFound):
		var f problem.Fields
		f.Add("templateId", codeUnknownTemplate, "templateId names no registered template and no page of the issue tracker")
		return nil, f.Err()
	case err != nil:
		s.log.Warn("contracts: the issue tracker failed; the create is refused", zap.String("template", id), zap.Error(err))
		return nil, problem.HostUnavailable("the issue tracker did not answer; no contract was created: try again")
	}
	var f problem.Fields
	if len(p.Body) > maxTemplateBody || !utf8.ValidString(p.Body) {
		f.Add("templateId", "invalid", "the issue tracker's page is longer than 1 MiB of UTF-8 text, the most a contract holds")
	}
	if !text.PrintableASCII(p.Project, maxTextLen) {
		// The collection of a contract is an id clients filter on.
		f.Add("templateId", "invalid", "the issue tracker's page belongs to a project whose identifier is not printable US-ASCII")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	markup := ""
	if p.Markup == richtext.Markdown {
		markup = richtext.Markdown
	}
	doc := Document{Title: pageTitle(p.Title, id), Body: p.Body, Markup: markup}
	ref := p.Ref
	if !text.PrintableASCII(ref, maxTextLen) {
		ref = id
	}
	return &trackerPage{ref: ref, doc: doc, digest: doc.digest(), collection: p.Project, source: p.Source}, nil
}

// pageTitle makes a tracker page's title a contract document's: control
// characters as spaces, at most 255 characters, and the template id when
// nothing is left.
func pageTitle(title, id string) string {
	title = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, title))
	if r := []rune(title); len(r) > 255 {
		title = strings.TrimSpace(string(r[:255]))
	}
	if title == "" {
		return id
	}
	return title
}
