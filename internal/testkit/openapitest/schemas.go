package openapitest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaCache compiles the schemas of one OpenAPI document with a JSON
// Schema 2020-12 validator (OpenAPI 3.1's dialect), each once, by its
// JSON pointer in the document; references between them resolve in the
// document itself.
type schemaCache struct {
	url string

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

func newSchemaCache(name string, data []byte) (*schemaCache, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("openapitest: the %s document is not JSON: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	for fname, f := range formats {
		c.RegisterFormat(&jsonschema.Format{Name: fname, Validate: func(v any) error {
			s, ok := v.(string)
			if !ok {
				return nil
			}
			return f.Validate(s)
		}})
	}
	url := "urn:keygate:openapi:" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return &schemaCache{url: url, compiler: c, compiled: map[string]*jsonschema.Schema{}}, nil
}

var printer = message.NewPrinter(language.English)

// get compiles the schema at pointer, once.
func (c *schemaCache) get(pointer string) (*jsonschema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.compiled[pointer]; ok {
		return s, nil
	}
	s, err := c.compiler.Compile(c.url + "#" + pointer)
	if err != nil {
		return nil, err
	}
	c.compiled[pointer] = s
	return s, nil
}

// validate checks v against the schema at pointer; the error lists each
// failing place of v on one line.
func (c *schemaCache) validate(pointer string, v any) error {
	s, err := c.get(pointer)
	if err != nil {
		return fmt.Errorf("compiling %s: %w", pointer, err)
	}
	err = s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	var parts []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			parts = append(parts, fmt.Sprintf("at '/%s': %s", strings.Join(e.InstanceLocation, "/"), e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return errors.New(strings.Join(parts, "; "))
}
