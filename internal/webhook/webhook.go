// Package webhook delivers keygate's events to API clients' endpoints as
// Standard Webhooks (standardwebhooks.com; docs/clients.md, Webhooks).
//
// It keeps, on either storage backend (bolt.go, postgres.go), the
// subscriptions (their secrets sealed under the master key), an outbox of
// events that the stores write through the events.Sink in the transaction
// of the change itself, the deliveries pending (one per event and
// subscription, with its message id), and a bounded log of every delivery
// attempt. A Worker fans events out to the subscriptions that want them
// and delivers them, with retries, on its own goroutines, so that a slow
// or dead endpoint never holds up an API request or the e-mail worker.
package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
)

// Subscription is an endpoint subscribed to events, as the admin API
// shows it.
type Subscription struct {
	ID string `json:"id"`
	// URL receives the deliveries: https, or http to a loopback host.
	URL string `json:"url"`
	// Events are the event types delivered (events.Types).
	Events []string `json:"events"`
	// Owners limits the events to contracts and shares created by these
	// key owners; empty: every owner.
	Owners      []string `json:"owners"`
	Description string   `json:"description"`
	// Enabled: a disabled subscription is delivered nothing, and its
	// pending deliveries are dropped when it is disabled.
	Enabled              bool      `json:"enabled"`
	CreationTime         time.Time `json:"creationTime"`
	LastModificationTime time.Time `json:"lastModificationTime"`
	// PreviousSecretExpiry is when the secret replaced by the last
	// rotation stops signing; until then deliveries carry both
	// signatures. Null when no previous secret signs.
	PreviousSecretExpiry *time.Time `json:"previousSecretExpiry"`
	// Secret is set only in the replies to a create and a rotation.
	Secret string `json:"secret,omitempty"`
}

// Record is a subscription as a Backend stores it: the secrets sealed
// under the master key, bound to the subscription's id.
type Record struct {
	Subscription
	SealedSecret []byte
	// SealedPrevious is the secret before the last rotation, signing
	// until PreviousExpiry; nil when there is none.
	SealedPrevious []byte
	PreviousExpiry time.Time
}

// EventRecord is an event in the outbox, not yet fanned out to the
// subscriptions.
type EventRecord struct {
	// Seq orders the outbox (the backend's id).
	Seq   uint64
	Type  string
	Owner string
	At    time.Time
	Data  json.RawMessage
}

// Delivery is one event on its way to one subscription.
type Delivery struct {
	// ID is the backend's id of the delivery.
	ID             uint64
	SubscriptionID string
	// MessageID is the Standard Webhooks message id (webhook-id), the
	// same on every attempt.
	MessageID string
	Event     string
	// Body is the exact body POSTed on every attempt.
	Body []byte
	// EventAt is when the event happened; delivery is given up 24 h
	// later.
	EventAt time.Time
	// Attempts counts the failed attempts so far.
	Attempts int
}

// Attempt is one entry of a subscription's delivery log.
type Attempt struct {
	MessageID string `json:"messageId"`
	Event     string `json:"event"`
	// Attempt numbers the attempts of one message from 1.
	Attempt int `json:"attempt"`
	// Status is the endpoint's HTTP status, 0 when there was none (no
	// connection, a timeout, a refused URL).
	Status     int       `json:"status"`
	DurationMs int64     `json:"durationMs"`
	Error      string    `json:"error"`
	Timestamp  time.Time `json:"timestamp"`
}

// body is a delivery's JSON body (Standard Webhooks' payload structure).
type body struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// newBody builds the body of an event's deliveries.
func newBody(typ string, at time.Time, data json.RawMessage) ([]byte, error) {
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	return json.Marshal(body{Type: typ, Timestamp: at.UTC(), Data: data})
}

const (
	// secretPrefix starts every secret, as Standard Webhooks' libraries
	// expect it.
	secretPrefix = "whsec_"
	// secretBytes is the length of a secret before base64.
	secretBytes = 32
	// msgPrefix starts every message id.
	msgPrefix = "msg_"
	// LogSize is how many attempts a subscription's delivery log keeps:
	// the newest; older ones are dropped as new ones come.
	LogSize = 1000
	// MaxAge is how long after its event a delivery is retried before it
	// is given up.
	MaxAge = 24 * time.Hour
	// RotationOverlap is how long the secret replaced by a rotation
	// still signs.
	RotationOverlap = 24 * time.Hour
	// maxSubscriptions bounds the subscriptions, and so what one event
	// fans out to.
	maxSubscriptions = 1000
)

// newSecret makes a Standard Webhooks secret: whsec_ and the base64 of 32
// random bytes.
func newSecret() string {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("webhook: crypto/rand failed: " + err.Error())
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// secretKey is the HMAC key of a secret: the bytes its base64 part
// decodes to.
func secretKey(secret string) ([]byte, error) {
	if len(secret) <= len(secretPrefix) || secret[:len(secretPrefix)] != secretPrefix {
		return nil, errors.New("not a whsec_ secret")
	}
	return base64.StdEncoding.DecodeString(secret[len(secretPrefix):])
}

// newMessageID makes a message id: msg_ and 26 random base32 characters
// (128 bits).
func newMessageID() string { return msgPrefix + rand.Text() }

// wanted reports whether subscription s is delivered event type typ of
// owner: enabled, asking for the type, and without an owners filter or
// with owner in it.
func (s *Subscription) wanted(typ, owner string) bool {
	if !s.Enabled || !contains(s.Events, typ) {
		return false
	}
	return len(s.Owners) == 0 || contains(s.Owners, owner)
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// knownType reports whether typ is an event a store may emit.
func knownType(typ string) bool { return contains(events.Types, typ) }

// ErrNotFound answers an unknown subscription id.
var ErrNotFound = problem.NotFound("no webhook subscription with this id")
