package notify

import (
	"errors"
	"fmt"
	"mime"
	"net/mail"
	"regexp"
	"strings"
	"time"
)

// Channel names the way a message travels. Its values are also the channel
// label of the keygate_notifications_total metric.
type Channel string

// The channels of the gateway.
const (
	Email Channel = "email"
	SMS   Channel = "sms"
)

// Outcomes reported through WorkerConfig.OnOutcome; they are the outcome
// label of the keygate_notifications_total metric.
const (
	OutcomeSent   = "sent"
	OutcomeRetry  = "retry"
	OutcomeFailed = "failed"
)

// Message is one notification. Email messages use To (an address that
// net/mail parses), Subject, Text, HTML and Attachments; SMS messages use To
// (E.164) and Text only.
type Message struct {
	Channel Channel
	To      string
	Subject string
	// Text is the plain-text body; it is always sent.
	Text string
	// HTML, when set, is sent as an alternative to Text.
	HTML        string
	Attachments []Attachment
	// Ref groups the messages of one subject (a contract id), so that
	// DropRef can remove the pending ones when the subject is deleted.
	Ref string

	// ID and Queued are set by the outbox and ignored by Enqueue. Senders
	// derive stable names from them (Message-ID, .eml file name), so that a
	// redelivery after a crash is recognisable as the same message.
	ID     uint64
	Queued time.Time
}

// Attachment is a file sent with an e-mail, such as a finalized contract.
type Attachment struct {
	Name      string
	MediaType string
	Data      []byte
}

// maxAttachments keeps an e-mail reasonable and the attachment index within
// its two key bytes.
const maxAttachments = 100

var e164 = regexp.MustCompile(`^\+[0-9]{8,15}$`)

// validate rejects messages that no sender could ever deliver, at Enqueue
// time, where the caller can still roll its change back, rather than after
// a day of retries.
func (m *Message) validate() error {
	var errs []error
	switch m.Channel {
	case Email:
		if _, err := mail.ParseAddress(m.To); err != nil {
			errs = append(errs, fmt.Errorf("recipient %q is not an e-mail address", m.To))
		}
		if strings.ContainsAny(m.Subject, "\r\n") {
			errs = append(errs, errors.New("subject contains a line break"))
		}
		if len(m.Attachments) > maxAttachments {
			errs = append(errs, fmt.Errorf("more than %d attachments", maxAttachments))
		}
		for i, a := range m.Attachments {
			if a.Name == "" || strings.ContainsAny(a.Name, "/\\\r\n\x00") {
				errs = append(errs, fmt.Errorf("attachment %d: invalid file name %q", i, a.Name))
			}
			if _, _, err := mime.ParseMediaType(a.MediaType); err != nil {
				errs = append(errs, fmt.Errorf("attachment %d: invalid media type %q", i, a.MediaType))
			}
		}
	case SMS:
		if !e164.MatchString(m.To) {
			errs = append(errs, fmt.Errorf("recipient %q is not an E.164 number", m.To))
		}
		if m.Text == "" {
			errs = append(errs, errors.New("text is empty"))
		}
		if len(m.Attachments) > 0 || m.HTML != "" || m.Subject != "" {
			errs = append(errs, errors.New("sms carries text only"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown channel %q", m.Channel))
	}
	if strings.ContainsRune(m.Ref, 0) {
		errs = append(errs, errors.New("ref contains NUL"))
	}
	if len(m.Ref) > 1024 {
		errs = append(errs, errors.New("ref longer than 1024 bytes"))
	}
	return errors.Join(errs...)
}
