package share

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/reply"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/text"
)

// api serves the External Share Web API. The gateway has checked the key
// and put its identity in the request context before a request gets here.
type api struct{ s *Store }

// NewHandler returns the API under /webapi/share. Its routes are built
// from the rows of Operations, the table the key check reads, so the two
// can never disagree on what a path means.
func NewHandler(s *Store) http.Handler {
	h := &api{s: s}
	byName := map[string]http.HandlerFunc{
		"list":     h.list,
		"create":   h.create,
		"get":      h.get,
		"update":   h.update,
		"delete":   h.delete,
		"activity": h.activity,
	}
	mux := http.NewServeMux()
	for _, op := range Operations.Operations {
		fn, ok := byName[op.Name]
		if !ok {
			panic("share: no handler for operation " + op.Name)
		}
		mux.Handle(op.Method+" "+op.Pattern, fn)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, allow := Operations.Match(r.Method, r.URL.Path)
		if op == nil {
			if len(allow) > 0 {
				w.Header().Set("Allow", strings.Join(allow, ", "))
				problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed,
					"use "+strings.Join(allow, ", ")+" on this path"))
				return
			}
			problem.Write(w, problem.NotFound("no such path"))
			return
		}
		if access.IdentityFrom(r.Context()) == nil {
			s.log.Error("share: request without key identity; is webapi_auth in front of webapi_share?")
			problem.Write(w, problem.Internal())
			return
		}
		r = r.WithContext(withClientIP(r.Context(), clientip.From(r)))
		mux.ServeHTTP(w, r)
	})
}

// fail writes err as a problem and logs what a 500 hides.
func (h *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	if _, ok := err.(*problem.Details); !ok {
		h.s.log.Error("share: request failed", zap.String("method", r.Method),
			zap.String("path", r.URL.Path), zap.Error(err))
	}
	problem.WriteError(w, err)
}

// queryParams checks that q holds only the names in allowed, each once,
// and reports every other one.
func queryParams(q url.Values, f *problem.Fields, allowed ...string) {
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		switch {
		case !known:
			f.Add(name, "unknown_parameter", name+" is not a known query parameter")
		case len(q[name]) > 1:
			f.Add(name, "invalid", name+" must be given once")
		}
	}
}

// intParam reads an integer query parameter; absent gives def.
func intParam(q url.Values, name string, def int, f *problem.Fields) int {
	v, ok := q[name]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v[0])
	if err != nil {
		f.Add(name, "invalid", name+" must be an integer")
		return def
	}
	return n
}

// filterParam reads an id filter: absent is "", present must be 1-255
// printable ASCII.
func filterParam(q url.Values, name string, f *problem.Fields) string {
	v, ok := q[name]
	if !ok {
		return ""
	}
	text.CheckID(f, name, v[0])
	return v[0]
}

