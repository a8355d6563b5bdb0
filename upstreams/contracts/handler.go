package contracts

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/reply"
	"github.com/keygate/keygate/internal/storage"
)

// handler serves the operation table. The gateway has checked the key and
// put its identity in the request context before any of these run.
type handler struct {
	store *Store
	mux   *http.ServeMux
}

// NewHandler serves every row of Operations, routed by the same method and
// pattern the key check matched, so the two cannot disagree.
func NewHandler(s *Store) http.Handler {
	h := &handler{store: s, mux: http.NewServeMux()}
	ops := map[string]http.HandlerFunc{
		"search":     h.search,
		"create":     h.create,
		"get":        h.get,
		"archive":    h.archive,
		"delete":     h.delete,
		"attachment": h.attachment,
	}
	for _, op := range Operations.Operations {
		fn, ok := ops[op.Name]
		if !ok {
			panic("contracts: no handler for operation " + op.Name)
		}
		h.mux.HandleFunc(op.Method+" "+op.Pattern, fn)
	}
	// Whatever no row matches: 405 if the path is ours under another
	// method, else 404, in the problem body.
	h.mux.HandleFunc("/", h.unmatched)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if access.IdentityFrom(r.Context()) == nil {
		h.store.log.Error("contracts: request reached the API without an identity",
			zap.String("method", r.Method), zap.String("path", r.URL.Path))
		problem.Write(w, problem.Internal())
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) unmatched(w http.ResponseWriter, r *http.Request) {
	if _, allow := Operations.Match(r.Method, r.URL.Path); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed,
			"this path does not answer "+r.Method))
		return
	}
	problem.Write(w, problem.NotFound("no such resource"))
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) {
	owner := access.IdentityFrom(r.Context()).Owner
	r = r.WithContext(WithOrigin(r.Context(), OriginOf(r)))
	call, ok := h.store.cfg.Idempotency.Begin(w, r, owner, Prefix)
	if !ok {
		return
	}
	if call != nil {
		defer call.Done()
	}
	var in CreateRequest
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		problem.WriteError(w, err)
		return
	}
	if call != nil {
		h.createOnce(w, r, call, owner, &in)
		return
	}
	c, err := h.store.Create(r.Context(), owner, &in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v, err := h.store.view(c, true, owner)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Location", Prefix+"/"+c.ID)
	reply.JSON(w, http.StatusCreated, v)
}

// createOnce is create with an Idempotency-Key: the reply is made in
// the create's transaction and stored with the contract.
func (h *handler) createOnce(w http.ResponseWriter, r *http.Request, call *idempotency.Call, owner string, in *CreateRequest) {
	_, err := h.store.CreateWith(r.Context(), owner, in, func(tx storage.Tx, c *Contract) error {
		v, err := h.store.view(c, true, owner)
		if err != nil {
			return err
		}
		return call.SaveCreated(r.Context(), tx, Prefix+"/"+c.ID, v)
	})
	call.Finish(w, r, err, h.fail)
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	c, err := h.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	v, err := h.store.view(c, true, access.IdentityFrom(r.Context()).Owner)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	reply.JSON(w, http.StatusOK, v)
}

func (h *handler) search(w http.ResponseWriter, r *http.Request) {
	q, err := parseRawQuery(r.URL.RawQuery)
	if err != nil {
		problem.WriteError(w, err)
		return
	}
	res, err := h.store.Search(r.Context(), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	page := searchPage{TotalCount: res.TotalCount}
	if len(res.Contracts) > 0 {
		page.Contracts = make([]contractView, len(res.Contracts))
		for i, c := range res.Contracts {
			page.Contracts[i], _ = h.store.view(c, false, "")
		}
	}
	reply.JSON(w, http.StatusOK, page)
}

// archive takes no body: the API says none is sent, so one that is sent
// is a mistake worth telling about.
func (h *handler) archive(w http.ResponseWriter, r *http.Request) {
	var one [1]byte
	if n, _ := io.ReadFull(r.Body, one[:]); n > 0 {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "archive takes no request body"))
		return
	}
	if err := h.store.Archive(r.Context(), r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	if err := h.store.Delete(r.Context(), r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// attachment sends a PDF of a completed contract as a download. Its
// ETag is the file's SHA-256, which the Contract Object also shows.
func (h *handler) attachment(w http.ResponseWriter, r *http.Request) {
	a, data, err := h.store.Attachment(r.Context(), r.PathValue("id"), r.PathValue("attachmentId"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", a.MediaType)
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.FileName}))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("ETag", `"`+a.SHA256+`"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// fail writes a client error as its problem and anything else as the
// 5xx of problem.FromError (507 for a full disk, 503 for another storage
// failure, else 500), which says nothing of the inside, logging the cause.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if d, ok := err.(*problem.Details); ok {
		problem.Write(w, d)
		return
	}
	if r.Context().Err() == nil {
		h.store.log.Error("contracts: request failed",
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	}
	problem.WriteError(w, err)
}
