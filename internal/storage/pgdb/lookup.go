package pgdb

import (
	"context"
	"sync"
)

// Lookup reads one value by key for many callers at once, outside any
// transaction: a caller that comes while maxLookups reads are on their
// way waits for the next one, which reads the keys of every caller that
// waits in one statement. A read of a single row costs a round trip and
// a statement's work on the server, which on a small box shared with the
// database cost more than the rest of a GET request; shared by the GETs
// that come at once, they cost little. Every caller's read still starts
// after the caller asked, so it sees every commit made before.
type Lookup[K comparable] struct {
	db *DB
	// sql reads the rows of keys $1 (an array): key, value.
	sql string
	// what names the value in errors.
	what string

	mu      sync.Mutex
	waiting []*lookupCall[K]
	reading int // reads on their way
}

// maxLookups bounds the reads of one Lookup on their way at once: one,
// so that the callers who come while it is on its way share the next
// (measured on the 2-core bench with PostgreSQL on the same machine, 32
// clients, 5 rounds, twice: contract GET 0.51 and 0.56 of bare respond
// with one, 0.43 and 0.44 with two; share GET 0.55 and 0.48 against 0.50
// and 0.45: fewer statements leave the cores to the requests; with 4 a
// bench lost a quarter of its GETs).
const maxLookups = 1

type lookupCall[K comparable] struct {
	key   K
	value []byte
	found bool
	err   error
	done  chan struct{}
}

// NewLookup makes a Lookup of sql, a SELECT of key and value for the keys
// in the array $1; what names the values in errors ("a contract").
func NewLookup[K comparable](db *DB, what, sql string) *Lookup[K] {
	return &Lookup[K]{db: db, sql: sql, what: "reading " + what}
}

// Get reads key's value; found is false if there is none. An error is the
// database's, wrapped as DB.Wrap wraps it, or ctx's.
func (l *Lookup[K]) Get(ctx context.Context, key K) (value []byte, found bool, err error) {
	c := &lookupCall[K]{key: key, done: make(chan struct{})}
	l.mu.Lock()
	l.waiting = append(l.waiting, c)
	lead := l.reading < maxLookups
	if lead {
		l.reading++
	}
	l.mu.Unlock()
	if lead {
		l.read() // its own call among them
	}
	select {
	case <-c.done:
		return c.value, c.found, c.err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// read reads the keys of every waiting caller, then hands on to a new
// goroutine if more came meanwhile, so that no caller's request waits
// for others' reads after its own.
func (l *Lookup[K]) read() {
	l.mu.Lock()
	calls := l.waiting
	l.waiting = nil
	l.mu.Unlock()

	keys := make([]K, 0, len(calls))
	index := make(map[K][]byte, len(calls))
	for _, c := range calls {
		if _, dup := index[c.key]; !dup {
			index[c.key] = nil
			keys = append(keys, c.key)
		}
	}
	err := l.fetch(keys, index)
	for _, c := range calls {
		c.err = err
		if err == nil {
			c.value = index[c.key]
			c.found = c.value != nil
		}
		close(c.done)
	}

	l.mu.Lock()
	if len(l.waiting) > 0 {
		l.mu.Unlock()
		go l.read()
		return
	}
	l.reading--
	l.mu.Unlock()
}

// fetch fills index with the value of each key found. Its context is its
// own: it serves many callers, and one that gives up must not fail the
// others.
func (l *Lookup[K]) fetch(keys []K, index map[K][]byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	rows, err := l.db.Pool.Query(ctx, l.sql, keys)
	if err != nil {
		return l.db.wrap(l.what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k K
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return l.db.wrap(l.what, err)
		}
		if v == nil {
			v = []byte{} // found, however short
		}
		index[k] = v
	}
	return l.db.wrap(l.what, rows.Err())
}
