// Package sealtest holds the sealer the store tests use for the master key.
package sealtest

import "github.com/keygate/keygate/internal/seal"

// Sealer stands for the master key: one for every database of a test
// run, so that a reopened database opens what it sealed before.
var Sealer = func() *seal.Sealer {
	s, err := seal.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		panic(err)
	}
	return s
}()
