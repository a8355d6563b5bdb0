package problem

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxJSONDepth bounds how deeply a request body may nest objects and
// arrays. No API input goes beyond four levels; the bound keeps a hostile
// body from costing deep recursion in the decoder.
const MaxJSONDepth = 32

// DecodeJSON reads a JSON request body of at most 1 MiB into v, refusing
// other media types (415), bigger bodies (413), unknown fields, trailing
// data and malformed JSON (400). It returns nil or a *Details.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if !IsJSON(r.Header.Get("Content-Type")) {
		return New(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "the request body must be application/json")
	}
	return DecodeJSONBody(w, r, v, maxBodyBytes)
}

// DecodeJSONBody is DecodeJSON for a caller that has checked the media type
// itself, with its own size limit. Besides what encoding/json refuses, it
// refuses invalid UTF-8 (which encoding/json would silently turn into
// U+FFFD), nesting deeper than MaxJSONDepth, and a key repeated in one
// object (for a struct, compared case-insensitively, as encoding/json
// matches fields): otherwise the last copy would silently win, and a proxy
// or validator in front that keeps the first would see a different request.
func DecodeJSONBody(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return New(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is larger than "+sizeText(limit))
		}
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body could not be read")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body is empty")
	}
	if !utf8.Valid(data) {
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body is not valid UTF-8")
	}
	if err := checkStructure(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		// encoding/json leaves v as it was for null: the request would be
		// taken as one that says nothing, where [] or 1 are refused.
		return Invalid([]FieldError{{Field: "(body)", Code: "invalid_type", Message: "(body) must be a JSON " + jsonKind(reflect.TypeOf(v).Elem().Kind().String())}})
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body holds more than one JSON value")
	}
	return nil
}

// CheckStructure refuses what DecodeJSON refuses of data beyond what
// encoding/json does, for JSON read from elsewhere than a request body
// (a line of an import): a key repeated in an object (duplicate_key,
// naming its path) or a nesting deeper than MaxJSONDepth. v is what data
// is decoded into.
func CheckStructure(data []byte, v any) error {
	if d := checkStructure(data, reflect.TypeOf(v)); d != nil {
		return d
	}
	return nil
}

func sizeText(limit int64) string {
	if limit%(1<<20) == 0 {
		return strconv.FormatInt(limit>>20, 10) + " MiB"
	}
	return strconv.FormatInt(limit, 10) + " bytes"
}

// checkStructure walks the first JSON value of data for what encoding/json
// lets through: too deep a nesting and repeated keys. Syntax errors are
// left to the decoder, which reports them. target is the type decoded
// into: keys of an object that fills a struct are compared
// case-insensitively, as encoding/json matches fields; keys of a map, or of
// what is opaque to the walk, exactly.
func checkStructure(data []byte, target reflect.Type) *Details {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		typ   reflect.Type    // of this object or array; nil when opaque
		keys  map[string]bool // keys seen, folded for structs; nil for arrays
		path  string
		index int    // next element, for arrays
		key   string // the key whose value comes next, for objects
		atKey bool   // an object expects a key next
	}
	var stack []*frame
	next := target           // the type of the value about to be read
	child := func() string { // the path of the value about to be read
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.keys != nil {
			if f.path == "" {
				return f.key
			}
			return f.path + "." + f.key
		}
		return f.path + "[" + strconv.Itoa(f.index) + "]"
	}
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		if f.keys != nil {
			f.atKey = true
		} else {
			f.index++
			next = elemType(f.typ)
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF, or a syntax error the decoder reports
		}
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.keys != nil && f.atKey {
				if key, ok := tok.(string); ok {
					seen := key
					if f.typ != nil && f.typ.Kind() == reflect.Struct {
						seen = strings.ToLower(key)
					}
					if f.keys[seen] {
						field := key
						if f.path != "" {
							field = f.path + "." + key
						}
						return Invalid([]FieldError{{Field: field, Code: "duplicate_key", Message: field + " appears more than once"}})
					}
					f.keys[seen] = true
					f.key, f.atKey = key, false
					next = memberType(f.typ, key)
					continue
				}
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= MaxJSONDepth {
				return New(http.StatusBadRequest, CodeInvalidRequest, "the request body nests deeper than "+strconv.Itoa(MaxJSONDepth)+" levels")
			}
			f := &frame{typ: walkable(next), path: child(), atKey: true}
			if tok == json.Delim('{') {
				f.keys = map[string]bool{}
			} else {
				next = elemType(f.typ)
			}
			stack = append(stack, f)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
			valueDone()
		default:
			if len(stack) == 0 {
				return nil
			}
			valueDone()
		}
	}
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// walkable is t without pointers, or nil when the walk cannot follow it:
// no type, or one that decodes itself.
func walkable(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
	return nil
}

// elemType is the type of an element of the array or map t.
func elemType(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return t.Elem()
	}
	return nil
}

// memberType is the type that key of an object of type t decodes into:
// the struct field it names (matched as encoding/json does, ignoring
// case), or the map's element type.
func memberType(t reflect.Type, key string) reflect.Type {
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Elem()
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" || !sf.IsExported() && !sf.Anonymous {
				continue
			}
			if sf.Anonymous && name == "" {
				if ft := walkable(sf.Type); ft != nil && ft.Kind() == reflect.Struct {
					if mt := memberType(ft, key); mt != nil {
						return mt
					}
				}
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if strings.EqualFold(name, key) {
				return sf.Type
			}
		}
	}
	return nil
}

// IsJSON reports whether a Content-Type names JSON (application/json or a
// +json suffix type), whatever its parameters.
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func decodeProblem(err error) *Details {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body is empty")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body is not valid JSON")
	case errors.As(err, &typ):
		return Invalid([]FieldError{TypeError(typ)})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return Invalid([]FieldError{{Field: name, Code: "unknown_field", Message: name + " is not a known field"}})
	default:
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body could not be read")
	}
}

// TypeError is the field error of a JSON value of the wrong type: the
// field (its dotted path; "(body)" for the whole body), invalid_type, and
// the JSON type it must be. The field is one the decoder knows, so never
// a value of the client's.
func TypeError(typ *json.UnmarshalTypeError) FieldError {
	field := typ.Field
	if field == "" {
		field = "(body)"
	}
	return FieldError{Field: field, Code: "invalid_type", Message: field + " must be a JSON " + jsonKind(typ.Type.Kind().String())}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	default:
		return "number"
	}
}

// DecodeQuery decodes a request's query string. One that does not decode
// (a bad %-escape, a ';' separator) is a 400 problem: url.Values, as
// r.URL.Query gives them, would drop the broken pair and go on without it.
func DecodeQuery(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, New(http.StatusBadRequest, CodeInvalidRequest, "the query string does not decode: "+err.Error())
	}
	return q, nil
}
