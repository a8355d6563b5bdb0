package signing

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/storage"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/contracts/contractpdf"
)

// signature is a signer's signature as stored: its method and data.
type signature struct {
	method string
	data   []byte
}

// render makes c's finalized PDF, which ends with the certificate of
// completion under its one seal, and the certificate's own PDF from its
// document, trail and signatures, and seals each (Config.Seal, which may
// call a timestamp authority: never inside a transaction).
func (s *Service) render(c *contracts.Contract, doc *contracts.Document, trail []TrailEvent, signatures []signature) (finalized, certificate []byte, err error) {
	own, bySigner := certificateEvents(c, trail)
	in := contractpdf.Input{ContractID: c.ID, Name: c.Name, TemplateTitle: doc.Title, Body: doc.Body, Markup: doc.Markup,
		TemplateSource: c.TemplateSource, Created: c.CreationTimestamp, Events: own}
	for i := range c.Signers {
		sg := &c.Signers[i]
		ps := contractpdf.Signer{
			FullName: sg.FullName, Email: sg.Email, Phone: sg.Phone, Method: signatures[i].method,
			AppendSignatureMacro: sg.AppendSignatureMacro, Decision: sg.Decision,
			DecisionTime: sg.DecisionTimestamp, DecisionIP: sg.DecisionIP, Opened: sg.OpenedTimestamp,
			Events: bySigner[i],
		}
		if signatures[i].method == contracts.MethodRender {
			ps.TypedName = string(signatures[i].data)
		} else {
			ps.Signature = signatures[i].data
		}
		in.Signers = append(in.Signers, ps)
	}
	if finalized, err = contractpdf.Finalized(in); err != nil {
		return nil, nil, err
	}
	if finalized, err = s.sealDocument(finalized, c); err != nil {
		return nil, nil, err
	}
	// The certificate's own PDF names the finalized PDF as sealed: the
	// file a signer receives and anyone can check, whose own pages
	// cannot hold its hash.
	sum := sha256.Sum256(finalized)
	if certificate, err = contractpdf.Certificate(in, hex.EncodeToString(sum[:])); err != nil {
		return nil, nil, err
	}
	if certificate, err = s.sealDocument(certificate, c); err != nil {
		return nil, nil, err
	}
	return finalized, certificate, nil
}

// complete runs in the transaction of the last signature, made at now by
// the request of origin by: it records the completion in the trail,
// queues the contract's documents to be made and sealed once the
// transaction has committed (sealing.go), and queues the watchers'
// "completed". The signatures stay stored until the sealed documents
// hold them.
func (s *Service) complete(tx storage.Tx, c *contracts.Contract, now time.Time, by contracts.Origin) error {
	if err := s.record(tx, c, nil, by, TrailEvent{At: now, Kind: TrailCompleted}); err != nil {
		return err
	}
	if err := s.backend.QueueSeal(tx, c.ID, now); err != nil {
		return err
	}
	return s.notifyWatchers(tx, c, KindCompleted, nil, nil)
}

// storeDocuments runs in the transaction that ends c's sealing, with its
// sealed documents: it stores them as the contract's attachments (and in
// the index of sealed documents), queues the watchers'
// completed-contract and the finalized PDF for every signer who receives
// it, drops the stored signatures, which the PDF now holds, and takes c
// off the queue.
func (s *Service) storeDocuments(tx storage.Tx, c *contracts.Contract, finalized, certificate []byte) error {
	if s.sealed != nil {
		for _, d := range [][]byte{finalized, certificate} {
			if err := s.sealed(tx, d, c); err != nil {
				return err
			}
		}
	}
	base := fileBase(c.Name)
	var err error
	if c.FinalizedPDF, err = s.store.PutAttachment(tx, c, base+"-signed.pdf", finalized); err != nil {
		return err
	}
	if c.CertificatePDF, err = s.store.PutAttachment(tx, c, base+"-certificate.pdf", certificate); err != nil {
		return err
	}
	pdf := notify.Attachment{Name: c.FinalizedPDF.FileName, MediaType: contracts.PDFMediaType, Data: finalized}
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
	if err := s.forgetSigners(tx, c); err != nil {
		return err
	}
	return s.backend.Sealed(tx, c.ID)
}

// sealDocument seals doc of c, when a sealer is configured.
func (s *Service) sealDocument(doc []byte, c *contracts.Contract) ([]byte, error) {
	if s.seal == nil {
		return doc, nil
	}
	return s.seal(doc, c)
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
