package contracts

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"sort"
	"unicode/utf8"

	"go.etcd.io/bbolt"

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

// Templates is the template registry in bbolt, keyed by template id.
type Templates struct{ db *bbolt.DB }

// NewTemplates opens the registry in db, creating its bucket.
func NewTemplates(db *bbolt.DB) (*Templates, error) {
	err := db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketTemplates, bucketTemplateDigests} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Templates{db: db}, nil
}

// Validate lists every rule t breaks.
func (t *Template) Validate() error {
	var f problem.Fields
	text.CheckID(&f, "id", t.ID)
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
	val, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketTemplates)
		created = b.Get([]byte(t.ID)) == nil
		if !created && !replace {
			return problem.New(http.StatusConflict, problem.CodeConflict, "a template with this id exists: replace it with PUT")
		}
		if err := b.Put([]byte(t.ID), val); err != nil {
			return err
		}
		d := documentDigest(t.Title, t.Body)
		return tx.Bucket(bucketTemplateDigests).Put([]byte(t.ID), d[:])
	})
	return created, err
}

// Get returns the template id, or a 404 problem.
func (s *Templates) Get(id string) (Template, error) {
	var t Template
	err := s.db.View(func(tx *bbolt.Tx) error {
		return getTemplate(tx, id, &t)
	})
	return t, err
}

var errNoTemplate = problem.NotFound("no template with this id")

// getTemplate reads id inside tx, so a contract create can copy the
// template in the same transaction that stores the contract.
func getTemplate(tx *bbolt.Tx, id string, t *Template) error {
	v := tx.Bucket(bucketTemplates).Get([]byte(id))
	if v == nil {
		return errNoTemplate
	}
	return json.Unmarshal(v, t)
}

// templateDocument reads template id inside tx with the digest of its title
// and body, computing the digest if the template predates digests.
func templateDocument(tx *bbolt.Tx, id string, t *Template) (digest [sha256.Size]byte, err error) {
	if err := getTemplate(tx, id, t); err != nil {
		return digest, err
	}
	if d := tx.Bucket(bucketTemplateDigests).Get([]byte(id)); len(d) == sha256.Size {
		copy(digest[:], d)
		return digest, nil
	}
	return documentDigest(t.Title, t.Body), nil
}

// documentDigest names a document by its content: the same title and body
// give the same digest, so contracts made from an unchanged template share
// one stored copy, and an edited template gives a new one.
func documentDigest(title, body string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(title)))
	h.Write(n[:])
	h.Write([]byte(title))
	h.Write([]byte(body))
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// List returns every template ordered by id.
func (s *Templates) List() ([]Template, error) {
	list := []Template{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketTemplates).ForEach(func(_, v []byte) error {
			var t Template
			if err := json.Unmarshal(v, &t); err != nil {
				return err
			}
			list = append(list, t)
			return nil
		})
	})
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list, err
}

// Delete removes template id, or answers a 404 problem. Contracts made
// from it keep their copies.
func (s *Templates) Delete(id string) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketTemplates)
		if b.Get([]byte(id)) == nil {
			return errNoTemplate
		}
		if err := tx.Bucket(bucketTemplateDigests).Delete([]byte(id)); err != nil {
			return err
		}
		return b.Delete([]byte(id))
	})
}
