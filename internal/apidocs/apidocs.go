// Package apidocs renders an OpenAPI 3.1 document as one HTML page for
// people: every operation with its key and privilege, parameters, request
// body and responses (headers, schemas, examples), the webhooks, the error
// codes and every schema. It renders once, on the server: the page runs no
// script and loads nothing but its stylesheet from its own origin, so it
// is served under a strict Content-Security-Policy, and it reads in any
// browser, a screen reader or a terminal's text browser. Examples are the
// document's own where it has them, else made from the schema.
package apidocs

import (
	"bytes"
	_ "embed"
	"fmt"
	"html"
	"sort"
	"strconv"
	"strings"

	"github.com/yuin/goldmark"
)

// Stylesheet is the page's CSS, served beside it.
//
//go:embed docs.css
var Stylesheet []byte

// methods are the operations of a path item, in the order a reader
// expects them.
var methods = []string{"get", "head", "post", "put", "patch", "delete", "options"}

// Render makes the page of the OpenAPI document doc (JSON); cssURL is
// where the page finds Stylesheet, jsonURL where the document itself is.
func Render(doc []byte, cssURL, jsonURL string) ([]byte, error) {
	root, err := decode(doc)
	if err != nil {
		return nil, err
	}
	r := &renderer{doc: root, codes: map[string]*errorCode{}, jsonURL: jsonURL}
	r.page(cssURL)
	return r.b.Bytes(), nil
}

type renderer struct {
	doc *object
	// minimal makes a sample hold only the required properties and those
	// the document gives an example of: a request body's example, which
	// a client sends as it is (an optional time or a phone number that
	// needs the SMS shipper would not always be accepted).
	minimal bool
	jsonURL string
	b       bytes.Buffer
	codes   map[string]*errorCode
}

// errorCode is a problem code with the statuses and meanings the
// document gives it.
type errorCode struct {
	code     string
	statuses map[string]bool
	meanings []string
}

func (r *renderer) w(format string, args ...any) { fmt.Fprintf(&r.b, format, args...) }

// esc is HTML-escaped text.
func esc(s string) string { return html.EscapeString(s) }

// markdown renders a description (CommonMark); raw HTML in it is left
// out, so a description cannot put markup or script into the page.
func markdown(s string) string {
	var out bytes.Buffer
	if err := goldmark.Convert([]byte(s), &out); err != nil {
		return "<p>" + esc(s) + "</p>"
	}
	return out.String()
}

