package signing

import (
	"html/template"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/richtext"
	"github.com/keygate/keygate/upstreams/contracts"
)

// pageView is what the signing page shows, and its JSON form: the
// document, the signer, everyone's progress (names and decisions, no
// contact data) and whether the signer may decide now.
type pageView struct {
	Contract  contractInfo `json:"contract"`
	Signer    signerInfo   `json:"signer"`
	Signers   []peerInfo   `json:"signers"`
	CanDecide bool         `json:"canDecide"`
	// DocumentURL is where the signer downloads the finalized PDF, once
	// the contract is signed: the signer's own link, for as long as the
	// contract exists.
	DocumentURL string `json:"documentUrl,omitempty"`
	// CertificateURL is where the signer downloads the certificate of
	// completion, from the same moment, for as long.
	CertificateURL string `json:"certificateUrl,omitempty"`
	// DocumentStatus is being_sealed, then sealed, once every signer
	// signed: the download links appear when it is sealed.
	DocumentStatus string `json:"documentStatus,omitempty"`
	// Blocked says why the signer cannot decide, when they cannot.
	Blocked string `json:"blockedReason,omitempty"`
}

type contractInfo struct {
	ID                  string       `json:"id"`
	Name                string       `json:"name"`
	Status              string       `json:"status"`
	CreationTimestamp   string       `json:"creationTimestamp"`
	ExpirationTimestamp string       `json:"expirationTimestamp"`
	SequentialSigning   bool         `json:"sequentialSigning"`
	Document            documentInfo `json:"document"`
}

type documentInfo struct {
	Title string `json:"title"`
	Body  string `json:"body"`
	// Markup is "markdown" for a text copied from a tracker page written
	// in it; Source names that page with the version copied.
	Markup string `json:"markup,omitempty"`
	Source string `json:"source,omitempty"`
}

// HTML is the body as the page shows it: Markdown rendered and cleaned,
// any other text as typed.
func (d documentInfo) HTML() template.HTML { return richtext.HTML(d.Markup, d.Body) }

type signerInfo struct {
	ID                string   `json:"id"`
	FullName          string   `json:"fullName"`
	OTPMethod         string   `json:"otpMethod"`
	OTPDestination    string   `json:"otpDestination,omitempty"`
	SigningMethods    []string `json:"signerSigningMethods"`
	OpenedTimestamp   string   `json:"openedTimestamp,omitempty"`
	Decision          string   `json:"decision,omitempty"`
	DecisionTimestamp string   `json:"decisionTimestamp,omitempty"`
}

type peerInfo struct {
	FullName string `json:"fullName"`
	Decision string `json:"decision,omitempty"`
	You      bool   `json:"you,omitempty"`
}

// timestampLayout is the API's: RFC 3339 in UTC with milliseconds.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timestampLayout)
}

func newPageView(ss *session, now time.Time) *pageView {
	c, sg := ss.c, ss.signer()
	v := &pageView{
		DocumentStatus: c.DocumentStatus(),
		Contract: contractInfo{
			ID: c.ID, Name: c.Name, Status: string(c.EffectiveStatus(now)),
			CreationTimestamp:   formatTime(c.CreationTimestamp),
			ExpirationTimestamp: formatTime(c.ExpirationTimestamp),
			SequentialSigning:   c.SequentialSigning,
			Document:            documentInfo{Title: ss.doc.Title, Body: ss.doc.Body, Markup: ss.doc.Markup, Source: c.TemplateSource},
		},
		Signer: signerInfo{
			ID: sg.ID, FullName: sg.FullName, OTPMethod: sg.OTPMethod, OTPDestination: otpDestination(sg),
			SigningMethods: sg.SigningMethods, OpenedTimestamp: formatTime(sg.OpenedTimestamp),
			Decision: sg.Decision, DecisionTimestamp: formatTime(sg.DecisionTimestamp),
		},
	}
	for i := range c.Signers {
		v.Signers = append(v.Signers, peerInfo{FullName: c.Signers[i].FullName, Decision: c.Signers[i].Decision, You: i == ss.i})
	}
	if err := mayAct(c, ss.i, now); err != nil {
		v.Blocked = err.(*problem.Details).Detail
	} else {
		v.CanDecide = true
	}
	return v
}

// otpDestination shows where the password goes, masked: the first letter
// and the domain of an e-mail address, the last three digits of a phone.
func otpDestination(sg *contracts.Signer) string {
	if sg.OTPMethod == contracts.OTPNone {
		return ""
	}
	return maskedAddress(sg, sg.OTPMethod)
}

// maskEmail keeps the first character and the domain: "a•••@example.com".
func maskEmail(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at < 1 {
		return ""
	}
	first, _ := utf8.DecodeRuneInString(addr)
	return string(first) + "•••" + addr[at:]
}

// maskPhone keeps the last three digits: "•••671".
func maskPhone(phone string) string {
	if len(phone) < 4 {
		return ""
	}
	return "•••" + phone[len(phone)-3:]
}

// otpReply is the JSON answer to a password request.
type otpReply struct {
	OTPMethod           string `json:"otpMethod"`
	SentTo              string `json:"sentTo"`
	ExpirationTimestamp string `json:"expirationTimestamp"`
	ResendTimestamp     string `json:"resendTimestamp"`
}
