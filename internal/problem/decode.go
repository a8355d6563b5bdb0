package problem

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
)

// DecodeJSON reads a JSON request body of at most 1 MiB into v, refusing
// other media types (415), bigger bodies (413), unknown fields, trailing
// data and malformed JSON (400). It returns nil or a *Details.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if !IsJSON(r.Header.Get("Content-Type")) {
		return New(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "the request body must be application/json")
	}
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return decodeProblem(err)
		}
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body holds more than one JSON value")
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
	var tooBig *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooBig):
		return New(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is larger than 1 MiB")
	case errors.Is(err, io.EOF):
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body is empty")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body is not valid JSON")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(body)"
		}
		return Invalid([]FieldError{{Field: field, Code: "invalid_type", Message: field + " must be a JSON " + jsonKind(typ.Type.Kind().String())}})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return Invalid([]FieldError{{Field: name, Code: "unknown_field", Message: name + " is not a known field"}})
	default:
		return New(http.StatusBadRequest, CodeInvalidRequest, "the request body could not be read")
	}
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
