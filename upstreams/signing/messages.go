package signing

import (
	"fmt"
	"github.com/keygate/keygate/internal/storage"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/text"
	"github.com/keygate/keygate/upstreams/contracts"
)

// The e-mails and text messages of the lifecycle. Each names the contract
// and carries its id as Ref, so deleting the contract drops what is still
// queued. Signing links go only to the signer they belong to.

// humanTime is how the messages, the page and the PDFs show a time.
func humanTime(t time.Time) string { return text.HumanTime(t) }

// quoted is a contract name inside a sentence or subject.
func quoted(name string) string { return "“" + name + "”" }

// invite queues the invitation of signer i of c, at now, if they are
// reached by e-mail, and records it in the trail with by, the origin of
// the request that began their turn; a url signer's turn simply begins.
func (s *Service) invite(tx storage.Tx, c *contracts.Contract, i int, now time.Time, by contracts.Origin) error {
	sg := &c.Signers[i]
	if sg.AccessKind != contracts.AccessEmail {
		return nil
	}
	invited := TrailEvent{At: now, Kind: TrailInvited, Channel: contracts.OTPEmail, To: maskEmail(sg.Email)}
	if err := s.record(tx, c, sg, by, invited); err != nil {
		return err
	}
	link, err := s.store.AccessURL(c, i)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Hello %s,\n\n", sg.FullName)
	fmt.Fprintf(&b, "you are asked to sign the contract %s. Open this link to read it, then sign or reject it:\n\n%s\n\n", quoted(c.Name), link)
	fmt.Fprintf(&b, "The link is yours alone: do not forward it. The contract can be signed until %s.\n", humanTime(c.ExpirationTimestamp))
	if sg.OTPMethod != contracts.OTPNone {
		fmt.Fprintf(&b, "To sign, you will ask for a one-time password, sent to you by %s.\n", channelName(sg.OTPMethod))
	}
	return s.outbox.Enqueue(tx, notify.Message{
		Channel: notify.Email, To: sg.Email, Ref: c.ID,
		Subject: "Please sign " + quoted(c.Name),
		Text:    b.String(),
	})
}

func channelName(method string) string {
	if method == contracts.OTPSMS {
		return "text message"
	}
	return "e-mail"
}

// otpMessage is the one-time password for sg, by their otpMethod.
func otpMessage(c *contracts.Contract, sg *contracts.Signer, code string) notify.Message {
	if sg.OTPMethod == contracts.OTPSMS {
		return notify.Message{
			Channel: notify.SMS, To: sg.Phone, Ref: c.ID,
			Text: fmt.Sprintf("%s is your password to sign %s. It is valid for 10 minutes.", code, quoted(shorten(c.Name, 40))),
		}
	}
	return notify.Message{
		Channel: notify.Email, To: sg.Email, Ref: c.ID,
		Subject: "Your one-time password for " + quoted(c.Name),
		Text: fmt.Sprintf("Hello %s,\n\nyour one-time password to sign %s is\n\n    %s\n\n"+
			"It is valid for 10 minutes. If you did not ask for it, ignore this e-mail: nobody can sign in your name without it.\n",
			sg.FullName, quoted(c.Name), code),
	}
}

// shorten cuts s to at most n characters, marking the cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// watches reports whether w chose kind.
func watches(w *contracts.Watcher, kind string) bool {
	for _, k := range strings.Split(w.NotificationKinds, "|") {
		if k == kind {
			return true
		}
	}
	return false
}

// notifyWatchers queues kind to every watcher of c who chose it. sg is the
// signer who acted, for opened, signed and rejected; pdf is the finalized
// PDF, attached for completed-contract.
func (s *Service) notifyWatchers(tx storage.Tx, c *contracts.Contract, kind string, sg *contracts.Signer, pdf *notify.Attachment) error {
	var subject string
	var b strings.Builder
	switch kind {
	case KindCreated:
		subject = "Contract created: " + quoted(c.Name)
		fmt.Fprintf(&b, "The contract %s was created by %s on %s and sent to its signers:\n\n", quoted(c.Name), c.CreatedByID, humanTime(c.CreationTimestamp))
		for i := range c.Signers {
			fmt.Fprintf(&b, "  %d. %s\n", i+1, c.Signers[i].FullName)
		}
		order := "in any order"
		if c.SequentialSigning {
			order = "one after the other, in this order"
		}
		fmt.Fprintf(&b, "\nThey sign %s, until %s.\n", order, humanTime(c.ExpirationTimestamp))
	case KindOpened:
		subject = sg.FullName + " opened " + quoted(c.Name)
		fmt.Fprintf(&b, "%s opened the signing page of the contract %s on %s.\n", sg.FullName, quoted(c.Name), humanTime(sg.OpenedTimestamp))
	case KindSigned:
		subject = sg.FullName + " signed " + quoted(c.Name)
		fmt.Fprintf(&b, "%s signed the contract %s on %s.\n", sg.FullName, quoted(c.Name), humanTime(sg.DecisionTimestamp))
		signed := 0
		for i := range c.Signers {
			if c.Signers[i].Decision == contracts.DecisionSigned {
				signed++
			}
		}
		fmt.Fprintf(&b, "%d of %d signers have signed.\n", signed, len(c.Signers))
	case KindRejected:
		subject = sg.FullName + " rejected " + quoted(c.Name)
		fmt.Fprintf(&b, "%s rejected the contract %s on %s, so the contract is rejected.\n", sg.FullName, quoted(c.Name), humanTime(sg.DecisionTimestamp))
		if sg.DecisionReason != "" {
			fmt.Fprintf(&b, "\nTheir reason:\n\n%s\n", sg.DecisionReason)
		}
	case KindCompleted:
		subject = "Completed: " + quoted(c.Name)
		fmt.Fprintf(&b, "Every signer has signed the contract %s. It is complete.\n", quoted(c.Name))
	case KindCompletedContract:
		subject = "Signed contract: " + quoted(c.Name)
		fmt.Fprintf(&b, "The contract %s is signed by everyone. The signed document is attached.\n", quoted(c.Name))
	default:
		return fmt.Errorf("signing: unknown notification kind %q", kind)
	}
	fmt.Fprintf(&b, "\nContract id: %s\n", c.ID)
	for i := range c.Watchers {
		w := &c.Watchers[i]
		if !watches(w, kind) {
			continue
		}
		m := notify.Message{Channel: notify.Email, To: w.Email, Ref: c.ID, Subject: subject,
			Text: "Hello " + w.Name + ",\n\n" + b.String()}
		if pdf != nil {
			m.Attachments = []notify.Attachment{*pdf}
		}
		if err := s.outbox.Enqueue(tx, m); err != nil {
			return err
		}
	}
	return nil
}

// completedMessage is the finalized PDF for a signer who receives it.
func completedMessage(c *contracts.Contract, sg *contracts.Signer, pdf notify.Attachment) notify.Message {
	return notify.Message{
		Channel: notify.Email, To: sg.Email, Ref: c.ID,
		Subject: "Your signed contract: " + quoted(c.Name),
		Text: fmt.Sprintf("Hello %s,\n\nevery signer has signed the contract %s. The signed document is attached; keep it for your records.\n\nContract id: %s\n",
			sg.FullName, quoted(c.Name), c.ID),
		Attachments: []notify.Attachment{pdf},
	}
}
