package contracts

import (
	"time"

	"github.com/keygate/keygate/internal/token"
)

// Status is a contract's status (docs/clients.md, Status).
type Status string

// The five statuses. signed, rejected and expired are final.
const (
	StatusSent     Status = "sent"
	StatusOngoing  Status = "ongoing"
	StatusRejected Status = "rejected"
	StatusSigned   Status = "signed"
	StatusExpired  Status = "expired"
)

// statuses lists every status in the API's order; its index is the byte
// the status index stores, so the order must never change.
var statuses = [...]Status{StatusSent, StatusOngoing, StatusRejected, StatusSigned, StatusExpired}

// Final reports whether no signer decision can change s any more.
func (s Status) Final() bool {
	return s == StatusSigned || s == StatusRejected || s == StatusExpired
}

// live reports whether a contract in s becomes expired when its
// expirationTimestamp passes.
func (s Status) live() bool { return s == StatusSent || s == StatusOngoing }

// Placement is where a contract sits, apart from its status: stacked
// until archived.
type Placement string

// The two placements.
const (
	PlacementStacked  Placement = "stacked"
	PlacementArchived Placement = "archived"
)

// Access kinds: how a signer reaches the signing page.
const (
	AccessEmail = "email"
	AccessURL   = "url"
)

// One-time-password methods.
const (
	OTPEmail = "email"
	OTPSMS   = "sms"
	OTPNone  = "none"
)

// Signing methods a signer may be offered.
const (
	MethodUpload = "upload"
	MethodRender = "render"
	MethodDraw   = "draw"
)

// signingMethods is the default: all three, in the API's order.
var signingMethods = []string{MethodUpload, MethodRender, MethodDraw}

// Decisions a signer can take.
const (
	DecisionSigned   = "signed"
	DecisionRejected = "rejected"
)

// notificationKinds are the watcher notification kinds of the API (docs/clients.md).
var notificationKinds = []string{"created", "opened", "signed", "rejected", "completed", "completed-contract"}

// Contract is a contract as the store keeps it. Its JSON form is the stored
// record, not the API body: the handlers render the Contract Object from it
// (view.go), because the record also holds what must never be shown, such
// as the signers' token hashes and sealed tokens.
type Contract struct {
	ID         string `json:"id"`
	TemplateID string `json:"templateId"`
	// TemplateSource names the tracker's page the document was copied
	// from, with its version ("wiki page NDA of project acme, version
	// 3"); empty for a template of the registry.
	TemplateSource      string    `json:"templateSource,omitempty"`
	CollectionID        string    `json:"collectionId"`
	Name                string    `json:"name"`
	CreatedByID         string    `json:"createdById"`
	CreationTimestamp   time.Time `json:"creationTimestamp"`
	ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	SequentialSigning   bool      `json:"sequentialSigning"`
	// ArchivalTimestamp is zero while the contract is stacked.
	ArchivalTimestamp time.Time `json:"archivalTimestamp,omitzero"`
	// Status is the status as last written. Read methods of the Store
	// return the effective status instead (see EffectiveStatus).
	Status Status `json:"status"`
	// DocumentDigest names the copy of the template's title and body made
	// at creation (Store.Document).
	DocumentDigest []byte      `json:"documentDigest"`
	Signers        []Signer    `json:"signers"`
	Watchers       []Watcher   `json:"watchers,omitempty"`
	FinalizedPDF   *Attachment `json:"finalizedPdf,omitempty"`
	CertificatePDF *Attachment `json:"certificatePdf,omitempty"`
}

