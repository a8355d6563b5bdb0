package signing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/storage"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/contracts/contractpdf"
)

// completion is the documents of a contract's completion, made and
// sealed before its transaction (prepareCompletion): rendering a 1 MiB
// text and asking a timestamp authority hold no lock. They are used only
// if the transaction finds the contract as they assumed it (fits).
type completion struct {
	finalized, certificate []byte
	// trail is how many trail events the certificate lists, the
	// completion's own included; signers is each signer's state as the
	// documents show it.
	trail   int
	signers []signerState
}

// signerState is what of a signer the documents show and another request
// could change meanwhile; times as Unix milliseconds, the precision they
// are stored with, so that a time read back compares equal whatever its
// location or monotonic reading.
type signerState struct {
	opened, decided int64
	decision, ip    string
}

func signerStates(c *contracts.Contract) []signerState {
	out := make([]signerState, len(c.Signers))
	for i := range c.Signers {
		sg := &c.Signers[i]
		out[i] = signerState{opened: sg.OpenedTimestamp.UnixMilli(), decided: sg.DecisionTimestamp.UnixMilli(), decision: sg.Decision, ip: sg.DecisionIP}
	}
	return out
}

// errStaleCompletion ends a completion's transaction whose contract is not
// as its documents assumed (another request of the signer's changed its
// trail meanwhile): the decision is made again, documents and all.
var errStaleCompletion = errors.New("signing: the contract changed while its documents were made")

// prepareCompletion makes the documents that c carries once signer i
// signs with method and data at now, by the request of origin by, if that
// completes it; nil otherwise. It reads the trail and the other
// signatures in a read transaction of its own and adds the events the
// decision's transaction will record, in its order.
func (s *Service) prepareCompletion(ctx context.Context, c *contracts.Contract, doc *contracts.Document, i int, method string, data []byte,
	now time.Time, by contracts.Origin) (*completion, error) {
	after := *c
	after.Signers = slices.Clone(c.Signers)
	sg := &after.Signers[i]
	sg.Decision, sg.DecisionTimestamp, sg.DecisionIP = contracts.DecisionSigned, now, by.IP
	if after.DecidedStatus() != contracts.StatusSigned {
		return nil, nil
	}
	var trail []TrailEvent
	signatures := make([]signature, len(after.Signers))
	err := s.db.View(ctx, func(tx storage.Tx) error {
		var err error
		if trail, err = s.backend.Trail(tx, c.ID); err != nil {
			return err
		}
		for j := range after.Signers {
			if j == i {
				signatures[j] = signature{method: method, data: data}
				continue
			}
			m, d, ok, err := s.backend.Signature(tx, after.Signers[j].ID)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("signing: the signature of signer " + after.Signers[j].ID + " is missing")
			}
			signatures[j] = signature{method: m, data: d}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// What the decision's transaction records, in its order (decide).
	stamp := func(e TrailEvent, signer *contracts.Signer) TrailEvent {
		if signer != nil {
			e.SignerID = signer.ID
		}
		e.IP, e.UserAgent = by.IP, by.UserAgent
		return e
	}
	if sg.OTPMethod != contracts.OTPNone {
		trail = append(trail, stamp(TrailEvent{At: now, Kind: TrailOTPAccepted}, sg))
	}
	trail = append(trail, stamp(TrailEvent{At: now, Kind: TrailSigned, Method: method}, sg),
		stamp(TrailEvent{At: now, Kind: TrailCompleted}, nil))
	done := &completion{trail: len(trail), signers: signerStates(&after)}
	if done.finalized, done.certificate, err = s.render(&after, doc, trail, signatures); err != nil {
		return nil, err
	}
	return done, nil
}

// fits reports whether c, in the completion's transaction with its
// events recorded, is the contract the documents were made for.
func (done *completion) fits(tx storage.Tx, s *Service, c *contracts.Contract) (bool, error) {
	trail, err := s.backend.Trail(tx, c.ID)
	if err != nil {
		return false, err
	}
	return len(trail) == done.trail && slices.Equal(signerStates(c), done.signers), nil
}

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
// the request of origin by, with the documents made for it: it records
// the completion in the trail, checks that the documents fit the
// contract (errStaleCompletion if not), stores them as the contract's
// attachments (and in the index of sealed documents), queues the
// watchers' completed and completed-contract and the finalized PDF for
// every signer who receives it, and drops the stored signatures, which
// the PDF now holds.
func (s *Service) complete(tx storage.Tx, c *contracts.Contract, done *completion, now time.Time, by contracts.Origin) error {
	if err := s.record(tx, c, nil, by, TrailEvent{At: now, Kind: TrailCompleted}); err != nil {
		return err
	}
	if done == nil {
		return errStaleCompletion
	}
	if ok, err := done.fits(tx, s, c); err != nil || !ok {
		if err == nil {
			err = errStaleCompletion
		}
		return err
	}
	finalized, certificate := done.finalized, done.certificate
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
