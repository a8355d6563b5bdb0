package signing

import (
	"context"
	"net/http"
	"time"

	"github.com/keygate/keygate/internal/storage"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/upstreams/contracts"
)

// decision is what a signer submits (spec, Signing).
type decision struct {
	Decision string
	OTP      string
	Method   string
	// Signature is the image bytes for upload and draw.
	Signature []byte
	// TypedName is the signature for render.
	TypedName string
	Reason    string
}

// session is a signer's view of their contract at one moment.
type session struct {
	c   *contracts.Contract
	i   int
	doc *contracts.Document
}

func (ss *session) signer() *contracts.Signer { return &ss.c.Signers[ss.i] }

// conflict is the 409 of a signer who may not act now.
func conflict(detail string) error {
	return problem.New(http.StatusConflict, problem.CodeConflict, detail)
}

// mayAct says why signer i of c cannot decide at now, or nil: a final
// contract, a signer who decided, or, in sequential signing, an earlier
// signer who has not decided yet.
func mayAct(c *contracts.Contract, i int, now time.Time) error {
	if st := c.EffectiveStatus(now); st.Final() {
		return conflict("the contract is " + string(st) + " and takes no more decisions")
	}
	if d := c.Signers[i].Decision; d != "" {
		return conflict("you have already " + d + " this contract")
	}
	if w := waitingFor(c, i); w >= 0 {
		return conflict("it is not your turn yet: " + c.Signers[w].FullName + " decides first")
	}
	return nil
}

// waitingFor is, in sequential signing, the first undecided signer before
// signer i, or -1 if it is i's turn (or signing is not sequential).
func waitingFor(c *contracts.Contract, i int) int {
	if !c.SequentialSigning {
		return -1
	}
	for j := 0; j < i; j++ {
		if c.Signers[j].Decision == "" {
			return j
		}
	}
	return -1
}

// open finds the signer of token and, for a visit (by not nil), records
// their first opening of the page (with the watchers' "opened" and the
// trail's) while the contract is still open. A reopening costs no write.
func (s *Service) open(ctx context.Context, token string, by *contracts.Origin) (*session, error) {
	// The contract, the signer and the document in one read.
	c, i, doc, err := s.store.SigningPage(ctx, token)
	if err != nil {
		return nil, err
	}
	if by != nil && c.Signers[i].OpenedTimestamp.IsZero() && !c.Status.Final() {
		signerID := c.Signers[i].ID
		now := s.now()
		c, err = s.store.Update(ctx, c.ID, func(tx storage.Tx, c *contracts.Contract) error {
			j := c.SignerByID(signerID)
			if j < 0 {
				return problem.NotFound("no signing link with this token")
			}
			sg := &c.Signers[j]
			if !sg.OpenedTimestamp.IsZero() || c.EffectiveStatus(now).Final() {
				return nil
			}
			sg.OpenedTimestamp = now
			if err := s.record(tx, c, sg, *by, TrailEvent{At: now, Kind: TrailOpened}); err != nil {
				return err
			}
			return s.notifyWatchers(tx, c, KindOpened, sg, nil)
		})
		if err != nil {
			return nil, err
		}
		if i = c.SignerByID(signerID); i < 0 {
			return nil, problem.NotFound("no signing link with this token")
		}
	}
	return &session{c: c, i: i, doc: doc}, nil
}

