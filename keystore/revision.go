package keystore

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// A write of a key, consumer or plan replaces the version it was made
// from, named by that version's lastModificationTime (its base): where
// instances share a database, another may have written the record since
// this one read it, and storing over that would undo its change (a key
// disabled or deleted there, enabled or back here). The backend refuses
// such a write as stale, and the store reads the record back and makes
// the change again on what is stored.

var (
	// errStale is a backend's refusal of a write whose base is not the
	// stored version.
	errStale = errors.New("keystore: the record changed since it was read")
	// errGone is a backend's refusal of a write whose record was deleted
	// since it was read.
	errGone = errors.New("keystore: the record was deleted since it was read")
	// ErrChangedMeanwhile answers a change that stayed stale however
	// often it was made again: others change the record as fast.
	ErrChangedMeanwhile = problem.New(http.StatusConflict, problem.CodeConflict,
		"the record was changed by another instance meanwhile: try again")
)

// staleTries bounds how often a change is made again on a record read
// back.
const staleTries = 5

// rewrite runs write until the backend takes it: after a stale refusal it
// reads the record back (refresh) and writes again; a record deleted
// meanwhile is gone here too and answers notFound.
func rewrite[T any](refresh func() error, notFound error, write func() (T, error)) (T, error) {
	var zero T
	for try := 1; ; try++ {
		v, err := write()
		switch {
		case errors.Is(err, errStale) && try < staleTries:
		case errors.Is(err, errStale):
			return zero, ErrChangedMeanwhile
		case errors.Is(err, errGone):
			if err := refresh(); err != nil {
				return zero, err
			}
			return zero, notFound
		default:
			return v, err
		}
		// A pause of a few random milliseconds, longer with each try:
		// writers that met on one record then write one after the other
		// instead of meeting again.
		time.Sleep(rand.N(time.Duration(try) * 2 * time.Millisecond))
		if err := refresh(); err != nil {
			return zero, err
		}
	}
}

// nextModification is a change's lastModificationTime: now, and always
// later than base, the version it replaces, so that each version of a
// record has a time of its own (two changes within a millisecond, or an
// instance whose clock lags).
func nextModification(now, base time.Time) time.Time {
	now = now.UTC().Truncate(time.Millisecond)
	if !now.After(base) {
		return base.Add(time.Millisecond)
	}
	return now
}

// baseText is base as a stored record spells its lastModificationTime
// (encoding/json's form of a time), for PostgreSQL to compare with the
// stored one (putVersion).
func baseText(base time.Time) string { return base.UTC().Format(time.RFC3339Nano) }

// checkBase refuses to replace stored, a record's stored JSON (nil: none),
// unless its lastModificationTime is base; a zero base is a new record.
func checkBase(stored []byte, base time.Time) error {
	if base.IsZero() {
		return nil
	}
	if stored == nil {
		return errGone
	}
	var v struct {
		LastModificationTime time.Time `json:"lastModificationTime"`
	}
	if err := json.Unmarshal(stored, &v); err != nil {
		return err
	}
	if !v.LastModificationTime.Equal(base) {
		return errStale
	}
	return nil
}

// Revision tells one stored version of a key's record from another
// without decoding the record: its lastModificationTime and its
// key.expiring mark, spelled as the stored JSON spells them. Every change
// of a key moves the first; MarkExpiryWarned sets the second alone.
type Revision struct{ Modified, Warned string }

// revisionOf is the Revision of a record with these two fields, as
// encoding/json writes them.
func revisionOf(modified time.Time, warned *time.Time) Revision {
	r := Revision{Modified: modified.Format(time.RFC3339Nano)}
	if warned != nil {
		r.Warned = warned.Format(time.RFC3339Nano)
	}
	return r
}

// KeyRow is a stored key as Backend.Load reads it. PostgreSQL reads the
// revision in the query and decodes the record only when Record is
// called (within Load's fn), so that a resync decodes only the records
// that changed since it last read them. bbolt, whose one process reads
// every key at its start only, hands them decoded (rowOf).
type KeyRow struct {
	ID       string
	Revision Revision
	Usage    Usage
	raw      []byte  // the stored record, valid within Load's fn
	rec      *Record // or the record, decoded already
}

// Record returns the row's record, decoding it if it is not yet.
func (r *KeyRow) Record() (*Record, error) {
	if r.rec != nil {
		return r.rec, nil
	}
	rec, err := decodeRecord(r.raw)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", r.ID, err)
	}
	return rec, nil
}

// rowOf is the row of raw, a stored record, decoded.
func rowOf(raw []byte, u Usage) (*KeyRow, error) {
	rec, err := decodeRecord(raw)
	if err != nil {
		return nil, err
	}
	u.KeyID = rec.ID
	return &KeyRow{ID: rec.ID, Revision: revisionOf(rec.LastModificationTime, rec.ExpiryWarnedFor), Usage: u, rec: rec}, nil
}
