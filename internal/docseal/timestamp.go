package docseal

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/digitorus/pkcs7"
	"github.com/digitorus/timestamp"
)

// ErrTimestampRejected marks a timestamp authority's reply that failed a
// check: a token over another hash, without the request's nonce, or
// signed by a certificate that is not a trusted timestamping one.
var ErrTimestampRejected = errors.New("the timestamp authority's reply was refused")

// maxTimestampReply bounds a reply read from the authority: a token with
// its chain is a few KiB.
const maxTimestampReply = 1 << 20

// timestamper asks the timestamp authority for a token on pdfsign's
// behalf, and checks the reply before pdfsign may embed it. pdfsign asks
// for a token itself, without a nonce and taking whatever comes back; so
// for each seal a loopback endpoint stands in for the authority (start):
// it asks the authority with a nonce of its own and hands pdfsign the
// reply only if every check passed.
type timestamper struct {
	url string
	// roots are the certificates an authority's must chain to; nil: the
	// system's.
	roots  *x509.CertPool
	client *http.Client
}

func newTimestamper(url string, roots *x509.CertPool) *timestamper {
	return &timestamper{url: url, roots: roots, client: &http.Client{
		Timeout: TimestampTimeout,
		// A redirect is not followed: the request goes where it was
		// configured to, or not at all.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// start runs the loopback endpoint for one seal. failure tells, once
// stop has run, why the authority's token was not handed over (nil if it
// was, or if none was asked for).
func (t *timestamper) start() (url string, failure func() error, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	var mu sync.Mutex
	var failed error
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply, err := t.ask(r.Context(), r.Body)
		if err != nil {
			mu.Lock()
			failed = err
			mu.Unlock()
			http.Error(w, "no token", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/timestamp-reply")
		_, _ = w.Write(reply)
	})}
	go func() { _ = srv.Serve(ln) }()
	failure = func() error {
		mu.Lock()
		defer mu.Unlock()
		return failed
	}
	return "http://" + ln.Addr().String(), failure, func() { _ = srv.Close() }, nil
}

// ask reads pdfsign's request from body, asks the authority for a token
// over the same hash with a nonce, and returns its reply once checked.
func (t *timestamper) ask(ctx context.Context, body io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, 64<<10))
	if err != nil {
		return nil, err
	}
	theirs, err := timestamp.ParseRequest(raw)
	if err != nil {
		return nil, fmt.Errorf("the seal's timestamp request: %w", err)
	}
	nonce, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, err
	}
	ours := &timestamp.Request{HashAlgorithm: theirs.HashAlgorithm, HashedMessage: theirs.HashedMessage, Certificates: true, Nonce: nonce}
	if raw, err = ours.Marshal(); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/timestamp-query")
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the authority answered %d", resp.StatusCode)
	}
	reply, err := io.ReadAll(io.LimitReader(resp.Body, maxTimestampReply))
	if err != nil {
		return nil, err
	}
	if err := t.check(reply, ours); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTimestampRejected, err)
	}
	return reply, nil
}

// check verifies reply against request: granted, over the request's
// hash, with its nonce, signed (the signature verified) by a certificate
// for timestamping that chains to the roots.
func (t *timestamper) check(reply []byte, request *timestamp.Request) error {
	ts, err := timestamp.ParseResponse(reply)
	if err != nil {
		return fmt.Errorf("unreadable or not granted: %w", err)
	}
	switch {
	case ts.HashAlgorithm != request.HashAlgorithm || !bytes.Equal(ts.HashedMessage, request.HashedMessage):
		return errors.New("its token is over another hash than the seal's")
	case ts.Nonce == nil || ts.Nonce.Cmp(request.Nonce) != 0:
		return errors.New("its token does not carry the request's nonce")
	}
	p7, err := pkcs7.Parse(ts.RawToken)
	if err != nil {
		return fmt.Errorf("its token: %w", err)
	}
	signer := p7.GetOnlySigner()
	if signer == nil {
		return errors.New("its token names no signing certificate")
	}
	// timestamp.Parse verified the signature with the certificates the
	// token carries: the signer's must now be a timestamping one that
	// the roots vouch for, at the token's time.
	if !slices.Contains(signer.ExtKeyUsage, x509.ExtKeyUsageTimeStamping) {
		return fmt.Errorf("its signer %q lacks the timeStamping extended key usage", signer.Subject.CommonName)
	}
	intermediates := x509.NewCertPool()
	for _, c := range p7.Certificates {
		intermediates.AddCert(c)
	}
	if _, err := signer.Verify(x509.VerifyOptions{Roots: t.roots, Intermediates: intermediates, CurrentTime: ts.Time,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageTimeStamping}}); err != nil {
		return fmt.Errorf("its signer %q: %w", signer.Subject.CommonName, err)
	}
	return nil
}
