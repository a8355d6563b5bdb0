package docseal

import "github.com/keygate/keygate/internal/storage"

// Backend keeps the self-made seal certificate, sealed under the master
// key by the caller, so that every instance of one database seals with
// the same one and a restart keeps it.
type Backend interface {
	// SelfMade returns the stored certificate, storing make's first when
	// there is none. Of instances racing, one value is stored and every
	// one gets it.
	SelfMade(make func() ([]byte, error)) ([]byte, error)
}

// selfMadeName names the value in bbolt's bucket and PostgreSQL's meta
// table.
const selfMadeName = "document_seal_self_made"

// Index finds the contract of a sealed document by the SHA-256 of the
// file, as sealed: what /verify answers from.
type Index interface {
	// Record notes, in tx (the completion's), that the document whose
	// SHA-256 is sum belongs to contract id.
	Record(tx storage.Tx, sum [32]byte, contractID string) error
	// Lookup returns the contract of sum; ok is false for an unknown one.
	Lookup(sum [32]byte) (contractID string, ok bool, err error)
}

// Interface guards
var (
	_ Backend = (*BoltBackend)(nil)
	_ Backend = (*PostgresBackend)(nil)
	_ Index   = (*BoltIndex)(nil)
	_ Index   = (*PostgresIndex)(nil)
)
