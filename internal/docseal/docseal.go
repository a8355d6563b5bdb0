// Package docseal seals PDFs with a PAdES baseline signature (an
// incremental update, ETSI.CAdES.detached, made by copies of
// digitorus/pdfsign and digitorus/pkcs7 in third_party), up to B-LTA
// (pades.go), with the operator's PKCS#12 certificate or one the gateway
// makes once. It knows nothing of Caddy or of contracts.
package docseal

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/digitorus/pdf"
	"github.com/digitorus/pdfsign/sign"
	"github.com/digitorus/pkcs7"
	"software.sslmate.com/src/go-pkcs12"
)

// Certificate is what seals: the certificate, the chain above it (empty
// when self-signed) and its private key.
type Certificate struct {
	Cert  *x509.Certificate
	Chain []*x509.Certificate
	Key   crypto.Signer
	// SelfMade is set for the certificate the gateway made itself.
	SelfMade bool
	// rootKey is the self-made root's key, kept to issue a next leaf.
	rootKey crypto.Signer
}

// Fingerprint is the SHA-256 of the certificate's DER, in hex.
func (c *Certificate) Fingerprint() string { return FingerprintOf(c.Cert) }

// PEM is the certificate and its chain in PEM.
func (c *Certificate) PEM() []byte { return PEMOf(c.chain()...) }

// chain is the certificate followed by its chain, up to the anchor.
func (c *Certificate) chain() []*x509.Certificate {
	return append([]*x509.Certificate{c.Cert}, c.Chain...)
}

// FingerprintOf is the SHA-256 of cert's DER, in hex.
func FingerprintOf(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// PEMOf is certs in PEM, in order.
func PEMOf(certs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, cert := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	}
	return b.Bytes()
}

// LoadPKCS12 reads a PKCS#12 file (OpenSSL 3's default AES and PBKDF2
// included) with its password: the certificate, its chain and its key,
// which must be able to sign.
func LoadPKCS12(data []byte, password string) (*Certificate, error) {
	key, cert, chain, err := pkcs12.DecodeChain(data, password)
	if err != nil {
		return nil, fmt.Errorf("reading the PKCS#12 file: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("the PKCS#12 file's key cannot sign")
	}
	if !publicKeysMatch(cert.PublicKey, signer.Public()) {
		return nil, errors.New("the PKCS#12 file's key is not the key of its certificate")
	}
	// The file may list its chain in any order (root first is common):
	// each certificate is followed by its issuer from here on.
	chain = orderChain(cert, chain)
	if err := CheckCertificate(cert, time.Now()); err != nil {
		return nil, err
	}
	return &Certificate{Cert: cert, Chain: chain, Key: signer}, nil
}

// orderChain is certs ordered from leaf's issuer up, each followed by
// its own issuer; certificates that issued none of them come last.
func orderChain(leaf *x509.Certificate, certs []*x509.Certificate) []*x509.Certificate {
	rest := slices.Clone(certs)
	var out []*x509.Certificate
	for at := issuerIn(leaf, rest); at != nil; at = issuerIn(at, rest) {
		out = append(out, at)
		rest = slices.DeleteFunc(rest, at.Equal)
	}
	return append(out, rest...)
}

// CheckCertificate tells what keeps cert from sealing at now: outside its
// validity, or a key usage that allows neither digitalSignature nor
// nonRepudiation (a certificate without the extension may sign: RFC 5280
// puts no limit then). Every verifier refuses a seal such a certificate
// made, so the gateway refuses to start with it.
func CheckCertificate(cert *x509.Certificate, now time.Time) error {
	const day = "2 January 2006 15:04 UTC"
	switch {
	case now.Before(cert.NotBefore):
		return fmt.Errorf("the seal certificate %q is not valid before %s", cert.Subject.CommonName, cert.NotBefore.UTC().Format(day))
	case now.After(cert.NotAfter):
		return fmt.Errorf("the seal certificate %q expired on %s", cert.Subject.CommonName, cert.NotAfter.UTC().Format(day))
	case cert.KeyUsage != 0 && cert.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageContentCommitment) == 0:
		return fmt.Errorf("the seal certificate %q may not sign documents: its key usage has neither digitalSignature nor nonRepudiation", cert.Subject.CommonName)
	}
	return nil
}

// ExpiryWarning is how long before its end the gateway warns, each day,
// that the seal certificate expires.
const ExpiryWarning = 30 * 24 * time.Hour

