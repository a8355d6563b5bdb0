package contracts

import (
	"encoding/json"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/storage"
)

// eventView is the data of a contract event: the Contract Object as search
// returns it, without the signers and watchers, so that no signer's
// personal data leaves in a webhook, plus for a signer event the signer
// who acted.
type eventView struct {
	contractView
	SignerID string `json:"signerId,omitempty"`
}

// emit renders c, whose Status must be the effective one, and hands the
// event to the Sink in tx; signerID is "" but for opened, signed and
// rejected.
func (s *Store) emit(tx storage.Tx, typ string, c *Contract, at time.Time, signerID string) error {
	v, err := s.view(c, false, "")
	if err != nil {
		return err
	}
	data, err := json.Marshal(eventView{contractView: v, SignerID: signerID})
	if err != nil {
		return err
	}
	return s.events.Emit(tx, events.Event{Type: typ, Owner: c.CreatedByID, At: at, Data: data})
}

// emitChanges emits the events of the change from before to c, both as
// stored, c settled: read off the state rather than told by each caller,
// so that every path that changes a contract (the signing pages, archive,
// the expiry sweep) emits the same events for the same change, once. A
// signer's first opening, each decision in signer order, then the status
// moves (completed: every signer signed; expired: written down), then the
// move to the archive.
func (s *Store) emitChanges(tx storage.Tx, before, c *Contract) error {
	// Signers are fixed at creation; the guard only keeps a damaged
	// record from panicking.
	if len(before.Signers) != len(c.Signers) {
		before = &Contract{Status: before.Status, ArchivalTimestamp: before.ArchivalTimestamp, Signers: make([]Signer, len(c.Signers))}
	}
	for i := range c.Signers {
		was, sg := &before.Signers[i], &c.Signers[i]
		if was.OpenedTimestamp.IsZero() && !sg.OpenedTimestamp.IsZero() {
			if err := s.emit(tx, events.ContractOpened, c, sg.OpenedTimestamp, sg.ID); err != nil {
				return err
			}
		}
	}
	for i := range c.Signers {
		was, sg := &before.Signers[i], &c.Signers[i]
		if was.Decision != "" || sg.Decision == "" {
			continue
		}
		typ := events.ContractSigned
		if sg.Decision == DecisionRejected {
			typ = events.ContractRejected
		}
		if err := s.emit(tx, typ, c, sg.DecisionTimestamp, sg.ID); err != nil {
			return err
		}
	}
	// Completed once its sealed documents are stored, which a receiver
	// fetches: right after the last signature, or once the timestamp
	// authority answered; its time is still the last signature's.
	if before.FinalizedPDF == nil && c.FinalizedPDF != nil {
		if err := s.emit(tx, events.ContractCompleted, c, lastDecision(c), ""); err != nil {
			return err
		}
	}
	if before.Status != c.Status {
		switch c.Status {
		case StatusExpired:
			// It expired at its expirationTimestamp, whenever the
			// sweeper (or another change) comes to write it down.
			if err := s.emit(tx, events.ContractExpired, c, c.ExpirationTimestamp, ""); err != nil {
				return err
			}
		}
	}
	if before.ArchivalTimestamp.IsZero() && !c.ArchivalTimestamp.IsZero() {
		return s.emit(tx, events.ContractArchived, c, c.ArchivalTimestamp, "")
	}
	return nil
}

// lastDecision is when the last of c's signers decided: when a signed
// contract was completed.
func lastDecision(c *Contract) time.Time {
	var t time.Time
	for i := range c.Signers {
		if d := c.Signers[i].DecisionTimestamp; d.After(t) {
			t = d
		}
	}
	return t
}