func (h *api) list(w http.ResponseWriter, r *http.Request) {
	q, ok := h.query(w, r)
	if !ok {
		return
	}
	var f problem.Fields
	queryParams(q, &f, "sort", "sortOrder", "limit", "offset", "issueId", "userId", "projectId")
	lq := ListQuery{
		Limit:     intParam(q, "limit", defaultListLimit, &f),
		Offset:    intParam(q, "offset", 0, &f),
		IssueID:   filterParam(q, "issueId", &f),
		UserID:    filterParam(q, "userId", &f),
		ProjectID: filterParam(q, "projectId", &f),
		Sort:      "id",
	}
	if v, ok := q["sort"]; ok {
		lq.Sort = v[0]
		if !slices.Contains(SortFields, lq.Sort) {
			f.Add("sort", "invalid", "sort must be one of "+strings.Join(SortFields, ", "))
		}
	}
	if v, ok := q["sortOrder"]; ok {
		switch strings.ToLower(v[0]) {
		case "asc":
		case "desc":
			lq.Desc = true
		default:
			f.Add("sortOrder", "invalid", "sortOrder must be asc or desc")
		}
	}
	if lq.Limit < 1 || lq.Limit > maxListLimit {
		f.Add("limit", "out_of_range", "limit must be 1 to 1000")
	}
	if lq.Offset < 0 {
		f.Add("offset", "out_of_range", "offset must be 0 or more")
	}
	if err := f.Err(); err != nil {
		h.fail(w, r, err)
		return
	}
	shares, total, err := h.s.List(r.Context(), access.IdentityFrom(r.Context()), lq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("X-Total-Count", strconv.Itoa(total))
	reply.JSON(w, http.StatusOK, shares)
}

// query decodes r's query string, answering a 400 when it does not.
func (h *api) query(w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	q, err := problem.DecodeQuery(r.URL.RawQuery)
	if err != nil {
		h.fail(w, r, err)
		return nil, false
	}
	return q, true
}

// noQuery refuses query parameters on operations that take none.
func (h *api) noQuery(w http.ResponseWriter, r *http.Request) bool {
	q, ok := h.query(w, r)
	if !ok {
		return false
	}
	var f problem.Fields
	queryParams(q, &f)
	if err := f.Err(); err != nil {
		h.fail(w, r, err)
		return false
	}
	return true
}

func (h *api) create(w http.ResponseWriter, r *http.Request) {
	if !h.noQuery(w, r) {
		return
	}
	caller := access.IdentityFrom(r.Context())
	call, ok := h.s.idem.Begin(w, r, caller.Owner, Prefix)
	if !ok {
		return
	}
	if call != nil {
		defer call.Done()
	}
	var in CreateRequest
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		h.fail(w, r, err)
		return
	}
	if call != nil {
		h.createOnce(w, r, call, caller, &in)
		return
	}
	sh, err := h.s.Create(r.Context(), caller, &in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Location", Prefix+"/"+sh.UUID)
	reply.JSON(w, http.StatusCreated, sh)
}

// createOnce is create with an Idempotency-Key: the reply is made in
// the create's transaction and stored with the share.
func (h *api) createOnce(w http.ResponseWriter, r *http.Request, call *idempotency.Call, caller *access.Identity, in *CreateRequest) {
	_, err := h.s.CreateWith(r.Context(), caller, in, func(tx storage.Tx, sh *Share) error {
		return call.SaveCreated(r.Context(), tx, Prefix+"/"+sh.UUID, sh)
	})
	call.Finish(w, r, err, h.fail)
}

func (h *api) get(w http.ResponseWriter, r *http.Request) {
	if !h.noQuery(w, r) {
		return
	}
	sh, err := h.s.Get(r.Context(), access.IdentityFrom(r.Context()), r.PathValue("uuid"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	reply.JSON(w, http.StatusOK, sh)
}

func (h *api) update(w http.ResponseWriter, r *http.Request) {
	if !h.noQuery(w, r) {
		return
	}
	var in CreateRequest
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		h.fail(w, r, err)
		return
	}
	sh, err := h.s.Update(r.Context(), access.IdentityFrom(r.Context()), r.PathValue("uuid"), &in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	reply.JSON(w, http.StatusOK, sh)
}

func (h *api) delete(w http.ResponseWriter, r *http.Request) {
	if !h.noQuery(w, r) {
		return
	}
	if err := h.s.Delete(r.Context(), access.IdentityFrom(r.Context()), r.PathValue("uuid")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *api) activity(w http.ResponseWriter, r *http.Request) {
	q, ok := h.query(w, r)
	if !ok {
		return
	}
	var f problem.Fields
	queryParams(q, &f, "limit", "offset")
	limit := intParam(q, "limit", defaultActivityLimit, &f)
	offset := intParam(q, "offset", 0, &f)
	if limit < 1 || limit > maxActivityLimit {
		f.Add("limit", "out_of_range", "limit must be 1 to 1000")
	}
	if offset < 0 {
		f.Add("offset", "out_of_range", "offset must be 0 or more")
	}
	if err := f.Err(); err != nil {
		h.fail(w, r, err)
		return
	}
	list, err := h.s.Activity(r.Context(), access.IdentityFrom(r.Context()), r.PathValue("uuid"), limit, offset)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	reply.JSON(w, http.StatusOK, list)
}
