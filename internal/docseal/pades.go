package docseal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/digitorus/pdf"
	"github.com/digitorus/pdfsign/sign"
	"github.com/digitorus/pkcs7"
	"github.com/digitorus/timestamp"
	"golang.org/x/crypto/ocsp"
)

// Level is the PAdES baseline level (ETSI EN 319 142-1) a document or a
// set-up reaches.
type Level string

const (
	// LevelNone: no PAdES baseline signature (a seal made before keygate
	// wrote them: adbe.pkcs7.detached with a signing-time).
	LevelNone Level = "none"
	// LevelBB: an ETSI.CAdES.detached signature with
	// signing-certificate-v2 and no signing-time.
	LevelBB Level = "B-B"
	// LevelBT: and a checked timestamp over the signature value.
	LevelBT Level = "B-T"
	// LevelBLT: and a /DSS holding the chain and the OCSP response or CRL
	// of the sealing certificate (and of any below the anchor).
	LevelBLT Level = "B-LT"
	// LevelBLTA: and a document timestamp (ETSI.RFC3161) over the whole
	// file, the /DSS included.
	LevelBLTA Level = "B-LTA"
)

// SealedWithoutValidationData: the seal is timestamped, but the chain's
// OCSP responses or CRLs could not be had (B-T), or the document
// timestamp failed (B-LT), so it stops short of B-LTA.
const SealedWithoutValidationData Outcome = "sealed_without_validation_data"

// oidTimestampToken is the id-aa-timeStampToken unsigned attribute.
var oidTimestampToken = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 2, 14}

// Level is the level this signer's set-up reaches when everything it
// calls answers: B-LTA with a timestamp authority and a chain that names
// where its revocation status is told, B-T with the authority alone,
// else B-B.
func (s *Signer) Level() Level {
	switch {
	case s.timestamps != nil && namesRevocation(s.cert):
		return LevelBLTA
	case s.timestamps != nil:
		return LevelBT
	}
	return LevelBB
}

// namesRevocation reports whether every certificate of c's chain below
// its anchor names an OCSP responder or a CRL: only then can a seal reach
// B-LT. A self-signed certificate, its own anchor, has nothing to name.
func namesRevocation(c *Certificate) bool {
	below := revocable(c)
	for _, cert := range below {
		if len(cert.OCSPServer) == 0 && len(cert.CRLDistributionPoints) == 0 {
			return false
		}
	}
	return len(below) > 0
}

// revocable is c's chain without its anchor: the certificates a relying
// party needs the revocation status of, each followed by its issuer.
func revocable(c *Certificate) []*x509.Certificate {
	chain := c.chain()
	return chain[:len(chain)-1]
}

// maxRevocationReply bounds an OCSP response or CRL read: a CRL of a
// small CA is KiB, of a public one a few MiB.
const maxRevocationReply = 8 << 20

// longTerm lifts doc, sealed with a checked timestamp (B-T), to B-LTA: a
// /DSS with the chain, the authority's certificates and the chain's
// revocation status fetched now, then a document timestamp over it all.
// When the document timestamp fails it returns the document at B-LT
// with the error; when the revocation status fails, nil.
// It calls OCSP responders, CRL locations and the timestamp authority:
// never inside a transaction.
func (s *Signer) longTerm(doc []byte) ([]byte, error) {
	seal, err := lastSignature(doc, "ETSI.CAdES.detached")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), TimestampTimeout)
	defer cancel()
	var dss sign.DSS
	addCert := func(c *x509.Certificate) {
		for _, have := range dss.Certs {
			if bytes.Equal(have, c.Raw) {
				return
			}
		}
		dss.Certs = append(dss.Certs, c.Raw)
	}
	chain := s.cert.chain()
	for _, c := range chain {
		addCert(c)
	}
	for i, c := range revocable(s.cert) {
		kind, raw, err := s.status(ctx, c, chain[i+1])
		if err != nil {
			return nil, fmt.Errorf("the revocation status of %q: %w", c.Subject.CommonName, err)
		}
		if kind == "ocsp" {
			dss.OCSPs = append(dss.OCSPs, raw)
		} else {
			dss.CRLs = append(dss.CRLs, raw)
		}
	}
	// The timestamp authority's chain, so that its token can be checked
	// from the file alone: the signer and the issuers above it among the
	// token's certificates, no other (the set is not signed, and what
	// else it holds is not the gateway's to vouch for). Its revocation
	// status is not fetched: B-LT does not need it, and the token names
	// the locations.
	for _, c := range seal.tokenChain() {
		addCert(c)
	}

	var withDSS bytes.Buffer
	rd := bytes.NewReader(doc)
	r, err := pdf.NewReader(rd, int64(len(doc)))
	if err != nil {
		return nil, err
	}
	if err := sign.AddDSS(rd, &withDSS, r, int64(len(doc)), dss); err != nil {
		return nil, fmt.Errorf("adding the /DSS: %w", err)
	}
	out, err := s.timestamped(func(tsa string) ([]byte, error) { return documentTimestamp(withDSS.Bytes(), tsa) })
	if err != nil {
		// B-LT: the validation data holds without the archive timestamp.
		return withDSS.Bytes(), fmt.Errorf("the document timestamp: %w", err)
	}
	return out, nil
}

