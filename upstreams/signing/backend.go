package signing

import (
	"time"

	"github.com/keygate/keygate/internal/storage"
)

// Backend keeps what the signing lifecycle stores beside a contract, keyed
// by signer id (unique across contracts): each signer's current one-time
// password, hashed, and their signature from their decision until the
// contract is final and its PDFs hold it; and, keyed by contract, the
// trail of events that the certificate of completion lists. Every method runs in the
// transaction of the change it belongs to, so a password and the mail
// that carries it, or a decision and its signature, commit together.
type Backend interface {
	// OTP returns signer's current password record, nil when none, and
	// holds signer's password (present or not) against every other OTP
	// call for signer until tx ends, so that a read and the write it
	// decides are one step. Call it in a write transaction (Update).
	OTP(tx storage.Tx, signerID string) (*OTPRecord, error)
	// PutOTP stores signer's password record, replacing any.
	PutOTP(tx storage.Tx, signerID string, rec *OTPRecord) error
	// DeleteOTP deletes signer's password record: it was used.
	DeleteOTP(tx storage.Tx, signerID string) error
	// Signature returns the method and signature of signer's decision;
	// ok is false when none is stored.
	Signature(tx storage.Tx, signerID string) (method string, data []byte, ok bool, err error)
	// PutSignature stores signer's signature: the image bytes, or the
	// typed name for MethodRender.
	PutSignature(tx storage.Tx, signerID, method string, data []byte) error
	// Forget deletes the password and signature of each signer.
	Forget(tx storage.Tx, signerIDs []string) error

	// AppendTrail adds e after the events of contract's trail, in the
	// transaction of the change it records.
	AppendTrail(tx storage.Tx, contractID string, e *TrailEvent) error
	// Trail returns contract's events in the order they were appended
	// (none for a contract created before trails were kept).
	Trail(tx storage.Tx, contractID string) ([]TrailEvent, error)
	// DeleteTrail deletes contract's trail: the contract is gone.
	DeleteTrail(tx storage.Tx, contractID string) error

	// QueueSeal records, in the transaction of a completion, that the
	// contract's documents wait to be made and sealed, since queued.
	QueueSeal(tx storage.Tx, contractID string, queued time.Time) error
	// SealQueue returns at most n of the waiting completions queued
	// before before, oldest first.
	SealQueue(tx storage.Tx, before time.Time, n int) ([]QueuedSeal, error)
	// Sealing reports whether contract's documents still wait, and holds
	// the entry against every other Sealing call for it until tx ends,
	// so that of two instances that sealed the same completion one
	// stores its documents. Call it in a write transaction (Update).
	Sealing(tx storage.Tx, contractID string) (bool, error)
	// Sealed removes contract from the queue: its documents are stored,
	// or it is gone.
	Sealed(tx storage.Tx, contractID string) error
}

// QueuedSeal is a completion whose documents wait to be sealed.
type QueuedSeal struct {
	ContractID string
	Queued     time.Time
}

// OTPRecord is a signer's current one-time password. The code itself is
// never stored: Hash is HMAC-SHA256 under the OTP key of the signer id, a
// random salt and the code.
type OTPRecord struct {
	Hash     []byte    `json:"hash"`
	Salt     []byte    `json:"salt"`
	Sent     time.Time `json:"sent"`
	Expires  time.Time `json:"expires"`
	Failures int       `json:"failures"`
}