func publicKeysMatch(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// SelfMadeValidity is how long a self-made seal certificate (the leaf)
// is valid; its root is valid as long again past it, so that documents
// sealed near the leaf's end still chain to a valid anchor for years.
const SelfMadeValidity = 10 * 365 * 24 * time.Hour

// MakeSelfSigned makes the gateway's own seal: a local root, "keygate
// document seal root" (a CA that may issue leaves only, path length 0),
// and the leaf it issues, "keygate document seal", that seals; both
// ECDSA P-256, with host (the public base URL's) as organizational unit.
// A relying party trusts the root once as an anchor (pdfsig, pdfcpu and
// Adobe refuse a self-signed leaf without CA rights as one). With crlURL
// the leaf names it as where the root's CRL is (the gateway serves it,
// from CRL), so that a relying party can learn that the leaf
// is not revoked, and seals can reach B-LT.
func MakeSelfSigned(host, crlURL string, now time.Time) (*Certificate, error) {
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	name := func(cn string) pkix.Name { return pkix.Name{CommonName: cn, OrganizationalUnit: []string{host}} }
	if host == "" {
		name = func(cn string) pkix.Name { return pkix.Name{CommonName: cn} }
	}
	rootTmpl := &x509.Certificate{
		Subject:               name("keygate document seal root"),
		NotBefore:             now.Add(-time.Hour).UTC(),
		NotAfter:              now.Add(2 * SelfMadeValidity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	root, err := issue(rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		Subject:               name("keygate document seal"),
		NotBefore:             now.Add(-time.Hour).UTC(),
		NotAfter:              now.Add(SelfMadeValidity).UTC(),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment,
		BasicConstraintsValid: true,
	}
	if host != "" {
		leafTmpl.DNSNames = []string{host}
	}
	if crlURL != "" {
		leafTmpl.CRLDistributionPoints = []string{crlURL}
	}
	leaf, err := issue(leafTmpl, root, &leafKey.PublicKey, rootKey)
	if err != nil {
		return nil, err
	}
	return &Certificate{Cert: leaf, Chain: []*x509.Certificate{root}, Key: leafKey, rootKey: rootKey, SelfMade: true}, nil
}

// issue makes the certificate of tmpl, for pub, signed by parent's key.
func issue(tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// CRLValidity is how long a CRL of the self-made root is current: a
// relying party fetches a fresh one when it is past.
const CRLValidity = 7 * 24 * time.Hour

// CRL is the self-made root's certificate revocation list at now, in
// DER: empty (the gateway revokes no leaf of its own), signed by the root,
// current for CRLValidity. An error for a certificate whose root's key
// the gateway does not hold (the operator's).
func (c *Certificate) CRL(now time.Time) ([]byte, error) {
	if c.rootKey == nil || len(c.Chain) == 0 {
		return nil, errors.New("the gateway holds no root key to sign a CRL with")
	}
	return x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:     big.NewInt(now.Unix()),
		ThisUpdate: now.Add(-time.Minute).UTC(),
		NextUpdate: now.Add(CRLValidity).UTC(),
	}, c.Anchor(), c.rootKey)
}

// Anchor is the certificate a relying party trusts: the root of the
// chain (the self-made root), or the certificate itself without one.
func (c *Certificate) Anchor() *x509.Certificate {
	if len(c.Chain) > 0 {
		return c.Chain[len(c.Chain)-1]
	}
	return c.Cert
}

// stored is a self-made certificate as it is kept (sealed under the
// master key by the caller). One made before the local root has no
// Chain or RootKey, and keeps sealing as it did.
type stored struct {
	Cert    []byte   `json:"cert"`
	Key     []byte   `json:"key"` // PKCS#8
	Chain   [][]byte `json:"chain,omitempty"`
	RootKey []byte   `json:"rootKey,omitempty"` // PKCS#8, to issue the next leaf
}

// Marshal encodes a self-made certificate and its keys for storage.
func (c *Certificate) Marshal() ([]byte, error) {
	key, err := x509.MarshalPKCS8PrivateKey(c.Key)
	if err != nil {
		return nil, err
	}
	st := stored{Cert: c.Cert.Raw, Key: key}
	for _, ca := range c.Chain {
		st.Chain = append(st.Chain, ca.Raw)
	}
	if c.rootKey != nil {
		if st.RootKey, err = x509.MarshalPKCS8PrivateKey(c.rootKey); err != nil {
			return nil, err
		}
	}
	return json.Marshal(st)
}

// Unmarshal decodes what Marshal encoded.
func Unmarshal(b []byte) (*Certificate, error) {
	var s stored
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(s.Cert)
	if err != nil {
		return nil, err
	}
	signer, err := parseSigner(s.Key)
	if err != nil {
		return nil, err
	}
	c := &Certificate{Cert: cert, Key: signer, SelfMade: true}
	for _, raw := range s.Chain {
		ca, err := x509.ParseCertificate(raw)
		if err != nil {
			return nil, err
		}
		c.Chain = append(c.Chain, ca)
	}
	if s.RootKey != nil {
		if c.rootKey, err = parseSigner(s.RootKey); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func parseSigner(pkcs8 []byte) (crypto.Signer, error) {
	key, err := x509.ParsePKCS8PrivateKey(pkcs8)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("the stored seal key cannot sign")
	}
	return signer, nil
}

// Outcome is what a seal came to, as keygate_document_seals_total counts it.
type Outcome string

const (
	Sealed                 Outcome = "sealed"
	SealedWithTimestamp    Outcome = "sealed_with_timestamp"
	SealedWithoutTimestamp Outcome = "sealed_without_timestamp" // the timestamp authority failed
	// TimestampFailed: the authority answered, but its reply failed a
	// check (ErrTimestampRejected); the document is sealed without it.
	TimestampFailed Outcome = "timestamp_failed"
	Failed          Outcome = "failed"
)

// Signer seals PDFs with one certificate: a PAdES signature (not to be
// confused with internal/seal, which encrypts under the master key).
type Signer struct {
	cert *Certificate
	// timestamps, when set, asks an RFC 3161 timestamp authority for the
	// token the seal carries; one that fails, or whose reply fails a
	// check, leaves the seal without.
	timestamps *timestamper
	// revocation fetches the chain's revocation status for B-LT.
	revocation *revocationClient
}

// NewSigner seals with cert, timestamped by timestampURL if not empty;
// the authority's certificate must chain to the system's roots unless
// TrustTimestampRoots names others.
func NewSigner(cert *Certificate, timestampURL string) *Signer {
	s := &Signer{cert: cert, revocation: newRevocationClient()}
	if timestampURL != "" {
		s.timestamps = newTimestamper(timestampURL, nil)
	}
	return s
}

// TrustTimestampRoots makes roots, in place of the system's, what the
// timestamp authority's certificate must chain to.
func (s *Signer) TrustTimestampRoots(roots *x509.CertPool) {
	if s.timestamps != nil {
		s.timestamps.roots = roots
	}
}

// Certificate is the certificate the signer seals with.
func (s *Signer) Certificate() *Certificate { return s.cert }

// CertificateInfo is the seal certificate as the admin API shows it
// (GET /webapi/seal) and `caddy webapi seal show` prints it.
type CertificateInfo struct {
	Subject string `json:"subject"`
	Issuer  string `json:"issuer"`
	SHA256  string `json:"sha256"`
	// AnchorSHA256 is the fingerprint of the certificate relying parties
	// trust: the chain's root (the seal certificate itself without one),
	// the one GET /webapi/documents/seal-certificate serves.
	AnchorSHA256 string    `json:"anchorSha256"`
	NotBefore    time.Time `json:"notBefore"`
	NotAfter     time.Time `json:"notAfter"`
	SelfMade     bool      `json:"selfMade"`
	Timestamped  bool      `json:"timestamped"`
	// Level is the PAdES baseline level a seal reaches when every
	// service it calls answers: B-B, B-T with a timestamp authority,
	// B-LTA when the chain also names its revocation status.
	Level Level `json:"level"`
}

// Info describes a seal: who seals, why, and when.
type Info struct {
	Name, Reason, Location string
	Time                   time.Time
}

// Seal returns doc with a certification signature over the whole file
// as it was given (no change allowed after it; at B-LT and B-LTA the
// /DSS and the document timestamp follow it), and the outcome. With a timestamp
// authority that fails, the document is sealed without a timestamp
// (SealedWithoutTimestamp) and err says why the timestamp failed.
func (s *Signer) Seal(doc []byte, info Info) ([]byte, Outcome, error) {
	if err := CheckCertificate(s.cert.Cert, time.Now()); err != nil {
		return nil, Failed, err
	}
	if s.timestamps != nil {
		out, err := s.timestamped(func(tsa string) ([]byte, error) { return s.seal(doc, info, tsa) })
		if err == nil && s.Level() == LevelBLTA {
			long, err := s.longTerm(out)
			if long == nil {
				long = out // B-T
			}
			switch {
			case errors.Is(err, ErrTimestampRejected):
				return long, TimestampFailed, err
			case err != nil:
				return long, SealedWithoutValidationData, err
			}
			return long, SealedWithTimestamp, nil
		}
		if err == nil {
			return out, SealedWithTimestamp, nil
		}
		out, err2 := s.seal(doc, info, "")
		if err2 != nil {
			return nil, Failed, err2
		}
		outcome := SealedWithoutTimestamp
		if errors.Is(err, ErrTimestampRejected) {
			outcome = TimestampFailed
		}
		return out, outcome, fmt.Errorf("timestamp authority: %w", err)
	}
	out, err := s.seal(doc, info, "")
	if err != nil {
		return nil, Failed, err
	}
	return out, Sealed, nil
}

// TimestampTimeout bounds the wait for the timestamp authority: a
// completion waits no longer before its document is sealed without one.
const TimestampTimeout = 5 * time.Second

// timestamped runs sign, which asks the timestamp authority at the URL
// it is given, with the checking endpoint of the timestamper standing in
// for the authority (a reply that fails a check never reaches pdfsign).
// It gives up a little after TimestampTimeout, when the endpoint has
// answered in any case; a sign still waiting then is abandoned (its
// goroutine ends with the connection), never waited for.
func (s *Signer) timestamped(sign func(tsa string) ([]byte, error)) ([]byte, error) {
	url, failure, stop, err := s.timestamps.start()
	if err != nil {
		return nil, err
	}
	defer stop()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			// pdfsign and the PDF reader run on this goroutine: a panic
			// of theirs is a failed seal, not the end of the process.
			if p := recover(); p != nil {
				done <- result{nil, fmt.Errorf("sealing the PDF: panic: %v", p)}
			}
		}()
		out, err := sign(url)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			if why := failure(); why != nil {
				return nil, why // what the authority did, not pdfsign's 502
			}
		}
		return r.out, r.err
	case <-time.After(TimestampTimeout + time.Second):
		return nil, fmt.Errorf("no answer within %s", TimestampTimeout)
	}
}