// status is the revocation status of c, issued by issuer: the CRL the
// gateway signs itself for its self-made leaf, else what c's OCSP
// responder or CRL location says.
func (s *Signer) status(ctx context.Context, c, issuer *x509.Certificate) (kind string, raw []byte, err error) {
	if c == s.cert.Cert && s.cert.rootKey != nil && len(c.CRLDistributionPoints) > 0 {
		raw, err := s.cert.CRL(time.Now())
		return "crl", raw, err
	}
	return s.revocation.status(ctx, c, issuer)
}

// issuerIn is the certificate of certs that issued c, if not c itself.
func issuerIn(c *x509.Certificate, certs []*x509.Certificate) *x509.Certificate {
	for _, ca := range certs {
		if ca != c && !ca.Equal(c) && c.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

// documentTimestamp adds an ETSI.RFC3161 document timestamp from the
// authority at tsa over the whole of doc.
func documentTimestamp(doc []byte, tsa string) ([]byte, error) {
	rd := bytes.NewReader(doc)
	r, err := pdf.NewReader(rd, int64(len(doc)))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	err = sign.Sign(rd, &out, r, int64(len(doc)), sign.SignData{
		Signature: sign.SignDataSignature{CertType: sign.TimeStampSignature},
		TSA:       sign.TSA{URL: tsa},
	})
	if err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// revocationClient fetches the revocation status of the seal's chain.
type revocationClient struct{ client *http.Client }

func newRevocationClient() *revocationClient {
	return &revocationClient{client: &http.Client{
		Timeout:       TimestampTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// status is cert's revocation status from its issuer's OCSP responder
// (kind "ocsp", the DER response) or else its CRL ("crl", the DER list),
// checked: signed for issuer, current, and cert not revoked.
func (rc *revocationClient) status(ctx context.Context, cert, issuer *x509.Certificate) (kind string, raw []byte, err error) {
	var errs []error
	for _, url := range cert.OCSPServer {
		raw, err := rc.ocsp(ctx, url, cert, issuer)
		if err == nil {
			return "ocsp", raw, nil
		}
		errs = append(errs, err)
	}
	for _, url := range cert.CRLDistributionPoints {
		raw, err := rc.crl(ctx, url, cert, issuer)
		if err == nil {
			return "crl", raw, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return "", nil, errors.New("it names no OCSP responder and no CRL")
	}
	return "", nil, errors.Join(errs...)
}

func (rc *revocationClient) ocsp(ctx context.Context, url string, cert, issuer *x509.Certificate) ([]byte, error) {
	req, err := ocsp.CreateRequest(cert, issuer, nil)
	if err != nil {
		return nil, err
	}
	raw, err := rc.fetch(ctx, http.MethodPost, url, req, "application/ocsp-request")
	if err != nil {
		return nil, err
	}
	resp, err := ocsp.ParseResponseForCert(raw, cert, issuer)
	if err != nil {
		return nil, fmt.Errorf("the OCSP response of %s: %w", url, err)
	}
	now := time.Now()
	switch {
	case resp.Status != ocsp.Good:
		return nil, fmt.Errorf("%s says the certificate is not good (status %d)", url, resp.Status)
	case !resp.NextUpdate.IsZero() && now.After(resp.NextUpdate):
		return nil, fmt.Errorf("%s answered with a stale response", url)
	}
	return raw, nil
}

func (rc *revocationClient) crl(ctx context.Context, url string, cert, issuer *x509.Certificate) ([]byte, error) {
	raw, err := rc.fetch(ctx, http.MethodGet, url, nil, "")
	if err != nil {
		return nil, err
	}
	list, err := x509.ParseRevocationList(raw)
	if err != nil {
		return nil, fmt.Errorf("the CRL of %s: %w", url, err)
	}
	if err := list.CheckSignatureFrom(issuer); err != nil {
		return nil, fmt.Errorf("the CRL of %s is not its issuer's: %w", url, err)
	}
	if !list.NextUpdate.IsZero() && time.Now().After(list.NextUpdate) {
		return nil, fmt.Errorf("the CRL of %s is stale", url)
	}
	for _, e := range list.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(cert.SerialNumber) == 0 {
			return nil, fmt.Errorf("the CRL of %s lists the certificate as revoked", url)
		}
	}
	return raw, nil
}

func (rc *revocationClient) fetch(ctx context.Context, method, url string, body []byte, contentType string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := rc.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %d", url, resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxRevocationReply))
}

// signature is one signature field's value as a verifier reads it.
type signature struct {
	subFilter string
	// contents is the /Contents string's bytes, padding included.
	contents  []byte
	byteRange []int64
	p7        *pkcs7.PKCS7
}

// signatures reads the signature fields of doc, in the order of the
// form's /Fields (the order they were added). For documents this
// gateway wrote: pdf's reader is not hardened against hostile files.
func signatures(doc []byte) (sigs []signature, root pdf.Value, err error) {
	defer func() {
		if p := recover(); p != nil {
			sigs, err = nil, fmt.Errorf("reading the PDF: %v", p)
		}
	}()
	r, err := pdf.NewReader(bytes.NewReader(doc), int64(len(doc)))
	if err != nil {
		return nil, pdf.Value{}, err
	}
	root = r.Trailer().Key("Root")
	fields := root.Key("AcroForm").Key("Fields")
	for i := 0; i < fields.Len(); i++ {
		v := fields.Index(i).Key("V")
		if v.Key("Type").Name() != "Sig" && v.Key("Type").Name() != "DocTimeStamp" {
			continue
		}
		s := signature{subFilter: v.Key("SubFilter").Name(), contents: []byte(v.Key("Contents").RawString())}
		br := v.Key("ByteRange")
		for j := 0; j < br.Len(); j++ {
			s.byteRange = append(s.byteRange, br.Index(j).Int64())
		}
		if der := s.firstDER(); der != nil {
			s.p7, _ = pkcs7.Parse(der)
		}
		sigs = append(sigs, s)
	}
	return sigs, root, nil
}

// lastSignature is the last signature of doc with subFilter.
func lastSignature(doc []byte, subFilter string) (*signature, error) {
	sigs, _, err := signatures(doc)
	if err != nil {
		return nil, err
	}
	for i := len(sigs) - 1; i >= 0; i-- {
		if sigs[i].subFilter == subFilter && sigs[i].p7 != nil {
			return &sigs[i], nil
		}
	}
	return nil, fmt.Errorf("no %s signature", subFilter)
}

// token is the timestamp over the signature value this signature
// carries, if any, checked to be over it.
func (s *signature) token() *timestamp.Timestamp {
	if s.p7 == nil || len(s.p7.Signers) != 1 {
		return nil
	}
	signer := s.p7.Signers[0]
	for _, a := range signer.UnauthenticatedAttributes {
		if !a.Type.Equal(oidTimestampToken) {
			continue
		}
		ts, err := timestamp.Parse(a.Value.Bytes)
		if err != nil {
			return nil
		}
		h := ts.HashAlgorithm.New()
		h.Write(signer.EncryptedDigest)
		if !bytes.Equal(h.Sum(nil), ts.HashedMessage) {
			return nil
		}
		return ts
	}
	return nil
}

// maxTokenChain bounds the timestamp authority's chain copied into the
// /DSS.
const maxTokenChain = 4

// tokenChain is the chain of the signature's timestamp token: its
// signer's certificate and each issuer above it that the token carries,
// at most maxTokenChain.
func (s *signature) tokenChain() []*x509.Certificate {
	ts := s.token()
	if ts == nil {
		return nil
	}
	p7, err := pkcs7.Parse(ts.RawToken)
	if err != nil {
		return nil
	}
	at := p7.GetOnlySigner()
	var chain []*x509.Certificate
	for at != nil && len(chain) < maxTokenChain {
		chain = append(chain, at)
		at = issuerIn(at, p7.Certificates)
	}
	return chain
}

// coversAll reports whether the signature's byte range covers doc but
// its own /Contents.
func (s *signature) coversAll(doc []byte) bool {
	b := s.byteRange
	return len(b) == 4 && b[0] == 0 && b[2]+b[3] == int64(len(doc))
}

// hashedRanges is the SHA-256 of the bytes the signature covers, or nil.
func (s *signature) hashedRanges(doc []byte) []byte {
	b := s.byteRange
	if len(b) != 4 || b[0] != 0 || b[1] < 0 || b[2] < b[1] || b[3] < 0 || b[2]+b[3] > int64(len(doc)) {
		return nil
	}
	h := sha256.New()
	h.Write(doc[:b[1]])
	h.Write(doc[b[2] : b[2]+b[3]])
	return h.Sum(nil)
}

// LevelOf reads the PAdES baseline level of doc, a document this gateway
// sealed (found by its hash: the reader is not meant for hostile
// files), from the file alone: its first ETSI.CAdES.detached signature
// without signing-time (B-B); with a timestamp over its value (B-T); a
// /DSS holding the revocation status of its certificate (B-LT); a
// document timestamp over the whole file, over the bytes it covers
// (B-LTA). A file the reader cannot read is LevelNone.
func LevelOf(doc []byte) (level Level) {
	defer func() {
		// The reader reads streams lazily, after signatures returned.
		if p := recover(); p != nil {
			level = LevelNone
		}
	}()
	sigs, root, err := signatures(doc)
	if err != nil {
		return LevelNone
	}
	var seal *signature
	for i := range sigs {
		if sigs[i].subFilter == "ETSI.CAdES.detached" && sigs[i].p7 != nil {
			seal = &sigs[i]
			break
		}
	}
	if seal == nil {
		return LevelNone
	}
	var signingTime time.Time
	if seal.p7.UnmarshalSignedAttribute(pkcs7.OIDAttributeSigningTime, &signingTime) == nil {
		return LevelNone
	}
	if seal.token() == nil {
		return LevelBB
	}
	if !holdsStatusOf(root.Key("DSS"), seal.p7.GetOnlySigner()) {
		return LevelBT
	}
	last := sigs[len(sigs)-1]
	if last.subFilter != "ETSI.RFC3161" || !last.coversAll(doc) {
		return LevelBLT
	}
	ts, err := timestamp.Parse(last.firstDER())
	if err != nil || ts.HashAlgorithm.String() != "SHA-256" || !bytes.Equal(ts.HashedMessage, last.hashedRanges(doc)) {
		return LevelBLT
	}
	return LevelBLTA
}

// holdsStatusOf reports whether dss holds an OCSP response about cert,
// or a CRL of its issuer that does not list it.
func holdsStatusOf(dss pdf.Value, cert *x509.Certificate) bool {
	if cert == nil {
		return false
	}
	streams := func(name string) (out [][]byte) {
		list := dss.Key(name)
		for i := 0; i < list.Len(); i++ {
			if raw, err := io.ReadAll(io.LimitReader(list.Index(i).Reader(), maxRevocationReply)); err == nil {
				out = append(out, raw)
			}
		}
		return out
	}
	for _, raw := range streams("OCSPs") {
		if resp, err := ocsp.ParseResponse(raw, nil); err == nil && resp.SerialNumber.Cmp(cert.SerialNumber) == 0 {
			return true
		}
	}
	for _, raw := range streams("CRLs") {
		list, err := x509.ParseRevocationList(raw)
		if err != nil || !bytes.Equal(list.RawIssuer, cert.RawIssuer) {
			continue
		}
		revoked := false
		for _, e := range list.RevokedCertificateEntries {
			revoked = revoked || e.SerialNumber.Cmp(cert.SerialNumber) == 0
		}
		if !revoked {
			return true
		}
	}
	return false
}

// firstDER is the DER element the /Contents starts with (the rest is
// padding).
func (s *signature) firstDER() []byte { return firstDER(s.contents) }

// firstDER is the first DER element of b, nil if there is none: a
// signature is padded with zeros to its reserved room.
func firstDER(b []byte) []byte {
	var first asn1.RawValue
	if _, err := asn1.Unmarshal(b, &first); err != nil {
		return nil
	}
	return first.FullBytes
}
