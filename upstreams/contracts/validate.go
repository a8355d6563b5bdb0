package contracts

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/text"
)

// CreateRequest is the Create Contract request body of docs/clients.md,
// watchers and expirationTimestamp included. Pointers tell an
// absent optional field from one given as its zero value.
type CreateRequest struct {
	TemplateID          string          `json:"templateId"`
	Name                string          `json:"name"`
	SequentialSigning   *bool           `json:"sequentialSigning"`
	Signers             []SignerRequest `json:"signers"`
	Watchers            []Watcher       `json:"watchers"`
	ExpirationTimestamp *string         `json:"expirationTimestamp"`
}

// SignerRequest is the API's Signer Creation Object.
type SignerRequest struct {
	FullName                  string   `json:"fullName"`
	AccessKind                string   `json:"accessKind"`
	Email                     string   `json:"email"`
	OTPMethod                 string   `json:"otpMethod"`
	SigningMethods            []string `json:"signerSigningMethods"`
	Phone                     string   `json:"phone"`
	AppendSignatureMacro      *bool    `json:"appendSignatureMacro"`
	ReceivesCompletedContract *bool    `json:"receivesCompletedContract"`
}

// Limits of docs/clients.md.
const (
	MinSigners     = 1
	MaxSigners     = 26
	MaxWatchers    = 50
	maxTextLen     = 255
	maxExpiryAhead = 365 * 24 * time.Hour
)

// Field error codes beyond "required" and "invalid".
const (
	codeRequired          = "required"
	codeInvalid           = "invalid"
	codeUnknownTemplate   = "unknown_template"
	codeSMSNotConfigured  = "sms_not_configured"
	codeTooMany           = "too_many"
	codeUnknownParameter  = "unknown_parameter"
	codeRepeatedParameter = "repeated"
)

// draft is what a valid create request gives: the template copied and
// the signers, watchers and expiration with their defaults.
type draft struct {
	signers  []Signer
	watchers []Watcher
	expires  time.Time
}

// validateCreate checks every rule of a create (docs/clients.md), recording
// each violation in f, and returns the draft of the contract. Whether the
// template exists is checked only if lookup: a create reads the template
// in its own transaction.
func (s *Store) validateCreate(ctx context.Context, f *problem.Fields, in *CreateRequest, now time.Time, lookup bool) (*draft, error) {
	d := &draft{}
	text.CheckID(f, "templateId", in.TemplateID)
	// With a tracker, a template the registry lacks may be its page,
	// which is not read for a request refused anyway.
	if lookup && s.cfg.Pages == nil && text.PrintableASCII(in.TemplateID, maxTextLen) {
		err := s.db.View(ctx, func(tx storage.Tx) error {
			_, _, err := s.cfg.Templates.templateDocument(ctx, tx, in.TemplateID)
			return err
		})
		switch {
		case problem.IsNotFound(err):
			f.Add("templateId", codeUnknownTemplate, "templateId names no registered template")
		case err != nil:
			return nil, err
		}
	}
	checkText(f, "name", in.Name)

	switch n := len(in.Signers); {
	case n < MinSigners:
		f.Add("signers", codeRequired, "signers must hold at least 1 signer")
	case n > MaxSigners:
		f.Add("signers", codeTooMany, "signers must hold at most "+strconv.Itoa(MaxSigners)+" signers")
	}
	// Past the limit the request is refused anyway; checking every entry of
	// a 1 MiB body would only cost CPU and bloat the error list.
	signers := make([]Signer, min(len(in.Signers), MaxSigners))
	for i := range signers {
		s.validateSigner(f, "signers["+strconv.Itoa(i)+"]", &in.Signers[i], &signers[i])
	}

	if len(in.Watchers) > MaxWatchers {
		f.Add("watchers", codeTooMany, "watchers must hold at most "+strconv.Itoa(MaxWatchers)+" watchers")
	}
	watchers := make([]Watcher, min(len(in.Watchers), MaxWatchers))
	for i := range watchers {
		validateWatcher(f, "watchers["+strconv.Itoa(i)+"]", &in.Watchers[i])
		watchers[i] = in.Watchers[i]
	}

	expires := now.Add(s.cfg.ContractValidity)
	if in.ExpirationTimestamp != nil {
		t, err := time.Parse(time.RFC3339Nano, *in.ExpirationTimestamp)
		switch {
		case err != nil:
			f.Add("expirationTimestamp", codeInvalid, "expirationTimestamp must be an RFC 3339 timestamp")
		case !t.After(now):
			f.Add("expirationTimestamp", codeInvalid, "expirationTimestamp must be in the future")
		case t.Sub(now) > maxExpiryAhead:
			f.Add("expirationTimestamp", codeInvalid, "expirationTimestamp must be at most 365 days ahead")
		default:
			expires = t.UTC().Truncate(time.Millisecond)
		}
	}
	d.signers, d.watchers, d.expires = signers, watchers, expires
	return d, nil
}

