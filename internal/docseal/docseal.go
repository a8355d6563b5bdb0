// Package docseal seals PDFs with a PDF digital signature over the whole
// file (an incremental update, adbe.pkcs7.detached, made by
// digitorus/pdfsign), with the operator's PKCS#12 certificate or one the
// gateway makes once. It knows nothing of Caddy or of contracts.
package docseal

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"strconv"
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
}

// Fingerprint is the SHA-256 of the certificate's DER, in hex.
func (c *Certificate) Fingerprint() string {
	sum := sha256.Sum256(c.Cert.Raw)
	return hex.EncodeToString(sum[:])
}

// PEM is the certificate and its chain in PEM.
func (c *Certificate) PEM() []byte {
	var b bytes.Buffer
	for _, cert := range append([]*x509.Certificate{c.Cert}, c.Chain...) {
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
	return &Certificate{Cert: cert, Chain: chain, Key: signer}, nil
}

func publicKeysMatch(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// SelfMadeValidity is how long a self-made certificate is valid.
const SelfMadeValidity = 10 * 365 * 24 * time.Hour

// MakeSelfSigned makes the gateway's own seal certificate: ECDSA P-256,
// self-signed, subject "keygate document seal" with host (the public
// base URL's) as its organizational unit and DNS name, valid 10 years.
func MakeSelfSigned(host string, now time.Time) (*Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "keygate document seal", OrganizationalUnit: []string{host}},
		NotBefore:             now.Add(-time.Hour).UTC(),
		NotAfter:              now.Add(SelfMadeValidity).UTC(),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment,
		BasicConstraintsValid: true,
	}
	if host != "" {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Certificate{Cert: cert, Key: key, SelfMade: true}, nil
}

// stored is a self-made certificate as it is kept (sealed under the
// master key by the caller).
type stored struct {
	Cert []byte `json:"cert"`
	Key  []byte `json:"key"` // PKCS#8
}

// Marshal encodes a self-made certificate and its key for storage.
func (c *Certificate) Marshal() ([]byte, error) {
	key, err := x509.MarshalPKCS8PrivateKey(c.Key)
	if err != nil {
		return nil, err
	}
	return json.Marshal(stored{Cert: c.Cert.Raw, Key: key})
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
	key, err := x509.ParsePKCS8PrivateKey(s.Key)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("the stored seal key cannot sign")
	}
	return &Certificate{Cert: cert, Key: signer, SelfMade: true}, nil
}

// Outcome is what a seal came to, as keygate_document_seals_total counts it.
type Outcome string

const (
	Sealed                 Outcome = "sealed"
	SealedWithTimestamp    Outcome = "sealed_with_timestamp"
	SealedWithoutTimestamp Outcome = "sealed_without_timestamp" // the timestamp authority failed
	Failed                 Outcome = "failed"
)

// Sealer seals PDFs with one certificate.
type Sealer struct {
	cert *Certificate
	// timestampURL, when set, is an RFC 3161 timestamp authority whose
	// token the seal carries; one that fails leaves the seal without.
	timestampURL string
}

// NewSealer seals with cert, timestamped by timestampURL if not empty.
func NewSealer(cert *Certificate, timestampURL string) *Sealer {
	return &Sealer{cert: cert, timestampURL: timestampURL}
}

// Certificate is the certificate the sealer seals with.
func (s *Sealer) Certificate() *Certificate { return s.cert }

// Info describes a seal: who seals, why, and when.
type Info struct {
	Name, Reason, Location string
	Time                   time.Time
}

// Seal returns doc with a certification signature over the whole file
// (no change allowed after it), and the outcome. With a timestamp
// authority that fails, the document is sealed without a timestamp
// (SealedWithoutTimestamp) and err says why the timestamp failed.
func (s *Sealer) Seal(doc []byte, info Info) ([]byte, Outcome, error) {
	if s.timestampURL != "" {
		out, err := s.sealTimestamped(doc, info)
		if err == nil {
			return out, SealedWithTimestamp, nil
		}
		out, err2 := s.seal(doc, info, "")
		if err2 != nil {
			return nil, Failed, err2
		}
		return out, SealedWithoutTimestamp, fmt.Errorf("timestamp authority: %w", err)
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

// sealTimestamped seals with the timestamp authority's token, giving up
// after TimestampTimeout. pdfsign's client has no timeout of its own: a
// seal still waiting then is abandoned (its goroutine ends with the
// connection), never waited for.
func (s *Sealer) sealTimestamped(doc []byte, info Info) ([]byte, error) {
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := s.seal(doc, info, s.timestampURL)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(TimestampTimeout):
		return nil, fmt.Errorf("no answer within %s", TimestampTimeout)
	}
}

func (s *Sealer) seal(doc []byte, info Info, tsa string) ([]byte, error) {
	rd := bytes.NewReader(doc)
	r, err := pdf.NewReader(rd, int64(len(doc)))
	if err != nil {
		return nil, fmt.Errorf("reading the PDF to seal: %w", err)
	}
	var chains [][]*x509.Certificate
	if len(s.cert.Chain) > 0 {
		chains = [][]*x509.Certificate{append([]*x509.Certificate{s.cert.Cert}, s.cert.Chain...)}
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

// SealedBy reports whether doc carries a signature that cert's key made
// over the bytes it names, intact: the part of the file the seal covers
// is as sealed, whatever was added after it. A file that only quotes the
// certificate, or whose sealed bytes changed, is not.
func SealedBy(doc []byte, cert *x509.Certificate) bool {
	for _, m := range sealContents.FindAllSubmatch(doc, 16) {
		var r [4]int64
		for i := range r {
			n, err := strconv.ParseInt(string(m[i+1]), 10, 64)
			if err != nil || n < 0 {
				return false
			}
			r[i] = n
		}
		if r[0] != 0 || r[1] > int64(len(doc)) || r[2] > int64(len(doc)) || r[2]+r[3] > int64(len(doc)) || r[2] < r[1] {
			continue
		}
		padded, err := hex.DecodeString(string(m[5]))
		if err != nil {
			continue
		}
		// The signature is padded with zeros to its reserved length: its
		// DER is the first element.
		var first asn1.RawValue
		if _, err := asn1.Unmarshal(padded, &first); err != nil {
			continue
		}
		p7, err := pkcs7.Parse(first.FullBytes)
		if err != nil {
			continue
		}
		signer := p7.GetOnlySigner()
		if signer == nil || !bytes.Equal(signer.Raw, cert.Raw) {
			continue
		}
		p7.Content = append(append([]byte(nil), doc[:r[1]]...), doc[r[2]:r[2]+r[3]]...)
		if p7.Verify() == nil {
			return true
		}
	}
	return false
}