// Signer is one invited signer of a contract with the state of their
// decision.
type Signer struct {
	ID                        string   `json:"id"`
	FullName                  string   `json:"fullName"`
	AccessKind                string   `json:"accessKind"`
	Email                     string   `json:"email,omitempty"`
	Phone                     string   `json:"phone,omitempty"`
	OTPMethod                 string   `json:"otpMethod"`
	SigningMethods            []string `json:"signerSigningMethods"`
	AppendSignatureMacro      bool     `json:"appendSignatureMacro"`
	ReceivesCompletedContract bool     `json:"receivesCompletedContract"`

	OpenedTimestamp   time.Time `json:"openedTimestamp,omitzero"`
	Decision          string    `json:"decision,omitempty"`
	DecisionTimestamp time.Time `json:"decisionTimestamp,omitzero"`
	DecisionIP        string    `json:"decisionIp,omitempty"`
	// DecisionReason is the reason a signer gave for rejecting, told to
	// the watchers; the Contract Object does not show it.
	DecisionReason string `json:"decisionReason,omitempty"`

	// TokenHash is the SHA-256 of the signing-link token, the only form
	// the signing page looks a signer up by.
	TokenHash token.Hash `json:"tokenHash"`
	// SealedToken is the token sealed under the master key with the
	// contract and signer ids as associated data, so the creator can be
	// shown the link again.
	SealedToken []byte `json:"sealedToken"`

	// token is the clear token, known only to the Create call that made it.
	token string
}

// Watcher is someone who is notified of a contract's events without
// signing it.
type Watcher struct {
	Name              string `json:"name"`
	Email             string `json:"email"`
	NotificationKinds string `json:"notificationKinds"`
}

// Attachment is a PDF made when the contract is completed.
type Attachment struct {
	ID        string `json:"id"`
	FileName  string `json:"fileName"`
	MediaType string `json:"mediaType"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
}

// Placement returns where c sits.
func (c *Contract) Placement() Placement {
	if c.ArchivalTimestamp.IsZero() {
		return PlacementStacked
	}
	return PlacementArchived
}

// The states of a completed contract's documents (DocumentStatus).
const (
	// DocumentsBeingSealed: every signer signed; the finalized PDF and
	// the certificate of completion are being made and sealed, a moment
	// (longer while a timestamp authority does not answer).
	DocumentsBeingSealed = "being_sealed"
	// DocumentsSealed: both are stored, sealed.
	DocumentsSealed = "sealed"
)

// DocumentStatus is the state of the documents of a completed contract,
// "" for one not signed by everyone.
func (c *Contract) DocumentStatus() string {
	switch {
	case c.FinalizedPDF != nil:
		return DocumentsSealed
	case c.DecidedStatus() == StatusSigned:
		return DocumentsBeingSealed
	}
	return ""
}

// DecidedStatus is the status the signers' decisions give: rejected if
// any rejected, signed if all signed, ongoing if some signed, else sent.
func (c *Contract) DecidedStatus() Status {
	signed := 0
	for i := range c.Signers {
		switch c.Signers[i].Decision {
		case DecisionRejected:
			return StatusRejected
		case DecisionSigned:
			signed++
		}
	}
	switch {
	case signed == 0:
		return StatusSent
	case signed == len(c.Signers):
		return StatusSigned
	default:
		return StatusOngoing
	}
}

// EffectiveStatus is the status at now: a sent or ongoing contract whose
// expirationTimestamp has come is expired, whether or not the sweeper has
// written it down yet.
func (c *Contract) EffectiveStatus(now time.Time) Status {
	return effectiveStatus(c.Status, c.ExpirationTimestamp, now)
}

func effectiveStatus(stored Status, expires, now time.Time) Status {
	if stored.live() && !now.Before(expires) {
		return StatusExpired
	}
	return stored
}

// settle recomputes the status to store after a change at now: a final
// status stays; otherwise the decisions decide, and expiry overrides a
// live result.
func (c *Contract) settle(now time.Time) {
	if c.Status.Final() {
		return
	}
	c.Status = effectiveStatus(c.DecidedStatus(), c.ExpirationTimestamp, now)
}

// SignerByID returns the index of the signer with id, or -1.
func (c *Contract) SignerByID(id string) int {
	for i := range c.Signers {
		if c.Signers[i].ID == id {
			return i
		}
	}
	return -1
}
