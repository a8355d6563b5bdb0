package signing

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"github.com/keygate/keygate/internal/storage"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/contracts/contractpdf"
)

// complete runs in the transaction of the last signature, made at now by
// the request of origin by: it records the completion in the trail,
// renders the finalized and certificate PDFs, stores them as the
// contract's attachments, queues the watchers' completed and
// completed-contract and the finalized PDF for every signer who receives
// it, and drops the stored signatures, which the PDF now holds.
func (s *Service) complete(tx storage.Tx, c *contracts.Contract, doc *contracts.Document, now time.Time, by contracts.Origin) error {
	if err := s.record(tx, c, nil, by, TrailEvent{At: now, Kind: TrailCompleted}); err != nil {
		return err
	}
	trail, err := s.backend.Trail(tx, c.ID)
	if err != nil {
		return err
	}
	own, bySigner := certificateEvents(c, trail)
	in := contractpdf.Input{ContractID: c.ID, Name: c.Name, TemplateTitle: doc.Title, Body: doc.Body, Markup: doc.Markup,
		TemplateSource: c.TemplateSource, Created: c.CreationTimestamp, Events: own}
	for i := range c.Signers {
		sg := &c.Signers[i]
		method, data, ok, err := s.backend.Signature(tx, sg.ID)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("signing: the signature of signer " + sg.ID + " is missing")
		}
		ps := contractpdf.Signer{
			FullName: sg.FullName, Email: sg.Email, Phone: sg.Phone, Method: method,
			AppendSignatureMacro: sg.AppendSignatureMacro, Decision: sg.Decision,
			DecisionTime: sg.DecisionTimestamp, DecisionIP: sg.DecisionIP, Opened: sg.OpenedTimestamp,
			Events: bySigner[i],
		}
		if method == contracts.MethodRender {
			ps.TypedName = string(data)
		} else {
			ps.Signature = data
		}
		in.Signers = append(in.Signers, ps)
	}
	finalized, err := contractpdf.Finalized(in)
	if err != nil {
		return err
	}
	if finalized, err = s.sealDocument(tx, finalized, c); err != nil {
		return err
	}
	// The certificate names the finalized PDF as sealed: the file a
	// signer receives and anyone can check.
	sum := sha256.Sum256(finalized)
	certificate, err := contractpdf.Certificate(in, hex.EncodeToString(sum[:]))
	if err != nil {
		return err
	}
	if certificate, err = s.sealDocument(tx, certificate, c); err != nil {
		return err
	}
	base := fileBase(c.Name)
	if c.FinalizedPDF, err = s.store.PutAttachment(tx, c, base+"-signed.pdf", finalized); err != nil {
		return err
	}
	if c.CertificatePDF, err = s.store.PutAttachment(tx, c, base+"-certificate.pdf", certificate); err != nil {
		return err
	}

	pdf := notify.Attachment{Name: c.FinalizedPDF.FileName, MediaType: contracts.PDFMediaType, Data: finalized}
	if err := s.notifyWatchers(tx, c, KindCompleted, nil, nil); err != nil {
		return err
	}
	if err := s.notifyWatchers(tx, c, KindCompletedContract, nil, &pdf); err != nil {
		return err
	}
	for i := range c.Signers {
		sg := &c.Signers[i]
		if sg.ReceivesCompletedContract && sg.Email != "" {
			if err := s.outbox.Enqueue(tx, completedMessage(c, sg, pdf)); err != nil {
				return err
			}
		}
	}
	return s.forgetSigners(tx, c)
}

// sealDocument seals doc of c in tx, when a sealer is configured.
func (s *Service) sealDocument(tx storage.Tx, doc []byte, c *contracts.Contract) ([]byte, error) {
	if s.seal == nil {
		return doc, nil
	}
	return s.seal(tx, doc, c)
}

// fileBase makes a file name from a contract name: ASCII letters, digits,
// dots, hyphens and underscores, the rest as single hyphens, at most 60
// characters; "contract" if nothing is left.
func fileBase(name string) string {
	var b strings.Builder
	hyphen := false
	for _, r := range name {
		ok := r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		if !ok {
			if !hyphen && b.Len() > 0 {
				b.WriteByte('-')
			}
			hyphen = true
			continue
		}
		b.WriteRune(r)
		hyphen = false
		if b.Len() >= 60 {
			break
		}
	}
	out := strings.Trim(b.String(), "-.")
	if out == "" {
		return "contract"
	}
	return out
}
