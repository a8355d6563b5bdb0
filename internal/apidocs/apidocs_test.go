package apidocs

import (
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/openapi"
)

// TestEverythingVisible renders the Web API document and finds in the
// page every operation, each of its parameters and response statuses,
// every schema and each of its properties, every error code, an example
// for every JSON body, and the webhooks.
func TestEverythingVisible(t *testing.T) {
	raw := openapi.WebAPI()
	page, err := Render(raw, "/webapi/docs/docs.css", "/webapi/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Webhooks   map[string]map[string]json.RawMessage
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	// article returns the HTML of the operation with id.
	article := func(id string) string {
		i := strings.Index(text, `<article class="operation" id="op-`+id+`"`)
		if i < 0 {
			return ""
		}
		end := strings.Index(text[i:], "</article>")
		return text[i : i+end]
	}
	ops := 0
	for path, item := range doc.Paths {
		for method, rawOp := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				OperationID string `json:"operationId"`
				Parameters  []struct {
					Name string
					Ref  string `json:"$ref"`
				}
				Responses   map[string]json.RawMessage
				RequestBody *struct {
					Ref     string `json:"$ref"`
					Content map[string]json.RawMessage
				}
			}
			if err := json.Unmarshal(rawOp, &op); err != nil {
				t.Fatal(err)
			}
			ops++
			a := article(op.OperationID)
			if a == "" {
				t.Errorf("%s %s (%s) is not on the page", method, path, op.OperationID)
				continue
			}
			if !strings.Contains(a, html.EscapeString(path)) || !strings.Contains(a, strings.ToUpper(method)) {
				t.Errorf("%s: method or path missing", op.OperationID)
			}
			for _, p := range op.Parameters {
				name := p.Name
				if p.Ref != "" {
					name = "" // checked through the components' parameters below
				}
				if name != "" && !strings.Contains(a, "<code>"+name+"</code>") {
					t.Errorf("%s: parameter %s missing", op.OperationID, name)
				}
			}
			for status := range op.Responses {
				if !strings.Contains(a, "<span>"+status+"</span>") {
					t.Errorf("%s: response %s missing", op.OperationID, status)
				}
			}
			if op.RequestBody != nil {
				for mt := range op.RequestBody.Content {
					if !strings.Contains(a, "<code>"+html.EscapeString(mt)+"</code>") {
						t.Errorf("%s: request body %s missing", op.OperationID, mt)
					}
					if mt == "application/json" && !strings.Contains(a, `<figure class="example">`) {
						t.Errorf("%s: no example of its JSON body", op.OperationID)
					}
				}
			}
			if strings.Contains(string(rawOp), `"application/json"`) && !strings.Contains(a, `<figure class="example">`) {
				t.Errorf("%s: no JSON example", op.OperationID)
			}
		}
	}
	if ops < 25 {
		t.Fatalf("only %d operations in the document", ops)
	}
	for name := range doc.Webhooks {
		if !strings.Contains(text, `<code class="path">`+html.EscapeString(name)+`</code>`) {
			t.Errorf("webhook %s is not on the page", name)
		}
	}
	for name, s := range doc.Components.Schemas {
		i := strings.Index(text, `id="schema-`+anchor(name)+`"`)
		if i < 0 {
			t.Errorf("schema %s has no section", name)
			continue
		}
		section := text[i : i+strings.Index(text[i:], "</section>")]
		for prop := range s.Properties {
			if !strings.Contains(section, "<code>"+prop+"</code>") {
				t.Errorf("schema %s: property %s missing", name, prop)
			}
		}
	}
	// Every error code, with its status where a response names it.
	for _, want := range []string{"missing_key", "invalid_key", "missing_privilege", "not_found", "rate_limited", "quota_exceeded", "not_ready", "idempotency_key_reused"} {
		if !regexp.MustCompile(`<tr id="error-` + want + `"><td><code>` + want + `</code></td><td>[0-9, ]+</td>`).MatchString(text) {
			t.Errorf("error code %s is not listed with its status", want)
		}
	}
	if strings.Contains(strings.ToLower(text), "<script") {
		t.Error("the page has a script")
	}
	if regexp.MustCompile(`(src|href)="(https?:)?//`).MatchString(text) {
		t.Error("the page refers to another origin")
	}
}

// TestRenderRules checks the renderer on small documents: descriptions'
// raw HTML left out, examples from the document before made ones, samples
// from each kind of schema, objects in their document order.
func TestRenderRules(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		want    []string
		notWant []string
	}{
		{
			name:    "raw HTML in a description is not markup",
			doc:     `{"openapi":"3.1.0","info":{"title":"T <i>x</i>","version":"1","description":"Hi <script>alert(1)</script> <img src=x onerror=alert(1)> [a](javascript:alert(1))"},"paths":{}}`,
			want:    []string{"<title>T &lt;i&gt;x&lt;/i&gt;: API reference</title>"},
			notWant: []string{"<script>alert", "<img", `href="javascript:`},
		},
		{
			name: "the document's example comes first",
			doc: `{"openapi":"3.1.0","info":{"title":"T","version":"1"},"paths":{"/x":{"post":{"operationId":"x","summary":"X",
				"requestBody":{"content":{"application/json":{"schema":{"type":"object","properties":{"a":{"type":"string"}}},"example":{"a":"from the document"}}}},
				"responses":{"204":{"description":"Done."}}}}}}`,
			want:    []string{"from the document", `id="op-x"`, "<span>204</span>"},
			notWant: []string{`&#34;a&#34;: &#34;string&#34;`},
		},
		{
			name: "samples by type and format, in property order",
			doc: `{"openapi":"3.1.0","info":{"title":"T","version":"1"},"paths":{"/y":{"get":{"operationId":"y","summary":"Y",
				"responses":{"200":{"description":"OK","content":{"application/json":{"schema":{"type":"object","required":["zeta"],"additionalProperties":false,"properties":{
					"zeta":{"type":"string","format":"date-time"},"alpha":{"type":"integer","minimum":3},"id":{"type":"string","format":"uuid"},
					"kind":{"enum":["first","second"]},"tags":{"type":"array","items":{"type":"string","const":"t"}},"ok":{"type":["boolean","null"]}}}}}}}}}}}`,
			want: []string{
				"{\n  &#34;zeta&#34;: &#34;2026-11-22T10:15:00.000Z&#34;,\n  &#34;alpha&#34;: 3,\n  &#34;id&#34;: &#34;01a2139b-46b7-72cb-bd43-7aba811f6931&#34;,\n  &#34;kind&#34;: &#34;first&#34;,\n  &#34;tags&#34;: [\n    &#34;t&#34;\n  ],\n  &#34;ok&#34;: true\n}",
				`<code>zeta</code> <span class="req">required</span>`, "one of <code>&#34;first&#34;</code>, <code>&#34;second&#34;</code>", "No other fields",
				"No key: anyone may call it.", // no security at all
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := Render([]byte(tt.doc), "/d.css", "/d.json")
			if err != nil {
				t.Fatal(err)
			}
			text := string(page)
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(text, w) {
					t.Errorf("page holds %q", w)
				}
			}
			if t.Failed() {
				t.Log(text)
			}
		})
	}
	if _, err := Render([]byte(`[1]`), "", ""); err == nil {
		t.Error("an array rendered as a document")
	}
}
