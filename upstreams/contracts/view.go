package contracts

import (
	"time"
)

// timestampLayout is RFC 3339 in UTC with milliseconds, as docs/clients.md shows
// every timestamp: 2026-11-22T10:15:00.000Z.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timestampLayout)
}

// contractView is the Contract Object of the API. Absent values are left
// out, never null.
type contractView struct {
	ID                  string       `json:"id"`
	TemplateID          string       `json:"templateId"`
	TemplateSource      string       `json:"templateSource,omitempty"`
	CollectionID        string       `json:"collectionId"`
	Name                string       `json:"name"`
	CreatedByID         string       `json:"createdById"`
	CreationTimestamp   string       `json:"creationTimestamp"`
	ExpirationTimestamp string       `json:"expirationTimestamp"`
	SequentialSigning   bool         `json:"sequentialSigning"`
	ArchivalTimestamp   string       `json:"archivalTimestamp,omitempty"`
	Status              Status       `json:"status"`
	Signers             []signerView `json:"signers,omitempty"`
	Watchers            []Watcher    `json:"watchers,omitempty"`
	// DocumentStatus is being_sealed, then sealed, once every signer
	// signed: the attachments appear when it is sealed.
	DocumentStatus string          `json:"documentStatus,omitempty"`
	FinalizedPDF   *attachmentView `json:"finalizedPdf,omitempty"`
	CertificatePDF *attachmentView `json:"certificatePdf,omitempty"`
}

type signerView struct {
	ID                        string   `json:"id"`
	FullName                  string   `json:"fullName"`
	AccessKind                string   `json:"accessKind"`
	Email                     string   `json:"email,omitempty"`
	Phone                     string   `json:"phone,omitempty"`
	OTPMethod                 string   `json:"otpMethod"`
	SigningMethods            []string `json:"signerSigningMethods"`
	AppendSignatureMacro      bool     `json:"appendSignatureMacro"`
	ReceivesCompletedContract bool     `json:"receivesCompletedContract"`
	OpenedTimestamp           string   `json:"openedTimestamp,omitempty"`
	Decision                  string   `json:"decision,omitempty"`
	DecisionTimestamp         string   `json:"decisionTimestamp,omitempty"`
	DecisionIP                string   `json:"decisionIp,omitempty"`
	AccessURL                 string   `json:"accessUrl,omitempty"`
}

type attachmentView struct {
	Attachment
	URL string `json:"url"`
}

// searchPage is the search response.
type searchPage struct {
	TotalCount int            `json:"totalCount"`
	Contracts  []contractView `json:"contracts,omitempty"`
}

// view renders c. detail adds signers and watchers (get and create);
// viewer is the calling key's owner, who sees the signing links only if
// they created the contract.
func (s *Store) view(c *Contract, detail bool, viewer string) (contractView, error) {
	v := contractView{
		ID:                  c.ID,
		TemplateID:          c.TemplateID,
		TemplateSource:      c.TemplateSource,
		CollectionID:        c.CollectionID,
		Name:                c.Name,
		CreatedByID:         c.CreatedByID,
		CreationTimestamp:   formatTime(c.CreationTimestamp),
		ExpirationTimestamp: formatTime(c.ExpirationTimestamp),
		SequentialSigning:   c.SequentialSigning,
		ArchivalTimestamp:   formatTime(c.ArchivalTimestamp),
		Status:              c.Status,
		DocumentStatus:      c.DocumentStatus(),
		FinalizedPDF:        attachmentOf(c, c.FinalizedPDF),
		CertificatePDF:      attachmentOf(c, c.CertificatePDF),
	}
	if !detail {
		return v, nil
	}
	v.Watchers = c.Watchers
	v.Signers = make([]signerView, len(c.Signers))
	for i := range c.Signers {
		sg := &c.Signers[i]
		sv := signerView{
			ID:                        sg.ID,
			FullName:                  sg.FullName,
			AccessKind:                sg.AccessKind,
			Email:                     sg.Email,
			Phone:                     sg.Phone,
			OTPMethod:                 sg.OTPMethod,
			SigningMethods:            sg.SigningMethods,
			AppendSignatureMacro:      sg.AppendSignatureMacro,
			ReceivesCompletedContract: sg.ReceivesCompletedContract,
			OpenedTimestamp:           formatTime(sg.OpenedTimestamp),
			Decision:                  sg.Decision,
			DecisionTimestamp:         formatTime(sg.DecisionTimestamp),
			DecisionIP:                sg.DecisionIP,
		}
		if viewer == c.CreatedByID {
			u, err := s.AccessURL(c, i)
			if err != nil {
				return v, err
			}
			sv.AccessURL = u
		}
		v.Signers[i] = sv
	}
	return v, nil
}

func attachmentOf(c *Contract, a *Attachment) *attachmentView {
	if a == nil {
		return nil
	}
	return &attachmentView{Attachment: *a, URL: Prefix + "/" + c.ID + "/attachments/" + a.ID}
}
