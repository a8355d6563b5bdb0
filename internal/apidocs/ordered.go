package apidocs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// object is a JSON object with its keys in document order: a reference
// lists properties, parameters and responses in the order the document's
// authors chose, which a Go map would lose.
type object struct {
	keys []string
	vals map[string]any
}

// get returns the value of k, nil when absent.
func (o *object) get(k string) any {
	if o == nil {
		return nil
	}
	return o.vals[k]
}

// obj returns the value of k as an object, nil when it is not one.
func (o *object) obj(k string) *object {
	v, _ := o.get(k).(*object)
	return v
}

// str returns the value of k as a string, "" when it is not one.
func (o *object) str(k string) string {
	v, _ := o.get(k).(string)
	return v
}

// list returns the value of k as an array, nil when it is not one.
func (o *object) list(k string) []any {
	v, _ := o.get(k).([]any)
	return v
}

// decode reads a JSON document into objects, arrays, strings, float64s
// (json.Number kept as text for exact integers), bools and nils.
func decode(doc []byte) (*object, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*object)
	if !ok {
		return nil, fmt.Errorf("apidocs: the document is not a JSON object")
	}
	return o, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := d.Token() // }
			return o, err
		case '[':
			var a []any
			for d.More() {
				v, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token() // ]
			return a, err
		}
		return nil, fmt.Errorf("apidocs: unexpected %v", t)
	default:
		return t, nil
	}
}

// encode writes v as indented JSON, objects in their key order.
func encode(w io.Writer, v any, indent string) {
	switch t := v.(type) {
	case *object:
		if len(t.keys) == 0 {
			io.WriteString(w, "{}")
			return
		}
		io.WriteString(w, "{\n")
		for i, k := range t.keys {
			kb, _ := json.Marshal(k)
			io.WriteString(w, indent+"  ")
			w.Write(kb)
			io.WriteString(w, ": ")
			encode(w, t.vals[k], indent+"  ")
			if i < len(t.keys)-1 {
				io.WriteString(w, ",")
			}
			io.WriteString(w, "\n")
		}
		io.WriteString(w, indent+"}")
	case []any:
		if len(t) == 0 {
			io.WriteString(w, "[]")
			return
		}
		io.WriteString(w, "[\n")
		for i, e := range t {
			io.WriteString(w, indent+"  ")
			encode(w, e, indent+"  ")
			if i < len(t)-1 {
				io.WriteString(w, ",")
			}
			io.WriteString(w, "\n")
		}
		io.WriteString(w, indent+"]")
	default:
		b, err := json.Marshal(t)
		if err != nil {
			b = []byte("null")
		}
		w.Write(b)
	}
}
