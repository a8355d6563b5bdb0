// Package events is the seam between the APIs, where things happen, and
// the webhooks that tell API clients of them (clients.md, Webhooks). The
// contract, signing and share stores emit an Event into a Sink inside the
// transaction of the change itself, so that an event is delivered if and
// only if its change committed; what the Sink does with it (the webhook
// outbox) is none of theirs.
package events

import (
	"encoding/json"
	"time"

	"github.com/keygate/keygate/internal/storage"
)

// The event types of clients.md. Each is also a value of a subscription's
// `events`.
const (
	ContractCreated   = "contract.created"
	ContractOpened    = "contract.opened"
	ContractSigned    = "contract.signed" // one signer
	ContractRejected  = "contract.rejected"
	ContractCompleted = "contract.completed"
	ContractExpired   = "contract.expired"
	ContractArchived  = "contract.archived"
	ContractDeleted   = "contract.deleted"
	ShareCreated      = "share.created"
	ShareUpdated      = "share.updated"
	ShareDeleted      = "share.deleted"
	ShareViewed       = "share.viewed"
	// ShareCommented is a comment added from a share's page to the
	// shared issue on the tracker.
	ShareCommented = "share.commented"
	// ShareEdited is a field of the shared issue changed from a share's
	// page.
	ShareEdited = "share.edited"
	// KeyDisabled is an API key switched off by an administrator; its
	// Owner is the key's owner.
	KeyDisabled = "key.disabled"
	// KeyRolled is an API key given a new token.
	KeyRolled = "key.rolled"
	// KeyExpiring is an API key whose notValidAfter is near
	// (key_expiry_warning), once per key and end of validity.
	KeyExpiring = "key.expiring"
	// KeyQuotaExhausted is an API key whose quota for the current period
	// is spent, once per period.
	KeyQuotaExhausted = "key.quota_exhausted"
	// ConsumerQuotaExhausted is a consumer whose quota for the current
	// period is spent over all its keys, once per period.
	ConsumerQuotaExhausted = "consumer.quota_exhausted"
	// WebhookTest is queued by the admin API's test call for one
	// subscription; no store emits it.
	WebhookTest = "webhook.test"
)

// Types lists the events a subscription may ask for, in the order of docs/clients.md.
var Types = []string{
	ContractCreated, ContractOpened, ContractSigned, ContractRejected,
	ContractCompleted, ContractExpired, ContractArchived, ContractDeleted,
	ShareCreated, ShareUpdated, ShareDeleted, ShareViewed, ShareCommented, ShareEdited,
	KeyRolled, KeyDisabled, KeyExpiring, KeyQuotaExhausted,
	ConsumerQuotaExhausted,
}

// Event is one thing that happened, as a webhook delivers it.
type Event struct {
	// Type is one of Types.
	Type string
	// Owner is the key owner who created the contract or share, for a
	// subscription's `owners` filter.
	Owner string
	// At is when it happened; the delivery's `timestamp`.
	At time.Time
	// Data is the delivery's `data` object: the Contract Object as search
	// returns it (plus `signerId` for signer events), the share record, or
	// for key events the key's id, name, owner and service and the time
	// (never a token).
	Data json.RawMessage
}

// Sink takes the events of a change in the change's own transaction. Emit
// may run more than once for one change when the transaction is retried;
// only the writes of the run that commits persist.
type Sink interface {
	Emit(tx storage.Tx, e Event) error
}

// Discard is the Sink of a gateway (or a test) without webhooks.
var Discard Sink = discard{}

type discard struct{}

func (discard) Emit(storage.Tx, Event) error { return nil }
