package contracts

import (
	"context"
	"crypto/sha256"
	"errors"
	"sort"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/storage"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
)

// Template is a page or issue of the host platform that contracts are made
// from. Its collectionId, title and body are copied into each contract, so
// later edits of the template do not change contracts already made.
type Template struct {
	ID           string `json:"id"`
	CollectionID string `json:"collectionId"`
	Title        string `json:"title"`
	Body         string `json:"body"`
}

// bucketTemplates: template id → JSON Template. bucketTemplateDigests:
// template id → SHA-256 of its title and body, computed once when the
// template is stored, so that each contract create can name its copy of the
// document without hashing a body of up to 1 MiB.
var (
	bucketTemplates       = []byte("templates")
	bucketTemplateDigests = []byte("template_digests")
)

// maxTemplateBody bounds a template body; admin bodies are capped at 1 MiB
// by the decoder anyway.
const maxTemplateBody = 1 << 20

// Templates is the template registry, keyed by template id.
type Templates struct {
	db      storage.DB
	backend TemplateBackend
}

// NewTemplates opens the registry kept by backend in db.
func NewTemplates(db storage.DB, backend TemplateBackend) (*Templates, error) {
	if db == nil || backend == nil {
		return nil, errors.New("contracts: NewTemplates needs a database and a backend")
	}
	return &Templates{db: db, backend: backend}, nil
}

// Validate lists every rule t breaks.
func (t *Template) Validate() error {
	var f problem.Fields
	checkTemplateID(&f, "id", t.ID)
	text.CheckID(&f, "collectionId", t.CollectionID)
	switch {
	case t.Title == "":
		f.Add("title", "required", "title is required")
	case !text.Printable(t.Title, 255):
		f.Add("title", "invalid", "title must be 1 to 255 printable characters")
	}
	if len(t.Body) > maxTemplateBody || !utf8.ValidString(t.Body) {
		f.Add("body", "invalid", "body must be UTF-8 text of at most 1 MiB")
	}
	return f.Err()
}

// checkTemplateID records in f that v is no id for a new template. A
// template id is one path segment of /webapi/templates/{id} on the admin
// API and the keys page, so it is 1 to 255 unreserved URL characters
// (RFC 3986: letters, digits, '.', '_', '~', '-') and not a dot segment,
// which clients resolve away ("..", "."). A tracker's page and issue ids
// (PAGE-42, 10001) are such. Ids stored before the rule can still be
// read and removed: only Add and Put check it.
func checkTemplateID(f *problem.Fields, field, v string) {
	const msg = " must be 1 to 255 of the characters A-Z a-z 0-9 . _ ~ - and not . or .."
	switch {
	case v == "":
		f.Add(field, "required", field+" is required")
	case len(v) > 255 || v == "." || v == "..":
		f.Add(field, "invalid", field+msg)
	default:
		for i := 0; i < len(v); i++ {
			if c := v[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-') {
				f.Add(field, "invalid", field+msg)
				return
			}
		}
	}
}

// Put stores t, replacing a template of the same id; created tells which.
func (s *Templates) Put(t Template) (created bool, err error) {
	return s.put(t, true)
}

// Add stores t as a new template; an existing id is a 409 problem,
// decided in the same transaction as the write.
func (s *Templates) Add(t Template) error {
	_, err := s.put(t, false)
	return err
}

func (s *Templates) put(t Template, replace bool) (created bool, err error) {
	if err := t.Validate(); err != nil {
		return false, err
	}
	d := documentDigest(t.Title, t.Body)
	ctx := context.Background()
	err = s.db.Update(ctx, func(tx storage.Tx) error {
		var err error
		created, err = s.backend.PutTemplate(ctx, tx, &t, d, replace)
		return err
	})
	return created, err
}

// Get returns the template id, or a 404 problem.
func (s *Templates) Get(id string) (Template, error) {
	var t Template
	ctx := context.Background()
	err := s.db.View(ctx, func(tx storage.Tx) error {
		x, _, err := s.backend.Template(ctx, tx, id)
		if err == nil {
			t = *x
		}
		return err
	})
	return t, err
}

var errNoTemplate = problem.NotFound("no template with this id")

// templateDocument reads template id inside tx with the digest of its
// title and body.
func (s *Templates) templateDocument(ctx context.Context, tx storage.Tx, id string) (*Template, [sha256.Size]byte, error) {
	t, d, err := s.backend.Template(ctx, tx, id)
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	return t, templateDigest(t, d), nil
}

// templateDigest is the digest of t's document: stored, the one given,
// else (a template that predates digests) computed.
func templateDigest(t *Template, stored []byte) [sha256.Size]byte {
	var digest [sha256.Size]byte
	if len(stored) == sha256.Size {
		copy(digest[:], stored)
		return digest
	}
	return documentDigest(t.Title, t.Body)
}

// List returns every template ordered by id.
func (s *Templates) List() ([]Template, error) {
	var list []Template
	ctx := context.Background()
	err := s.db.View(ctx, func(tx storage.Tx) error {
		var err error
		list, err = s.backend.Templates(ctx, tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list, nil
}

// Delete removes template id, or answers a 404 problem. Contracts made
// from it keep their copies.
func (s *Templates) Delete(id string) error {
	ctx := context.Background()
	return s.db.Update(ctx, func(tx storage.Tx) error {
		return s.backend.DeleteTemplate(ctx, tx, id)
	})
}