// anchor makes an id attribute value from parts.
func anchor(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('-')
		}
		for _, c := range p {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
				b.WriteRune(c)
			default:
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// ref follows v's $ref within the document, returning the object it
// names and the name of a component ("" when v is inline).
func (r *renderer) ref(v any) (*object, string) {
	o, _ := v.(*object)
	for range 10 {
		target := o.str("$ref")
		if target == "" {
			break
		}
		path := strings.Split(strings.TrimPrefix(target, "#/"), "/")
		next := r.doc
		for _, p := range path {
			next = next.obj(strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~"))
		}
		if next == nil {
			return o, ""
		}
		if len(path) == 3 && path[0] == "components" {
			return next, path[2]
		}
		o = next
	}
	return o, ""
}

type operation struct {
	method, path string
	op, item     *object
	webhook      string
}

func (op operation) id() string {
	if id := op.op.str("operationId"); id != "" {
		return "op-" + anchor(id)
	}
	return "op-" + anchor(op.method, op.path)
}

// operations groups the document's operations by their first tag, in the
// document's order of tags (untagged ones last).
func (r *renderer) operations() (tags []string, byTag map[string][]operation) {
	byTag = map[string][]operation{}
	for _, t := range r.doc.list("tags") {
		if to, ok := t.(*object); ok {
			tags = append(tags, to.str("name"))
		}
	}
	paths := r.doc.obj("paths")
	for _, p := range keysOf(paths) {
		item := paths.obj(p)
		for _, m := range methods {
			op := item.obj(m)
			if op == nil {
				continue
			}
			tag := "Other"
			if ts := op.list("tags"); len(ts) > 0 {
				tag, _ = ts[0].(string)
			}
			if _, known := byTag[tag]; !known && !contains(tags, tag) {
				tags = append(tags, tag)
			}
			byTag[tag] = append(byTag[tag], operation{method: m, path: p, op: op, item: item})
		}
	}
	return tags, byTag
}

func (r *renderer) webhooks() []operation {
	var out []operation
	hooks := r.doc.obj("webhooks")
	for _, name := range keysOf(hooks) {
		item, _ := r.ref(hooks.get(name))
		for _, m := range methods {
			if op := item.obj(m); op != nil {
				out = append(out, operation{method: m, path: name, op: op, item: item, webhook: name})
			}
		}
	}
	return out
}

func keysOf(o *object) []string {
	if o == nil {
		return nil
	}
	return o.keys
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func (r *renderer) page(cssURL string) {
	info := r.doc.obj("info")
	title := info.str("title")
	tags, byTag := r.operations()
	hooks := r.webhooks()
	schemas := r.doc.obj("components").obj("schemas")

	r.w("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	r.w("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	r.w("<title>%s: API reference</title>\n<link rel=\"stylesheet\" href=\"%s\">\n</head>\n<body>\n", esc(title), esc(cssURL))
	r.w("<a class=\"skip\" href=\"#main\">Skip to the reference</a>\n")

	// Contents: every section and operation, one click away.
	r.w("<nav aria-label=\"Contents\">\n<p class=\"brand\">%s <span class=\"version\">%s</span></p>\n<ul>\n", esc(title), esc(info.str("version")))
	r.w("<li><a href=\"#overview\">Overview</a></li>\n")
	for _, t := range tags {
		if len(byTag[t]) == 0 {
			continue
		}
		r.w("<li><a href=\"#tag-%s\">%s</a>\n<ul>\n", anchor(t), esc(t))
		for _, op := range byTag[t] {
			r.w("<li><a href=\"#%s\"><span class=\"method %s\">%s</span> %s</a></li>\n", op.id(), op.method, strings.ToUpper(op.method), esc(op.op.str("summary")))
		}
		r.w("</ul></li>\n")
	}
	if len(hooks) > 0 {
		r.w("<li><a href=\"#webhooks\">Webhooks</a></li>\n")
	}
	r.w("<li><a href=\"#errors\">Error codes</a></li>\n<li><a href=\"#schemas\">Schemas</a></li>\n</ul>\n</nav>\n")

	r.w("<main id=\"main\">\n<h1>%s</h1>\n", esc(title))
	r.w("<section id=\"overview\" aria-labelledby=\"overview-h\">\n<h2 id=\"overview-h\">Overview</h2>\n")
	r.w("<p class=\"meta\">OpenAPI %s · version %s · <a href=\"%s\">the document as JSON</a></p>\n", esc(r.doc.str("openapi")), esc(info.str("version")), esc(r.jsonURL))
	r.w("%s", markdown(info.str("description")))
	if servers := r.doc.list("servers"); len(servers) > 0 {
		r.w("<h3>Servers</h3>\n<ul>\n")
		for _, s := range servers {
			so, _ := s.(*object)
			r.w("<li><code>%s</code> %s</li>\n", esc(so.str("url")), esc(so.str("description")))
		}
		r.w("</ul>\n")
	}
	r.securitySchemes()
	r.w("</section>\n")

	for _, t := range tags {
		if len(byTag[t]) == 0 {
			continue
		}
		r.w("<section id=\"tag-%s\" aria-labelledby=\"tag-%s-h\">\n<h2 id=\"tag-%s-h\">%s</h2>\n", anchor(t), anchor(t), anchor(t), esc(t))
		for _, to := range r.doc.list("tags") {
			if o, _ := to.(*object); o.str("name") == t {
				r.w("%s", markdown(o.str("description")))
			}
		}
		for _, op := range byTag[t] {
			r.operation(op)
		}
		r.w("</section>\n")
	}
	if len(hooks) > 0 {
		r.w("<section id=\"webhooks\" aria-labelledby=\"webhooks-h\">\n<h2 id=\"webhooks-h\">Webhooks</h2>\n")
		r.w("<p>Requests the gateway sends to your endpoint, not requests you send.</p>\n")
		for _, op := range hooks {
			r.operation(op)
		}
		r.w("</section>\n")
	}
	r.errors()
	r.w("<section id=\"schemas\" aria-labelledby=\"schemas-h\">\n<h2 id=\"schemas-h\">Schemas</h2>\n")
	for _, name := range keysOf(schemas) {
		s := schemas.obj(name)
		r.w("<section class=\"schema\" id=\"schema-%s\" aria-labelledby=\"schema-%s-h\">\n<h3 id=\"schema-%s-h\">%s</h3>\n", anchor(name), anchor(name), anchor(name), esc(name))
		r.w("%s", markdown(s.str("description")))
		r.w("<p class=\"type\">%s</p>\n", r.summary(s))
		r.w("%s", r.fields(s, 0))
		r.example("Example", s, nil)
		r.w("</section>\n")
	}
	r.w("</section>\n</main>\n</body>\n</html>\n")
}

func (r *renderer) securitySchemes() {
	schemes := r.doc.obj("components").obj("securitySchemes")
	if schemes == nil {
		return
	}
	r.w("<h3>Authentication</h3>\n<dl>\n")
	for _, name := range schemes.keys {
		s := schemes.obj(name)
		kind := s.str("type")
		if sc := s.str("scheme"); sc != "" {
			kind += ", " + sc
		}
		if in := s.str("in"); in != "" {
			kind += " in " + in + " " + s.str("name")
		}
		r.w("<dt id=\"auth-%s\"><code>%s</code> <span class=\"meta\">(%s)</span></dt>\n<dd>%s</dd>\n", anchor(name), esc(name), esc(kind), markdown(s.str("description")))
	}
	r.w("</dl>\n")
}

// security says which key an operation takes: the operation's own
// requirement, else the document's.
func (r *renderer) security(op *object) string {
	reqs, set := op.get("security").([]any)
	if !set {
		reqs = r.doc.list("security")
	}
	if len(reqs) == 0 {
		return "No key: anyone may call it."
	}
	var alts []string
	for _, req := range reqs {
		ro, _ := req.(*object)
		if ro == nil || len(ro.keys) == 0 {
			alts = append(alts, "no key")
			continue
		}
		for _, scheme := range ro.keys {
			s := "<a href=\"#auth-" + anchor(scheme) + "\"><code>" + esc(scheme) + "</code></a>"
			var privs []string
			for _, p := range ro.list(scheme) {
				if ps, ok := p.(string); ok {
					privs = append(privs, "<code>"+esc(ps)+"</code>")
				}
			}
			if len(privs) > 0 {
				s += " with the privilege " + strings.Join(privs, ", ")
			}
			alts = append(alts, s)
		}
	}
	return "Key: " + strings.Join(alts, ", or ") + "."
}

func (r *renderer) operation(op operation) {
	o := op.op
	id := op.id()
	r.w("<article class=\"operation\" id=\"%s\" aria-labelledby=\"%s-h\">\n", id, id)
	r.w("<h3 id=\"%s-h\"><span class=\"method %s\">%s</span> <code class=\"path\">%s</code></h3>\n", id, op.method, strings.ToUpper(op.method), esc(op.path))
	r.w("<p class=\"summary\">%s", esc(o.str("summary")))
	if opID := o.str("operationId"); opID != "" {
		r.w(" <span class=\"meta\">· operationId <code>%s</code></span>", esc(opID))
	}
	r.w("</p>\n")
	if o.get("deprecated") == true {
		r.w("<p class=\"deprecated\">Deprecated.</p>\n")
	}
	r.w("%s", markdown(o.str("description")))
	if op.webhook == "" {
		r.w("<p class=\"security\">%s</p>\n", r.security(o))
	}

	var params []*object
	for _, list := range [][]any{op.item.list("parameters"), o.list("parameters")} {
		for _, p := range list {
			po, _ := r.ref(p)
			params = append(params, po)
		}
	}
	if len(params) > 0 {
		r.w("<h4>Parameters</h4>\n<div class=\"scroll\"><table>\n<thead><tr><th scope=\"col\">Name</th><th scope=\"col\">In</th><th scope=\"col\">Type</th><th scope=\"col\">Description</th></tr></thead>\n<tbody>\n")
		for _, p := range params {
			req := ""
			if p.get("required") == true {
				req = " <span class=\"req\">required</span>"
			}
			r.w("<tr><td><code>%s</code>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", esc(p.str("name")), req, esc(p.str("in")), r.summary(p.obj("schema")), markdown(p.str("description")))
		}
		r.w("</tbody>\n</table></div>\n")
	}

	if body, _ := r.ref(o.get("requestBody")); body != nil {
		req := "optional"
		if body.get("required") == true {
			req = "required"
		}
		r.w("<h4>Request body <span class=\"meta\">(%s)</span></h4>\n%s", req, markdown(body.str("description")))
		r.content(body.obj("content"), true)
	}

	responses := o.obj("responses")
	if responses != nil {
		r.w("<h4>Responses</h4>\n")
		for _, status := range responses.keys {
			resp, _ := r.ref(responses.get(status))
			r.w("<div class=\"response\">\n<p class=\"status s%c\"><span>%s</span> %s</p>\n", status[0], esc(status), markdown(resp.str("description")))
			r.collectCodes(status, resp)
			if headers := resp.obj("headers"); headers != nil && len(headers.keys) > 0 {
				r.w("<div class=\"scroll\"><table class=\"headers\">\n<thead><tr><th scope=\"col\">Header</th><th scope=\"col\">Type</th><th scope=\"col\">Description</th></tr></thead>\n<tbody>\n")
				for _, name := range headers.keys {
					h, _ := r.ref(headers.get(name))
					req := ""
					if h.get("required") == true {
						req = " <span class=\"req\">always</span>"
					}
					r.w("<tr><td><code>%s</code>%s</td><td>%s</td><td>%s</td></tr>\n", esc(name), req, r.summary(h.obj("schema")), markdown(h.str("description")))
				}
				r.w("</tbody>\n</table></div>\n")
			}
			r.content(resp.obj("content"), false)
			r.w("</div>\n")
		}
	}
	r.w("</article>\n")
}

// content shows each media type of a body: its schema and an example,
// for a request a minimal one.
func (r *renderer) content(content *object, request bool) {
	for _, mt := range keysOf(content) {
		media := content.obj(mt)
		schema := media.obj("schema")
		r.w("<div class=\"media\">\n<p class=\"mediatype\"><code>%s</code> %s</p>\n", esc(mt), r.summary(schema))
		if _, name := r.ref(schema); name == "" {
			r.w("%s", r.fields(schema, 0))
		}
		if isJSON(mt) {
			r.minimal = request
			r.example("Example", schema, media)
			r.minimal = false
		}
		r.w("</div>\n")
	}
}

func isJSON(mediaType string) bool {
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

// example shows the media's own examples, else one made from schema.
func (r *renderer) example(label string, schema, media *object) {
	type named struct {
		name  string
		value any
	}
	var examples []named
	if media != nil {
		if ex := media.get("example"); ex != nil {
			examples = append(examples, named{"", ex})
		}
		exs := media.obj("examples")
		for _, name := range keysOf(exs) {
			eo, _ := r.ref(exs.get(name))
			examples = append(examples, named{eo.str("summary"), eo.get("value")})
		}
	}
	if len(examples) == 0 {
		v := r.sample(schema, 0)
		if v == nil {
			return
		}
		examples = append(examples, named{"", v})
	}
	for _, ex := range examples {
		title := label
		if ex.name != "" {
			title += ": " + ex.name
		}
		var b bytes.Buffer
		encode(&b, ex.value, "")
		r.w("<figure class=\"example\">\n<figcaption>%s</figcaption>\n<pre><code>%s</code></pre>\n</figure>\n", esc(title), esc(b.String()))
	}
}

// summary is a schema's type in a few words: a link to a named schema,
// a constant, the values of an enum, the type with its format and
// constraints, an array's items, the alternatives of oneOf and anyOf.
func (r *renderer) summary(s *object) string {
	if s == nil {
		return ""
	}
	if name := refName(s.str("$ref")); name != "" {
		return "<a href=\"#schema-" + anchor(name) + "\">" + esc(name) + "</a>"
	}
	var parts []string
	if c, ok := s.vals["const"]; ok {
		parts = append(parts, "always "+literal(c))
	}
	if enum := s.list("enum"); len(enum) > 0 {
		var vals []string
		for _, e := range enum {
			vals = append(vals, literal(e))
		}
		parts = append(parts, "one of "+strings.Join(vals, ", "))
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts := s.list(k); len(alts) > 0 {
			var as []string
			for _, a := range alts {
				ao, _ := a.(*object)
				as = append(as, r.summary(ao))
			}
			parts = append(parts, strings.Join(as, " or "))
		}
	}
	if all := s.list("allOf"); len(all) > 0 {
		var as []string
		for _, a := range all {
			ao, _ := a.(*object)
			if sum := r.summary(ao); sum != "" {
				as = append(as, sum)
			}
		}
		parts = append(parts, strings.Join(as, " and "))
	}
	t := typeName(s)
	if t == "array" {
		t = "array of " + r.summary(s.obj("items"))
	} else if t != "" {
		t = esc(t)
	}
	if f := s.str("format"); f != "" {
		t += " (" + esc(f) + ")"
	}
	if t != "" && len(parts) == 0 {
		parts = append(parts, t)
	} else if t != "" && t != "object" {
		parts = append([]string{t}, parts...)
	}
	if c := constraints(s); c != "" {
		parts = append(parts, c)
	}
	return strings.Join(parts, "; ")
}

func refName(ref string) string {
	if i := strings.LastIndexByte(ref, '/'); i >= 0 && strings.HasPrefix(ref, "#/components/schemas/") {
		return ref[i+1:]
	}
	return ""
}

// typeName reads "type", a string or a list such as ["string", "null"].
func typeName(s *object) string {
	switch t := s.get("type").(type) {
	case string:
		return t
	case []any:
		var ts []string
		for _, e := range t {
			if es, ok := e.(string); ok {
				ts = append(ts, es)
			}
		}
		return strings.Join(ts, " or ")
	}
	if s.obj("properties") != nil {
		return "object"
	}
	return ""
}

func literal(v any) string {
	var b bytes.Buffer
	encode(&b, v, "")
	return "<code>" + esc(b.String()) + "</code>"
}

// constraints lists a schema's limits in words.
func constraints(s *object) string {
	var out []string
	for _, c := range []struct{ key, words, unit string }{
		{"minLength", "at least %s %s", "character"}, {"maxLength", "at most %s %s", "character"},
		{"minimum", "≥ %s%s", ""}, {"maximum", "≤ %s%s", ""}, {"exclusiveMinimum", "> %s%s", ""}, {"exclusiveMaximum", "< %s%s", ""},
		{"minItems", "at least %s %s", "item"}, {"maxItems", "at most %s %s", "item"},
		{"default", "default %s%s", ""},
	} {
		if v, ok := s.vals[c.key]; ok {
			var b bytes.Buffer
			encode(&b, v, "")
			unit := c.unit
			if unit != "" && b.String() != "1" {
				unit += "s"
			}
			out = append(out, fmt.Sprintf(c.words, esc(b.String()), unit))
		}
	}
	if s.get("uniqueItems") == true {
		out = append(out, "no repeats")
	}
	if p := s.str("pattern"); p != "" {
		out = append(out, "matches <code>"+esc(p)+"</code>")
	}
	return strings.Join(out, ", ")
}

// fields is the table of an object schema's properties, nested objects
// within their row; a named schema is linked, not repeated.
func (r *renderer) fields(s *object, depth int) string {
	if s == nil || depth > 4 {
		return ""
	}
	props := s.obj("properties")
	var allOfProps []*object
	for _, a := range s.list("allOf") {
		ao, name := r.ref(a)
		if name == "" && ao.obj("properties") != nil {
			allOfProps = append(allOfProps, ao)
		}
	}
	if props == nil && len(allOfProps) == 0 {
		if items := s.obj("items"); items != nil && refName(items.str("$ref")) == "" {
			return r.fields(items, depth)
		}
		return ""
	}
	required := map[string]bool{}
	for _, q := range s.list("required") {
		if qs, ok := q.(string); ok {
			required[qs] = true
		}
	}
	var b strings.Builder
	if depth == 0 {
		b.WriteString("<div class=\"scroll\">")
	}
	b.WriteString("<table class=\"fields\">\n<thead><tr><th scope=\"col\">Field</th><th scope=\"col\">Type</th><th scope=\"col\">Description</th></tr></thead>\n<tbody>\n")
	row := func(name string, p *object, req bool) {
		mark := ""
		if req {
			mark = " <span class=\"req\">required</span>"
		}
		fmt.Fprintf(&b, "<tr><td><code>%s</code>%s</td><td>%s</td><td>%s%s</td></tr>\n", esc(name), mark, r.summary(p), markdown(p.str("description")), r.fields(p, depth+1))
	}
	for _, name := range keysOf(props) {
		row(name, props.obj(name), required[name])
	}
	for _, ao := range allOfProps {
		aoProps := ao.obj("properties")
		for _, name := range aoProps.keys {
			row(name, aoProps.obj(name), required[name])
		}
	}
	b.WriteString("</tbody>\n</table>\n")
	if depth == 0 {
		b.WriteString("</div>\n")
	}
	if s.get("additionalProperties") == false {
		b.WriteString("<p class=\"meta\">No other fields: an unknown one is refused.</p>\n")
	}
	return b.String()
}

// sample makes an example value of schema s: its examples, const,
// default or first enum value, else one of its type, objects with every
// property. A schema that holds itself is not followed into itself.
func (r *renderer) sample(s *object, depth int) any {
	return r.sampleIn(s, depth, map[string]bool{})
}

func (r *renderer) sampleIn(s *object, depth int, inside map[string]bool) any {
	if s == nil || depth > 24 {
		return nil
	}
	if ref := s.str("$ref"); ref != "" {
		if inside[ref] {
			return nil
		}
		inside[ref] = true
		defer delete(inside, ref)
		t, _ := r.ref(s)
		return r.sampleIn(t, depth+1, inside)
	}
	if ex := s.list("examples"); len(ex) > 0 {
		return ex[0]
	}
	for _, k := range []string{"example", "const", "default"} {
		if v, ok := s.vals[k]; ok {
			return v
		}
	}
	if enum := s.list("enum"); len(enum) > 0 {
		return enum[0]
	}
	if all := s.list("allOf"); len(all) > 0 {
		merged := &object{vals: map[string]any{}}
		for _, a := range all {
			ao, _ := a.(*object)
			if so, ok := r.sampleIn(ao, depth+1, inside).(*object); ok {
				for _, k := range so.keys {
					if _, had := merged.vals[k]; !had {
						merged.keys = append(merged.keys, k)
					}
					merged.vals[k] = so.vals[k]
				}
			}
		}
		if len(merged.keys) > 0 {
			return merged
		}
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts := s.list(k); len(alts) > 0 {
			ao, _ := alts[0].(*object)
			return r.sampleIn(ao, depth+1, inside)
		}
	}
	t := typeName(s)
	if i := strings.Index(t, " or "); i >= 0 {
		t = t[:i]
	}
	switch t {
	case "object":
		o := &object{vals: map[string]any{}}
		props := s.obj("properties")
		required := map[string]bool{}
		for _, q := range s.list("required") {
			if qs, ok := q.(string); ok {
				required[qs] = true
			}
		}
		for _, k := range keysOf(props) {
			if r.minimal && !required[k] && !r.exemplified(props.obj(k)) {
				continue
			}
			if v := r.sampleIn(props.obj(k), depth+1, inside); v != nil {
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
		}
		return o
	case "array":
		if v := r.sampleIn(s.obj("items"), depth+1, inside); v != nil {
			return []any{v}
		}
		return []any{}
	case "string":
		switch s.str("format") {
		case "date-time":
			return "2026-11-22T10:15:00.000Z"
		case "date":
			return "2026-11-22"
		case "uuid":
			return "01a2139b-46b7-72cb-bd43-7aba811f6931"
		case "email":
			return "ann@example.com"
		case "uri":
			return "https://gateway.example.com/"
		case "binary":
			return nil
		}
		if n, ok := s.vals["minLength"]; ok {
			if c, err := strconv.Atoi(fmt.Sprint(n)); err == nil && c > 6 {
				return strings.Repeat("x", c)
			}
		}
		return "string"
	case "integer":
		return minOr(s, 1)
	case "number":
		return minOr(s, 1.5)
	case "boolean":
		return true
	case "null":
		return nil
	}
	return nil
}

// exemplified reports whether the document gives s (or the schema it
// names) an example of its own.
func (r *renderer) exemplified(s *object) bool {
	t, _ := r.ref(s)
	for _, o := range []*object{s, t} {
		for _, k := range []string{"examples", "example", "const", "default"} {
			if o.get(k) != nil {
				return true
			}
		}
	}
	return false
}

func minOr(s *object, fallback any) any {
	if v, ok := s.vals["minimum"]; ok {
		return v
	}
	return fallback
}

// collectCodes records the problem codes a response names (the code's
// const or enum, beside a status const), for the error code table.
func (r *renderer) collectCodes(status string, resp *object) {
	for _, mt := range keysOf(resp.obj("content")) {
		schema := resp.obj("content").obj(mt).obj("schema")
		var codes []string
		var walk func(s *object, depth int)
		walk = func(s *object, depth int) {
			if s == nil || depth > 3 {
				return
			}
			code := s.obj("properties").obj("code")
			if c, ok := code.get("const").(string); ok {
				codes = append(codes, c)
			}
			for _, e := range code.list("enum") {
				if es, ok := e.(string); ok {
					codes = append(codes, es)
				}
			}
			for _, a := range s.list("allOf") {
				ao, name := r.ref(a)
				if name == "" {
					walk(ao, depth+1)
				}
			}
		}
		walk(schema, 0)
		for _, c := range codes {
			ec := r.codes[c]
			if ec == nil {
				ec = &errorCode{code: c, statuses: map[string]bool{}}
				r.codes[c] = ec
			}
			ec.statuses[status] = true
			if d := strings.TrimSpace(resp.str("description")); d != "" && !contains(ec.meanings, d) {
				ec.meanings = append(ec.meanings, d)
			}
		}
	}
}

// errors lists every problem code: those the responses name, with their
// statuses and meanings, and the rest of the Problem schema's enum.
func (r *renderer) errors() {
	if p := r.doc.obj("components").obj("schemas").obj("Problem"); p != nil {
		code := p.obj("properties").obj("code")
		for _, e := range code.list("enum") {
			if c, ok := e.(string); ok && r.codes[c] == nil {
				r.codes[c] = &errorCode{code: c, statuses: map[string]bool{}}
			}
		}
		// x-statuses gives the statuses of codes that no response of the
		// document names (a 405 from any path, say).
		xs := code.obj("x-statuses")
		for _, c := range keysOf(xs) {
			ec := r.codes[c]
			if ec == nil {
				ec = &errorCode{code: c, statuses: map[string]bool{}}
				r.codes[c] = ec
			}
			for _, st := range xs.list(c) {
				ec.statuses[fmt.Sprint(st)] = true
			}
		}
		for _, c := range keysOf(code.obj("x-meanings")) {
			if ec := r.codes[c]; ec != nil && len(ec.meanings) == 0 {
				ec.meanings = append(ec.meanings, code.obj("x-meanings").str(c))
			}
		}
	}
	codes := make([]string, 0, len(r.codes))
	for c := range r.codes {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	r.w("<section id=\"errors\" aria-labelledby=\"errors-h\">\n<h2 id=\"errors-h\">Error codes</h2>\n")
	r.w("<p>Every error is an RFC 9457 problem body (<a href=\"#schema-Problem\">Problem</a>) whose <code>code</code> is stable: clients switch on it, not on the text.</p>\n")
	r.w("<div class=\"scroll\"><table>\n<thead><tr><th scope=\"col\">Code</th><th scope=\"col\">Status</th><th scope=\"col\">Meaning</th></tr></thead>\n<tbody>\n")
	for _, c := range codes {
		ec := r.codes[c]
		var statuses []string
		for s := range ec.statuses {
			statuses = append(statuses, s)
		}
		sort.Strings(statuses)
		meaning := "—"
		if len(ec.meanings) > 0 {
			meaning = markdown(strings.Join(ec.meanings, "\n\n"))
		}
		r.w("<tr id=\"error-%s\"><td><code>%s</code></td><td>%s</td><td>%s</td></tr>\n", anchor(c), esc(c), esc(strings.Join(statuses, ", ")), meaning)
	}
	r.w("</tbody>\n</table></div>\n</section>\n")
}
