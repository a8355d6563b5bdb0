package storage

// Copied is one line of what a store's copy from one backend to another
// moved (caddy webapi migrate prints them): how many records of one kind,
// with a note that breaks the number down where an operator checks it
// (contracts by status, keys by service).
type Copied struct {
	Kind string
	N    int64
	Note string
}
