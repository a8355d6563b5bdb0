package signing

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/contracts/contractpdf"
)

// The kinds of trail event: each step of a contract's signing that its
// certificate of completion lists.
const (
	TrailCreated     = "created"      // through the API, by the key's owner
	TrailInvited     = "invited"      // the e-mail invitation was queued
	TrailLinkIssued  = "link_issued"  // a url signer's link went to the API client
	TrailOpened      = "opened"       // the first opening of the signing page
	TrailOTPSent     = "otp_sent"     // a one-time password was queued
	TrailOTPRefused  = "otp_refused"  // a wrong one-time password was entered
	TrailOTPAccepted = "otp_accepted" // the password of a decision was right
	TrailSigned      = "signed"
	TrailRejected    = "rejected"
	TrailCompleted   = "completed" // every signer signed
)

// TrailEvent is one step of a contract's signing, recorded in the
// transaction of the change it describes, with the origin of the request
// that made it. Addresses are stored masked, as the certificate shows
// them: the trail keeps no more of a signer's contact than it needs.
type TrailEvent struct {
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"`
	SignerID string    `json:"signerId,omitempty"`
	// Channel and To say where an invitation or a password went:
	// "email" or "sms", and the masked address.
	Channel string `json:"channel,omitempty"`
	To      string `json:"to,omitempty"`
	// Method is the signing method of a signature.
	Method string `json:"method,omitempty"`
	// Owner, KeyID and KeyName say who created the contract.
	Owner   string `json:"owner,omitempty"`
	KeyID   string `json:"keyId,omitempty"`
	KeyName string `json:"keyName,omitempty"`
	// TriesLeft is, for a refused password, how many tries it has left.
	TriesLeft int    `json:"triesLeft,omitempty"`
	IP        string `json:"ip,omitempty"`
	UserAgent string `json:"userAgent,omitempty"`
}

// record appends e, at now, to c's trail in tx, with the request's
// origin; sg is the signer it concerns, nil for the contract's own.
func (s *Service) record(tx storage.Tx, c *contracts.Contract, sg *contracts.Signer, by contracts.Origin, e TrailEvent) error {
	if sg != nil {
		e.SignerID = sg.ID
	}
	e.IP, e.UserAgent = by.IP, by.UserAgent
	return s.backend.AppendTrail(tx, c.ID, &e)
}

// maskedAddress is the masked form of sg's address on channel, as the
// password reply and the certificate show it.
func maskedAddress(sg *contracts.Signer, channel string) string {
	if channel == contracts.OTPSMS {
		return maskPhone(sg.Phone)
	}
	return maskEmail(sg.Email)
}

// certificateEvents turns trail, c's recorded events, into the lines of
// the certificate: the contract's own (creation, completion) and each
// signer's, in the order they happened. What a contract created before
// trails were kept lacks is filled in from its record (the creation, the
// first opening, the decision with its address), marked as such.
func certificateEvents(c *contracts.Contract, trail []TrailEvent) (own []contractpdf.Event, bySigner [][]contractpdf.Event) {
	// Events of one transaction share a time; the stable sort keeps
	// their recorded order.
	sort.SliceStable(trail, func(i, j int) bool { return trail[i].At.Before(trail[j].At) })
	bySigner = make([][]contractpdf.Event, len(c.Signers))
	seen := make(map[string]bool) // signer id + kind, and kind for the contract's own
	for i := range trail {
		e := &trail[i]
		line := contractpdf.Event{At: e.At, What: e.words(), IP: e.IP, UserAgent: e.UserAgent}
		seen[e.SignerID+"\x00"+e.Kind] = true
		if e.SignerID == "" {
			own = append(own, line)
			continue
		}
		if j := c.SignerByID(e.SignerID); j >= 0 {
			bySigner[j] = append(bySigner[j], line)
		}
	}

	const before = " (recorded before the event trail)"
	if !seen["\x00"+TrailCreated] {
		own = append([]contractpdf.Event{{At: c.CreationTimestamp, What: "Contract created through the API by " + contractpdf.ClientText(c.CreatedByID) + before}}, own...)
	}
	for j := range c.Signers {
		sg := &c.Signers[j]
		var old []contractpdf.Event
		if !sg.OpenedTimestamp.IsZero() && !seen[sg.ID+"\x00"+TrailOpened] {
			old = append(old, contractpdf.Event{At: sg.OpenedTimestamp, What: "Opened the signing page" + before})
		}
		if sg.Decision != "" && !seen[sg.ID+"\x00"+TrailSigned] && !seen[sg.ID+"\x00"+TrailRejected] {
			what := "Rejected the contract"
			if sg.Decision == contracts.DecisionSigned {
				what = "Signed"
			}
			old = append(old, contractpdf.Event{At: sg.DecisionTimestamp, What: what + before, IP: sg.DecisionIP})
		}
		if len(old) > 0 {
			bySigner[j] = append(old, bySigner[j]...)
			sort.SliceStable(bySigner[j], func(a, b int) bool { return bySigner[j][a].At.Before(bySigner[j][b].At) })
		}
	}
	return own, bySigner
}

// words says what e records, as the certificate lists it. A message is
// recorded when it is queued, in the transaction of the change that sends
// it; its delivery is the outbox's, retried until it succeeds or gives
// up, and shows in the logs and metrics, not here.
func (e *TrailEvent) words() string {
	switch e.Kind {
	case TrailCreated:
		by := "Contract created through the API by " + contractpdf.ClientText(e.Owner)
		if e.KeyName != "" {
			by += fmt.Sprintf(", with the API key “%s” (%s)", contractpdf.ClientText(e.KeyName), contractpdf.ClientText(e.KeyID))
		} else if e.KeyID != "" {
			by += ", with the API key " + contractpdf.ClientText(e.KeyID)
		}
		return by
	case TrailInvited:
		return "Invitation queued for delivery by " + channelName(e.Channel) + " to " + e.maskedTo()
	case TrailLinkIssued:
		return "Signing link given to the API client that created the contract, which hands it to the signer (access by link, no e-mail)"
	case TrailOpened:
		return "Opened the signing page"
	case TrailOTPSent:
		return "One-time password queued for delivery by " + channelName(e.Channel) + " to " + e.maskedTo()
	case TrailOTPRefused:
		if e.TriesLeft == 0 {
			return "Wrong one-time password entered; the password is void"
		}
		return fmt.Sprintf("Wrong one-time password entered (%d %s left)", e.TriesLeft, plural(e.TriesLeft, "try", "tries"))
	case TrailOTPAccepted:
		return "One-time password accepted"
	case TrailSigned:
		return "Signed: " + contractpdf.MethodWords(e.Method)
	case TrailRejected:
		return "Declined: rejected the contract"
	case TrailCompleted:
		return "Contract completed: every signer has signed"
	}
	return e.Kind
}

// maskedTo is e.To as the certificate prints it: the characters the
// masked address keeps of the client's (the first of an e-mail address,
// its domain, a phone's last digits) through contractpdf.ClientText,
// the mask's own "•••" as it is.
func (e *TrailEvent) maskedTo() string {
	const mask = "•••"
	if e.Channel == contracts.OTPSMS {
		if rest, ok := strings.CutPrefix(e.To, mask); ok {
			return mask + contractpdf.ClientText(rest)
		}
	} else if _, n := utf8.DecodeRuneInString(e.To); n > 0 {
		if rest, ok := strings.CutPrefix(e.To[n:], mask); ok {
			return contractpdf.ClientText(e.To[:n]) + mask + contractpdf.ClientText(rest)
		}
	}
	return contractpdf.ClientText(e.To)
}