func (s *Signer) seal(doc []byte, info Info, tsa string) ([]byte, error) {
	rd := bytes.NewReader(doc)
	r, err := pdf.NewReader(rd, int64(len(doc)))
	if err != nil {
		return nil, fmt.Errorf("reading the PDF to seal: %w", err)
	}
	var chains [][]*x509.Certificate
	if len(s.cert.Chain) > 0 {
		chains = [][]*x509.Certificate{s.cert.chain()}
	}
	var out bytes.Buffer
	err = sign.Sign(rd, &out, r, int64(len(doc)), sign.SignData{
		Signature: sign.SignDataSignature{
			CertType:   sign.CertificationSignature,
			DocMDPPerm: sign.DoNotAllowAnyChangesPerms,
			Info: sign.SignDataSignatureInfo{
				Name: info.Name, Reason: info.Reason, Location: info.Location, Date: info.Time,
			},
		},
		Signer:            s.cert.Key,
		DigestAlgorithm:   crypto.SHA256,
		Certificate:       s.cert.Cert,
		CertificateChains: chains,
		TSA:               sign.TSA{URL: tsa},
	})
	if err != nil {
		return nil, fmt.Errorf("sealing the PDF: %w", err)
	}
	return out.Bytes(), nil
}

// Host is the host of a base URL, for the self-made certificate's
// subject.
func Host(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// sealContents finds the signatures of doc: each /ByteRange [a b c d]
// with the hex /Contents beside it, as a seal is written.
var sealContents = regexp.MustCompile(`/ByteRange\s*\[\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\]\s*/Contents\s*<([0-9A-Fa-f]+)>`)

const (
	// maxSignatures is how many signatures SealedBy examines, the first
	// in the file: a document this gateway sealed carries one (two at
	// B-LTA, the document timestamp's not its key's), and each
	// examined may cost a hash of the file.
	maxSignatures = 4
	// hashBudget is how many times the file's length SealedBy hashes at
	// most, whatever its ranges repeat: a seal over the whole file is
	// hashed twice (its digest alone, then by its full verification).
	hashBudget = 2
	// maxSealDER bounds what is decoded of a /Contents: a seal's
	// PKCS#7 is a few KiB (more with a timestamp and a chain), the rest
	// of its reserved room zeros.
	maxSealDER = 256 << 10
)

// SealedBy reports whether doc carries a signature that cert's key made
// over the bytes it names, intact: the part of the file the seal covers
// is as sealed, whatever was added after it. A file that only quotes the
// certificate, or whose sealed bytes changed, is not. It examines the
// first maxSignatures signatures, hashes at most hashBudget times
// len(doc), and copies the sealed bytes only for a signature whose
// digest they match.
func SealedBy(doc []byte, cert *x509.Certificate) bool {
	_, ok := SealedUpTo(doc, cert)
	return ok
}

// SealedUpTo is SealedBy that also tells where the bytes the seal covers
// end: before len(doc), bytes were added after the seal; at len(doc),
// the file differs from what was sealed only inside the seal's own
// /Contents, which no signature covers.
func SealedUpTo(doc []byte, cert *x509.Certificate) (end int, ok bool) {
	budget := hashBudget * len(doc)
	// content is the sealed bytes in one piece, which pkcs7 needs: made
	// only for a signature whose digest matched, and reused.
	var content []byte
	for _, m := range sealContents.FindAllSubmatch(doc, maxSignatures) {
		first, gap, second, ok := byteRange(m[1:5], len(doc))
		if !ok {
			continue
		}
		p7 := parseSeal(m[5])
		if p7 == nil {
			continue
		}
		signer := p7.GetOnlySigner()
		if signer == nil || !bytes.Equal(signer.Raw, cert.Raw) {
			continue
		}
		before, after := doc[:first], doc[gap:][:second]
		// first+second <= len(doc): the ranges lie in doc, apart.
		if budget -= first + second; budget < 0 {
			return 0, false
		}
		if !digestMatches(p7, before, after) {
			continue
		}
		if budget -= first + second; budget < 0 {
			return 0, false
		}
		content = append(append(content[:0], before...), after...)
		p7.Content = content
		if p7.Verify() == nil {
			return gap + second, true
		}
	}
	return 0, false
}

// byteRange reads /ByteRange [0 first gap second]: the bytes [0, first)
// and [gap, gap+second) of a file of n bytes, in order and apart. Every
// bound is checked against n by subtraction, so no sum can overflow.
func byteRange(nums [][]byte, n int) (first, gap, second int, ok bool) {
	var r [4]int
	for i, digits := range nums {
		if r[i], ok = atMost(digits, n); !ok {
			return 0, 0, 0, false
		}
	}
	if r[0] != 0 || r[2] < r[1] || r[3] > n-r[2] {
		return 0, 0, 0, false
	}
	return r[1], r[2], r[3], true
}

// atMost is the decimal number digits if it is at most limit (>= 0); a
// larger one, however long, is refused before it can overflow.
func atMost(digits []byte, limit int) (int, bool) {
	v := 0
	for _, c := range digits {
		d := int(c - '0')
		if v > limit/10 || v*10 > limit-d {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseSeal is the PKCS#7 of a /Contents in hex, or nil. The signature
// is padded with zeros to its reserved length: its DER is the first
// element, and no more than maxSealDER is decoded.
func parseSeal(hexDigits []byte) *pkcs7.PKCS7 {
	der := make([]byte, min(len(hexDigits)/2, maxSealDER))
	if _, err := hex.Decode(der, hexDigits[:2*len(der)]); err != nil {
		return nil
	}
	first := firstDER(der)
	if first == nil {
		return nil
	}
	p7, err := pkcs7.Parse(first)
	if err != nil {
		return nil
	}
	return p7
}

// digestMatches reports whether the signed message digest of p7's one
// signer is the hash of parts, hashed where they lie.
func digestMatches(p7 *pkcs7.PKCS7, parts ...[]byte) bool {
	var want []byte
	if len(p7.Signers) != 1 {
		return false
	}
	if err := p7.UnmarshalSignedAttribute(pkcs7.OIDAttributeMessageDigest, &want); err != nil {
		return false
	}
	var h hash.Hash
	switch alg := p7.Signers[0].DigestAlgorithm.Algorithm; {
	case alg.Equal(pkcs7.OIDDigestAlgorithmSHA256):
		h = sha256.New()
	case alg.Equal(pkcs7.OIDDigestAlgorithmSHA384):
		h = sha512.New384()
	case alg.Equal(pkcs7.OIDDigestAlgorithmSHA512):
		h = sha512.New()
	default:
		return false
	}
	for _, p := range parts {
		h.Write(p)
	}
	return bytes.Equal(h.Sum(nil), want)
}
