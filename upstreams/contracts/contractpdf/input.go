// Package contractpdf renders the two PDFs of a completed contract: the
// finalized document (the contract text followed by its signatures) and the
// certificate that records how each signer decided, with the SHA-256 of the
// finalized document tying the two together.
//
// The package takes plain data and knows nothing of storage or HTTP, so
// that rendering can be tested, and changed, apart from the signing flow.
// Text is set in embedded faces for Latin, Greek, Cyrillic, Arabic,
// Hebrew, Devanagari, Chinese, Japanese and Korean (fonts.go), laid out
// by the package itself (text.go), so signers' names print as typed.
package contractpdf

import (
	"errors"
	"fmt"
	"time"
)

// Signing methods, as in the API's signerSigningMethods.
const (
	MethodUpload = "upload" // an uploaded PNG or JPEG image
	MethodRender = "render" // a typed name, set in a script-like font
	MethodDraw   = "draw"   // a PNG drawn on the signing page
)

// Decisions, as in the API.
const (
	DecisionSigned   = "signed"
	DecisionRejected = "rejected"
)

// Input is a contract as the PDFs show it.
type Input struct {
	ContractID    string
	Name          string
	TemplateTitle string
	// Body is the template body, in Markup: "markdown" (CommonMark:
	// headings, paragraphs, lists, bold and italic are drawn), anything
	// else plain text with paragraphs separated by newlines.
	Body   string
	Markup string
	// TemplateSource names where the text was copied from, with its
	// version ("wiki page NDA of project acme, version 3"), for the
	// certificate; empty for a template of the gateway's own registry.
	TemplateSource string
	Created        time.Time
	Signers        []Signer
	// Events are the contract's own steps for the certificate: its
	// creation and completion.
	Events []Event
}

// Event is one line of the certificate's trail: when, what in words, and
// the client address and user agent of the request that made it (either
// may be empty: a step from before they were recorded).
type Event struct {
	At        time.Time
	What      string
	IP        string
	UserAgent string
}

// Signer is one signer and what they did.
type Signer struct {
	FullName string
	Email    string
	Phone    string
	// Method is MethodUpload, MethodRender or MethodDraw; empty for a
	// signer who did not sign.
	Method string
	// Signature holds the PNG or JPEG image for MethodUpload and
	// MethodDraw.
	Signature []byte
	// TypedName is the name typed for MethodRender.
	TypedName            string
	AppendSignatureMacro bool
	// Decision is DecisionSigned, DecisionRejected or empty (undecided).
	Decision     string
	DecisionTime time.Time
	DecisionIP   string
	// Opened is when the signer first opened the signing page; zero if
	// never.
	Opened time.Time
	// Events are the signer's steps for the certificate, in order.
	Events []Event
}

// completedAt is the latest decision, the moment the contract was
// complete; it dates both PDFs, so equal input gives equal metadata.
func (in *Input) completedAt() time.Time {
	t := in.Created
	for _, s := range in.Signers {
		if s.DecisionTime.After(t) {
			t = s.DecisionTime
		}
	}
	return t.UTC()
}

// checkSigned verifies that the contract is complete and that every
// signature can be drawn.
func (in *Input) checkSigned() error {
	if len(in.Signers) == 0 {
		return errors.New("contractpdf: contract has no signers")
	}
	var errs []error
	for i, s := range in.Signers {
		if s.Decision != DecisionSigned {
			errs = append(errs, fmt.Errorf("signer %d (%s) has not signed", i, s.FullName))
			continue
		}
		switch s.Method {
		case MethodUpload, MethodDraw:
			if len(s.Signature) == 0 {
				errs = append(errs, fmt.Errorf("signer %d (%s): %s signature has no image", i, s.FullName, s.Method))
			}
		case MethodRender:
			if s.TypedName == "" {
				errs = append(errs, fmt.Errorf("signer %d (%s): rendered signature has no typed name", i, s.FullName))
			}
		default:
			errs = append(errs, fmt.Errorf("signer %d (%s): unknown signing method %q", i, s.FullName, s.Method))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("contractpdf: %w", errors.Join(errs...))
	}
	return nil
}
