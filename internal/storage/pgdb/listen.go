package pgdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Channel is the LISTEN/NOTIFY channel of one kind of change (topic) in
// this database's schema.
func (d *DB) Channel(topic string) string { return Channel(d.schema, topic) }

// Channel is the LISTEN/NOTIFY channel of one kind of change (topic) in
// schema, so that deployments sharing a database hear only their own. A
// channel is an identifier of at most 63 bytes (pg_notify refuses a
// longer one): a long schema name is replaced by its hash.
func Channel(schema, topic string) string {
	name := "keygate_" + topic + "." + schema
	if len(name) > 63 {
		sum := sha256.Sum256([]byte(schema))
		name = "keygate_" + topic + "." + hex.EncodeToString(sum[:8])
	}
	return name
}

// Listen calls changed with the payload of every notification on channel,
// from any instance, on a connection of its own, until ctx ends. It calls
// resync once LISTEN has taken effect (what changed before is not
// notified) and again after a lost connection, when it listens again a
// second later: a notification may have been missed.
func (d *DB) Listen(ctx context.Context, channel string, changed func(payload string), resync func()) {
	for ctx.Err() == nil {
		d.listen(ctx, channel, changed, resync)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (d *DB) listen(ctx context.Context, channel string, changed func(string), resync func()) {
	pc, err := d.Pool.Acquire(ctx)
	if err != nil {
		return
	}
	// A listening connection never goes back to the pool.
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return
	}
	resync()
	for {
		// A connection that died without a word (a lost network, a
		// failover) would wait forever: between notifications it is
		// pinged, and a silent one is given up and listened on anew.
		wait, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wait)
		cancel()
		if err == nil {
			changed(n.Payload)
			continue
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return
		}
		ping, cancel := context.WithTimeout(ctx, listenPing)
		err = conn.Ping(ping)
		cancel()
		if err != nil {
			return
		}
	}
}

// listenPing is how long a listening connection may be silent before it
// is pinged, and how long the ping may take.
var listenPing = 5 * time.Second
