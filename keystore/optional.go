package keystore

import (
	"bytes"
	"encoding/json"
)

// Optional tells a JSON field that was absent from one sent as null, which
// PATCH needs: absent keeps a value, null clears it.
type Optional[T any] struct {
	Set   bool // the field was in the body
	Null  bool // it was null
	Value T
}

// UnmarshalJSON records presence and nullness.
func (o *Optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if bytes.Equal(b, []byte("null")) {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.Value)
}

// Some returns a set, non-null Optional holding v.
func Some[T any](v T) Optional[T] { return Optional[T]{Set: true, Value: v} }
