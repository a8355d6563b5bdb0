package signing

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"github.com/keygate/keygate/internal/storage"
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/upstreams/contracts"
)

// One-time password rules (spec, Signing).
const (
	otpDigits      = 6
	otpValidity    = 10 * time.Minute
	otpResendAfter = 60 * time.Second
	otpMaxFailures = 5
)

// otpRecord is the stored form of a signer's password (Backend).
type otpRecord = OTPRecord

func (s *Service) otpHash(signerID string, salt []byte, code string) []byte {
	m := hmac.New(sha256.New, s.otpKey)
	m.Write([]byte(signerID))
	m.Write([]byte{0})
	m.Write(salt)
	m.Write([]byte(code))
	return m.Sum(nil)
}

// newCode draws a uniformly random code of otpDigits digits.
func newCode() string {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		panic("signing: crypto/rand failed: " + err.Error())
	}
	return fmt.Sprintf("%0*d", otpDigits, n.Int64())
}

// issueOTP stores a new password for signer i of c, queues its delivery
// and records it in the trail with by, the request's origin, in one
// transaction. A password sent less than a minute ago refuses a new one
// (429).
func (s *Service) issueOTP(tx storage.Tx, c *contracts.Contract, i int, now time.Time, by contracts.Origin) (*otpRecord, error) {
	sg := &c.Signers[i]
	old, err := s.backend.OTP(tx, sg.ID)
	if err != nil {
		return nil, err
	}
	if old != nil {
		if wait := old.Sent.Add(otpResendAfter).Sub(now); wait > 0 {
			return nil, tooSoon(wait)
		}
	}
	var salt [16]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, err
	}
	code := newCode()
	rec := &otpRecord{Hash: s.otpHash(sg.ID, salt[:], code), Salt: salt[:], Sent: now, Expires: now.Add(otpValidity)}
	if err := s.backend.PutOTP(tx, sg.ID, rec); err != nil {
		return nil, err
	}
	if err := s.outbox.Enqueue(tx, otpMessage(c, sg, code)); err != nil {
		return nil, err
	}
	sent := TrailEvent{At: now, Kind: TrailOTPSent, Channel: sg.OTPMethod, To: maskedAddress(sg, sg.OTPMethod)}
	if err := s.record(tx, c, sg, by, sent); err != nil {
		return nil, err
	}
	return rec, nil
}

// tooSoon is the 429 for a password asked again within a minute. The
// wait travels in the problem's detail; the handler sets Retry-After.
func tooSoon(wait time.Duration) *rateLimited {
	secs := int((wait + time.Second - 1) / time.Second)
	return &rateLimited{
		Details:    problem.New(http.StatusTooManyRequests, problem.CodeRateLimited, "a password was sent less than a minute ago; ask again in "+strconv.Itoa(secs)+" s"),
		retryAfter: secs,
	}
}

// rateLimited is a 429 with the seconds to wait, if known.
type rateLimited struct {
	*problem.Details
	retryAfter int
}

var errOTPVoid = &rateLimited{Details: problem.New(http.StatusTooManyRequests, problem.CodeRateLimited,
	"the one-time password is void after 5 wrong tries; ask for a new one")}

// errWrongOTP is a wrong password that verifyOTP has not counted: the
// password changed between verifyOTP and the decision (a resend).
var errWrongOTP = problem.Invalid([]problem.FieldError{{Field: "otp", Code: "wrong_otp", Message: "the one-time password is wrong"}})

// otpVerdict is what rec says of code at now: nil when it is the
// password, else the problem (errWrongOTP for a wrong one).
func (s *Service) otpVerdict(rec *OTPRecord, signerID, code string, now time.Time) error {
	switch {
	case code == "":
		return problem.Invalid([]problem.FieldError{{Field: "otp", Code: "required", Message: "otp is required: ask for a one-time password first"}})
	case rec == nil || rec.Hash == nil || !now.Before(rec.Expires):
		return problem.Invalid([]problem.FieldError{{Field: "otp", Code: "otp_expired", Message: "no valid one-time password: ask for a new one"}})
	case rec.Failures >= otpMaxFailures:
		return errOTPVoid
	case !hmac.Equal(s.otpHash(signerID, rec.Salt, code), rec.Hash):
		return errWrongOTP
	}
	return nil
}

// verifyOTP checks code for signer id, and counts it when wrong, in one
// transaction that holds the signer's password from the read to the
// count (Backend.OTP): tries in parallel, on one gateway instance or
// several, are checked one after the other, so no more than
// otpMaxFailures are ever checked. The fifth wrong one makes the password
// void (429); before that each is a 400 that says how many tries are
// left. A right one is consumed by the decision (checkOTP). A wrong one
// is recorded in c's trail with by, the request's origin.
func (s *Service) verifyOTP(ctx context.Context, c *contracts.Contract, signerID, code string, now time.Time, by contracts.Origin) error {
	var out error
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		rec, err := s.backend.OTP(tx, signerID)
		if err != nil {
			return err
		}
		if out = s.otpVerdict(rec, signerID, code, now); out != errWrongOTP {
			return nil
		}
		rec.Failures++
		left := otpMaxFailures - rec.Failures
		if left <= 0 {
			left, out = 0, errOTPVoid
		} else {
			out = problem.Invalid([]problem.FieldError{{Field: "otp", Code: "wrong_otp",
				Message: fmt.Sprintf("the one-time password is wrong; %d %s left", left, plural(left, "try", "tries"))}})
		}
		if err := s.backend.PutOTP(tx, signerID, rec); err != nil {
			return err
		}
		refused := TrailEvent{At: now, Kind: TrailOTPRefused, SignerID: signerID, TriesLeft: left, IP: by.IP, UserAgent: by.UserAgent}
		return s.backend.AppendTrail(tx, c.ID, &refused)
	})
	if err != nil {
		return err
	}
	return out
}

// checkOTP checks code again in the decision's transaction, after
// verifyOTP, and consumes the password.
func (s *Service) checkOTP(tx storage.Tx, signerID, code string, now time.Time) error {
	rec, err := s.backend.OTP(tx, signerID)
	if err != nil {
		return err
	}
	if err := s.otpVerdict(rec, signerID, code, now); err != nil {
		return err
	}
	return s.backend.DeleteOTP(tx, signerID)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