// validateSigner checks one Signer Creation Object and fills out with its
// effective values (defaults applied).
func (s *Store) validateSigner(f *problem.Fields, path string, in *SignerRequest, out *Signer) {
	checkText(f, path+".fullName", in.FullName)

	switch in.AccessKind {
	case AccessEmail, AccessURL:
	case "":
		f.Add(path+".accessKind", codeRequired, path+".accessKind is required")
	default:
		f.Add(path+".accessKind", codeInvalid, path+`.accessKind must be "email" or "url"`)
	}

	if in.Email == "" {
		if in.AccessKind == AccessEmail {
			f.Add(path+".email", codeRequired, path+".email is required when accessKind is email")
		}
	} else if !text.Email(in.Email) {
		f.Add(path+".email", codeInvalid, path+".email must be an e-mail address without a display name")
	}

	if in.Phone != "" {
		switch {
		case !validPhone(in.Phone):
			f.Add(path+".phone", codeInvalid, path+".phone must be a valid E.164 number such as +41446681800")
		case !s.cfg.SMSConfigured:
			f.Add(path+".phone", codeSMSNotConfigured, path+".phone needs the sms shipper, which is not configured")
		}
	}

	otp := in.OTPMethod
	switch otp {
	case "":
		// The API's default rule: SMS if a phone, else e-mail if an
		// address, else none.
		switch {
		case in.Phone != "":
			otp = OTPSMS
		case in.Email != "":
			otp = OTPEmail
		default:
			otp = OTPNone
		}
	case OTPEmail:
		if in.Email == "" {
			f.Add(path+".otpMethod", codeInvalid, path+".otpMethod email needs an email")
		}
	case OTPSMS:
		if in.Phone == "" {
			f.Add(path+".otpMethod", codeInvalid, path+".otpMethod sms needs a phone")
		}
	case OTPNone:
	default:
		f.Add(path+".otpMethod", codeInvalid, path+`.otpMethod must be "email", "sms" or "none"`)
	}

	methods := signingMethods
	if in.SigningMethods != nil {
		methods = in.SigningMethods
		if !validSubset(in.SigningMethods, signingMethods) {
			f.Add(path+".signerSigningMethods", codeInvalid,
				path+".signerSigningMethods must be a non-empty list of upload, render and draw without repeats")
		}
	}

	*out = Signer{
		FullName:                  in.FullName,
		AccessKind:                in.AccessKind,
		Email:                     in.Email,
		Phone:                     in.Phone,
		OTPMethod:                 otp,
		SigningMethods:            methods,
		AppendSignatureMacro:      in.AppendSignatureMacro != nil && *in.AppendSignatureMacro,
		ReceivesCompletedContract: in.ReceivesCompletedContract == nil || *in.ReceivesCompletedContract,
	}
}

func validateWatcher(f *problem.Fields, path string, w *Watcher) {
	checkText(f, path+".name", w.Name)
	switch {
	case w.Email == "":
		f.Add(path+".email", codeRequired, path+".email is required")
	case !text.Email(w.Email):
		f.Add(path+".email", codeInvalid, path+".email must be an e-mail address without a display name")
	}
	switch {
	case w.NotificationKinds == "":
		f.Add(path+".notificationKinds", codeRequired, path+".notificationKinds is required")
	case !validSubset(strings.Split(w.NotificationKinds, "|"), notificationKinds):
		f.Add(path+".notificationKinds", codeInvalid,
			path+".notificationKinds must join kinds of created, opened, signed, rejected, completed and completed-contract with | without repeats")
	}
}

// checkText applies the rule for names: printable Unicode, 1 to 255
// characters, not only spaces.
func checkText(f *problem.Fields, field, v string) {
	switch {
	case v == "":
		f.Add(field, codeRequired, field+" is required")
	case !text.Printable(v, maxTextLen):
		f.Add(field, codeInvalid, field+" must be 1 to 255 printable characters, not only spaces")
	}
}

// validPhone requires E.164 (+, then 8 to 15 digits, no leading zero) and a
// number that libphonenumber deems valid for its country.
func validPhone(s string) bool {
	if len(s) < 9 || len(s) > 16 || s[0] != '+' || s[1] == '0' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	n, err := phonenumbers.Parse(s, "")
	return err == nil && phonenumbers.IsValidNumber(n)
}

// validSubset reports whether list is non-empty, repeats nothing and holds
// only members of allowed.
func validSubset(list, allowed []string) bool {
	if len(list) == 0 {
		return false
	}
	for i, v := range list {
		known := false
		for _, a := range allowed {
			if v == a {
				known = true
				break
			}
		}
		if !known {
			return false
		}
		for _, w := range list[:i] {
			if v == w {
				return false
			}
		}
	}
	return true
}
