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

// issueOTP stores a new password for signer i of c and queues its
// delivery, in one transaction. A password sent less than a minute ago
// refuses a new one (429).
func (s *Service) issueOTP(tx storage.Tx, c *contracts.Contract, i int, now time.Time) (*otpRecord, error) {
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

// errWrongOTP is returned from inside a decision transaction, which then
// rolls back; the failure is counted in a transaction of its own.
var errWrongOTP = problem.Invalid([]problem.FieldError{{Field: "otp", Code: "wrong_otp", Message: "the one-time password is wrong"}})

// checkOTP verifies code for signer id in the decision's transaction and
// consumes the password when it matches.
func (s *Service) checkOTP(tx storage.Tx, signerID, code string, now time.Time) error {
	if code == "" {
		return problem.Invalid([]problem.FieldError{{Field: "otp", Code: "required", Message: "otp is required: ask for a one-time password first"}})
	}
	rec, err := s.backend.OTP(tx, signerID)
	if err != nil {
		return err
	}
	switch {
	case rec == nil || rec.Hash == nil || !now.Before(rec.Expires):
		return problem.Invalid([]problem.FieldError{{Field: "otp", Code: "otp_expired", Message: "no valid one-time password: ask for a new one"}})
	case rec.Failures >= otpMaxFailures:
		return errOTPVoid
	}
	if !hmac.Equal(s.otpHash(signerID, rec.Salt, code), rec.Hash) {
		return errWrongOTP
	}
	return s.backend.DeleteOTP(tx, signerID)
}

// countOTPFailure records a wrong password of signer id. The fifth makes
// the password void (429); before that each is a 400 that says how many
// tries are left.
func (s *Service) countOTPFailure(ctx context.Context, signerID string) error {
	var out error
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		rec, err := s.backend.OTP(tx, signerID)
		if err != nil || rec == nil {
			out = errWrongOTP
			return err
		}
		rec.Failures++
		if rec.Failures >= otpMaxFailures {
			out = errOTPVoid
		} else {
			left := otpMaxFailures - rec.Failures
			out = problem.Invalid([]problem.FieldError{{Field: "otp", Code: "wrong_otp",
				Message: fmt.Sprintf("the one-time password is wrong; %d %s left", left, plural(left, "try", "tries"))}})
		}
		return s.backend.PutOTP(tx, signerID, rec)
	})
	if err != nil {
		return err
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
