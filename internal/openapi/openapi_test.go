package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/openapi"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
)

var documents = []struct {
	name string
	json func() []byte
}{
	{"webapi", openapi.WebAPI},
	{"admin", openapi.Admin},
}

// TestIndependentValidator checks both documents against the OpenAPI 3.1
// schema with pb33f/libopenapi and libopenapi-validator: an
// implementation apart from kin-openapi, which the integration tests
// validate replies with, so that a document both accept is not merely
// what one library tolerates.
func TestIndependentValidator(t *testing.T) {
	for _, d := range documents {
		t.Run(d.name, func(t *testing.T) {
			doc, err := libopenapi.NewDocument(d.json())
			if err != nil {
				t.Fatal(err)
			}
			if v := doc.GetSpecInfo().SpecFormat; v != "oas3_1" || !strings.HasPrefix(doc.GetVersion(), "3.1") {
				t.Fatalf("libopenapi reads %s %s", v, doc.GetVersion())
			}
			if _, errs := doc.BuildV3Model(); errs != nil {
				t.Fatalf("building the model: %v", errs)
			}
			v, errs := validator.NewValidator(doc)
			if len(errs) > 0 {
				t.Fatalf("validator: %v", errs)
			}
			if ok, verrs := v.ValidateDocument(); !ok {
				for _, e := range verrs {
					t.Errorf("%s (line %d): %s", e.Message, e.SpecLine, e.Reason)
					for _, se := range e.SchemaValidationErrors {
						t.Errorf("  %s (%s): %s", se.FieldPath, se.KeywordLocation, se.Reason)
					}
				}
			}
		})
	}
}

// TestKinOpenAPILoads: the library the tests validate replies with loads
// each document as OpenAPI 3.1, resolves every reference and finds it
// valid, examples included.
func TestKinOpenAPILoads(t *testing.T) {
	for _, d := range documents {
		t.Run(d.name, func(t *testing.T) {
			loader := openapi3.NewLoader()
			doc, err := loader.LoadFromData(d.json())
			if err != nil {
				t.Fatal(err)
			}
			if !doc.IsOpenAPI31OrLater() {
				t.Fatalf("version %s", doc.OpenAPI)
			}
			if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOperationTables: every row of the two APIs' operation tables, which
// the key check and the handlers share, is an operation of the document
// on the same method and path, asking for the same privilege, and the
// document has no API operation the tables lack.
func TestOperationTables(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(openapi.WebAPI())
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented[method+" "+path] = op
		}
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	shape := func(p string) string { return param.ReplaceAllString(p, "{}") }
	tables := []struct {
		table  access.Table
		scheme string
	}{
		{contracts.Operations, "contractsKey"},
		{share.Operations, "shareKey"},
	}
	inTables := map[string]bool{}
	for _, tb := range tables {
		for _, row := range tb.table.Operations {
			var op *openapi3.Operation
			for key, o := range documented {
				method, path, _ := strings.Cut(key, " ")
				if method == row.Method && shape(path) == shape(row.Pattern) {
					op = o
					inTables[key] = true
				}
			}
			if op == nil {
				t.Errorf("%s %s (%s) is not documented", row.Method, row.Pattern, row.Name)
				continue
			}
			if op.Security == nil || len(*op.Security) != 1 {
				t.Errorf("%s: security %v, want one requirement", op.OperationID, op.Security)
				continue
			}
			scopes, ok := (*op.Security)[0][tb.scheme]
			if !ok || !slices.Equal(scopes, []string{string(row.Privilege)}) {
				t.Errorf("%s: security %v, want %s [%s]", op.OperationID, (*op.Security)[0], tb.scheme, row.Privilege)
			}
		}
	}
	for key, op := range documented {
		if strings.HasPrefix(key, "GET /webapi/openapi") || strings.HasPrefix(key, "GET /webapi/docs") || strings.HasPrefix(key, "GET /webapi/documents/") || !strings.Contains(key, " /webapi/") {
			continue
		}
		if !inTables[key] {
			t.Errorf("%s (%s) is documented but no operation table has it", key, op.OperationID)
		}
	}
}

// noServerError are the paths that answer from memory and have no 500.
var noServerError = map[string]bool{"/webapi/openapi.json": true, "/webapi/docs": true, "/webapi/docs/docs.css": true, "/livez": true, "/readyz": true}

// TestEveryOperation holds the documents to what the tests rely on: a
// unique operationId per operation, a 500 on each, and every object
// schema closed or free-form on purpose.
func TestEveryOperation(t *testing.T) {
	for _, d := range documents {
		t.Run(d.name, func(t *testing.T) {
			doc, err := openapi3.NewLoader().LoadFromData(d.json())
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			for path, item := range doc.Paths.Map() {
				for method, op := range item.Operations() {
					where := method + " " + path
					if op.OperationID == "" || ids[op.OperationID] {
						t.Errorf("%s: operationId %q missing or repeated", where, op.OperationID)
					}
					ids[op.OperationID] = true
					// The document and the health endpoints answer from
					// memory (readiness says 503 when a part fails): no 500.
					if !noServerError[path] && op.Responses.Status(500) == nil {
						t.Errorf("%s: no 500", where)
					}
				}
			}
		})
	}
}

// TestToJSON: the conversion keeps the order of the source's mappings,
// sets the server asked for, and refuses what JSON cannot say.
func TestToJSON(t *testing.T) {
	got, err := openapi.ToJSON([]byte("b: 1\na: [x, 2.5, true, null]\nc: {z: '01', y: 0x10}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b":1,"a":["x",2.5,true,null],"c":{"z":"01","y":16}}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	got, err = openapi.ToJSON([]byte("openapi: 3.1.0\nservers:\n  - url: /\n"), "https://gw.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"openapi":"3.1.0","servers":[{"url":"https://gw.example.com"}]}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	for _, bad := range []string{"a: 1\na: 2\n", "a: .inf\n", "- a\n", "x: &x {a: 1}\ny:\n  <<: *x\n"} {
		if _, err := openapi.ToJSON([]byte(bad), ""); err == nil {
			t.Errorf("%q converted", bad)
		}
	}
	// The embedded documents: their first keys in the source's order, the
	// JSON valid, and a server set where asked.
	var m map[string]any
	if err := json.Unmarshal(openapi.WebAPI(), &m); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(openapi.WebAPI(), []byte(`{"openapi":"3.1.0","jsonSchemaDialect":`)) {
		t.Errorf("document starts %.60s", openapi.WebAPI())
	}
	b, err := openapi.WebAPIFor("https://gw.example.com")
	if err != nil || !bytes.Contains(b, []byte(`"servers":[{"url":"https://gw.example.com"}]`)) {
		t.Errorf("WebAPIFor: %v %.200s", err, b)
	}
	if !bytes.Contains(openapi.WebAPIYAML(), []byte("openapi: 3.1.0")) || !bytes.Contains(openapi.AdminYAML(), []byte("openapi: 3.1.0")) {
		t.Error("YAML sources")
	}
}
