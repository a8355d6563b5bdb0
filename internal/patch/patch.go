// Package patch holds the one type a PATCH body needs beyond encoding/json:
// a field that tells absent from null. The key store and the webhook
// store both take it, so it lives below them.
package patch

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// Field tells a JSON field that was absent from one sent as null, which
// PATCH needs: absent keeps a value, null clears it.
type Field[T any] struct {
	Set   bool // the field was in the body
	Null  bool // it was null
	Value T
}

// UnmarshalJSON records presence and nullness.
func (o *Field[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if bytes.Equal(b, []byte("null")) {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.Value)
}

// Some returns a set, non-null Field holding v.
func Some[T any](v T) Field[T] { return Field[T]{Set: true, Value: v} }

// setter is what every Field is, whatever its T.
type setter interface{ isSet() bool }

func (o *Field[T]) isSet() bool { return o.Set }

// Empty reports whether in, a pointer to a PATCH body's struct, sets
// nothing: no Field was in the body and every other exported field is
// zero. Such a PATCH ({}) changes nothing, and is answered as a read:
// writing it would only move the record's modification time.
func Empty(in any) bool {
	v := reflect.ValueOf(in).Elem()
	for i := range v.NumField() {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		f := v.Field(i)
		if s, ok := f.Addr().Interface().(setter); ok {
			if s.isSet() {
				return false
			}
		} else if !f.IsZero() {
			return false
		}
	}
	return true
}
