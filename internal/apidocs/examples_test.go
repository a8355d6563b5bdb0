package apidocs

import (
	"bytes"
	"encoding/json"
	"sort"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/keygate/keygate/internal/openapi"
)

// TestExamplesValid checks every example the page shows, made or the
// document's own, against its schema with kin-openapi's validator: an
// example a client copies must be one the gateway accepts (or sends).
func TestExamplesValid(t *testing.T) {
	raw := openapi.WebAPI()
	root, err := decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	r := &renderer{doc: root, codes: map[string]*errorCode{}}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	// check validates the example the page shows for media (ours, decoded
	// in key order) against schema (kin-openapi's).
	checked := 0
	check := func(where string, media *object, schema *openapi3.SchemaRef, request bool) {
		t.Helper()
		var v any
		if ex := media.get("example"); ex != nil {
			v = ex
		} else {
			r.minimal = request
			v = r.sample(media.obj("schema"), 0)
			r.minimal = false
		}
		if v == nil || schema == nil {
			return
		}
		var b bytes.Buffer
		encode(&b, v, "")
		var plain any
		if err := json.Unmarshal(b.Bytes(), &plain); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		checked++
		if err := schema.Value.VisitJSON(plain, openapi3.MultiErrors()); err != nil {
			t.Errorf("%s: the example\n%s\nis not valid: %v", where, b.String(), err)
		}
	}
	paths := root.obj("paths")
	for _, p := range paths.keys {
		item := doc.Paths.Find(p)
		for _, m := range methods {
			op := paths.obj(p).obj(m)
			if op == nil {
				continue
			}
			kop := item.GetOperation(map[string]string{"get": "GET", "post": "POST", "put": "PUT", "patch": "PATCH", "delete": "DELETE", "head": "HEAD"}[m])
			if body, _ := r.ref(op.get("requestBody")); body != nil && kop.RequestBody != nil {
				for _, mt := range keysOf(body.obj("content")) {
					if isJSON(mt) {
						check(m+" "+p+" request "+mt, body.obj("content").obj(mt), kop.RequestBody.Value.Content[mt].Schema, true)
					}
				}
			}
			statuses := keysOf(op.obj("responses"))
			sort.Strings(statuses)
			for _, st := range statuses {
				resp, _ := r.ref(op.obj("responses").get(st))
				kr := kop.Responses.Value(st)
				for _, mt := range keysOf(resp.obj("content")) {
					if isJSON(mt) && kr != nil {
						check(m+" "+p+" "+st+" "+mt, resp.obj("content").obj(mt), kr.Value.Content[mt].Schema, false)
					}
				}
			}
		}
	}
	schemas := root.obj("components").obj("schemas")
	for _, name := range schemas.keys {
		media := &object{keys: []string{"schema"}, vals: map[string]any{"schema": schemas.obj(name)}}
		check("schema "+name, media, doc.Components.Schemas[name], false)
	}
	if checked < 60 {
		t.Errorf("only %d examples checked", checked)
	}
}