// requestOTP sends signer of token a new one-time password by their
// otpMethod: 409 for none or when they cannot decide now, 429 within a
// minute of the last one.
func (s *Service) requestOTP(ctx context.Context, token string, by contracts.Origin) (*session, *otpRecord, error) {
	c, i, err := s.store.BySigningToken(ctx, token)
	if err != nil {
		return nil, nil, err
	}
	if c.Signers[i].OTPMethod == contracts.OTPNone {
		return nil, nil, conflict("this signer needs no one-time password")
	}
	now := s.now()
	if err := mayAct(c, i, now); err != nil {
		return nil, nil, err
	}
	var rec *otpRecord
	err = s.db.Update(ctx, func(tx storage.Tx) (err error) {
		rec, err = s.issueOTP(tx, c, i, now, by)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return &session{c: c, i: i}, rec, nil
}

// decide records signer of token's decision with everything it causes,
// in one transaction: the status move, the watchers' notifications, the
// next signer's invitation in sequential signing and, when the last signer
// signs, the completion; and each step in the trail, with by, the
// request's origin. A completion's documents are made and sealed after
// that transaction, in the background (sealSoon): the signer is answered
// at once, and no lock waits on a timestamp authority.
func (s *Service) decide(ctx context.Context, token string, req *decisionInput, by contracts.Origin) (*session, error) {
	c, i, doc, err := s.store.SigningPage(ctx, token)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if err := mayAct(c, i, now); err != nil {
		return nil, err
	}
	in, err := validateDecision(req, &c.Signers[i])
	if err != nil {
		return nil, err
	}
	signerID := c.Signers[i].ID
	if c.Signers[i].OTPMethod != contracts.OTPNone {
		if err := s.verifyOTP(ctx, c, signerID, in.OTP, now, by); err != nil {
			return nil, err
		}
	}
	data := in.Signature
	if in.Method == contracts.MethodRender {
		data = []byte(in.TypedName)
	}
	completed := false
	c, err = s.store.Update(ctx, c.ID, func(tx storage.Tx, c *contracts.Contract) error {
		var err error
		completed, err = s.recordDecision(tx, c, signerID, in, data, now, by)
		return err
	})
	if err != nil {
		return nil, err
	}
	if completed {
		s.sealSoon(c.ID)
	}
	ss := &session{c: c, i: c.SignerByID(signerID), doc: doc}
	if ss.i < 0 {
		return nil, problem.NotFound("no signing link with this token")
	}
	return ss, nil
}

// recordDecision records in tx the decision of signer signerID of c (in,
// with its signature data) and what it causes; completed is set when it
// completes c.
func (s *Service) recordDecision(tx storage.Tx, c *contracts.Contract, signerID string, in *decision, data []byte,
	now time.Time, by contracts.Origin) (completed bool, err error) {
	j := c.SignerByID(signerID)
	if j < 0 {
		return false, problem.NotFound("no signing link with this token")
	}
	if err := mayAct(c, j, now); err != nil {
		return false, err
	}
	sg := &c.Signers[j]
	if sg.OTPMethod != contracts.OTPNone {
		if err := s.checkOTP(tx, sg.ID, in.OTP, now); err != nil {
			return false, err
		}
		if err := s.record(tx, c, sg, by, TrailEvent{At: now, Kind: TrailOTPAccepted}); err != nil {
			return false, err
		}
	}
	sg.Decision = in.Decision
	sg.DecisionTimestamp = now
	sg.DecisionIP = by.IP
	if in.Decision == contracts.DecisionRejected {
		sg.DecisionReason = in.Reason
		if err := s.record(tx, c, sg, by, TrailEvent{At: now, Kind: TrailRejected}); err != nil {
			return false, err
		}
		if err := s.notifyWatchers(tx, c, KindRejected, sg, nil); err != nil {
			return false, err
		}
		return false, s.forgetSigners(tx, c)
	}
	if err := s.backend.PutSignature(tx, sg.ID, in.Method, data); err != nil {
		return false, err
	}
	if err := s.record(tx, c, sg, by, TrailEvent{At: now, Kind: TrailSigned, Method: in.Method}); err != nil {
		return false, err
	}
	if err := s.notifyWatchers(tx, c, KindSigned, sg, nil); err != nil {
		return false, err
	}
	if c.DecidedStatus() == contracts.StatusSigned {
		return true, s.complete(tx, c, now, by)
	}
	if c.SequentialSigning && j+1 < len(c.Signers) {
		return false, s.invite(tx, c, j+1, now, by)
	}
	return false, nil
}
