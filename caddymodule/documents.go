package caddymodule

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"

	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/storage"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/docseal"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/upstreams/contracts"
)

func init() {
	caddy.RegisterModule(Documents{})
}

// DocumentSealConfig is the `document_seal` block of the webapi global
// option: the certificate that seals completed contracts' documents.
// Without a pkcs12_file the gateway makes one of its own at first start
// and keeps it, sealed under the master key, in the database.
type DocumentSealConfig struct {
	// PKCS12File is the operator's certificate and key (OpenSSL 3's
	// default format included).
	PKCS12File string `json:"pkcs12_file,omitempty"`
	// PasswordFile holds the PKCS#12 file's password (never inline).
	PasswordFile string `json:"password_file,omitempty"`
	// TimestampURL is an RFC 3161 timestamp authority; when it fails, or
	// its reply fails a check, the document is sealed without a
	// timestamp and the failure counted.
	TimestampURL string `json:"timestamp_url,omitempty"`
	// TimestampRootsFile holds the certificates (PEM) the authority's
	// must chain to; without it, the system's roots.
	TimestampRootsFile string `json:"timestamp_roots_file,omitempty"`
}

// selfMadeSealAD binds the sealed self-made certificate to its purpose.
var selfMadeSealAD = []byte("keygate document seal v1")

// buildSigner makes the document signer of config a: the operator's
// PKCS#12 certificate, or the self-made one of the database (made on the
// first call of any instance).
func (s *state) buildSigner(a *App) (*docseal.Signer, error) {
	cfg := a.DocumentSeal
	if cfg == nil {
		cfg = &DocumentSealConfig{}
	}
	var cert *docseal.Certificate
	if cfg.PKCS12File != "" {
		data, err := os.ReadFile(cfg.PKCS12File)
		if err != nil {
			return nil, fmt.Errorf("document_seal: reading pkcs12_file: %w", err)
		}
		password := ""
		if cfg.PasswordFile != "" {
			p, err := os.ReadFile(cfg.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("document_seal: reading password_file: %w", err)
			}
			password = strings.TrimRight(string(p), "\r\n")
		}
		if cert, err = docseal.LoadPKCS12(data, password); err != nil {
			return nil, fmt.Errorf("document_seal: %s: %w", cfg.PKCS12File, err)
		}
	} else {
		sealed, err := s.stores.DocumentSeal.SelfMade(func() ([]byte, error) {
			c, err := docseal.MakeSelfSigned(docseal.Host(a.PublicBaseURL), strings.TrimSuffix(a.PublicBaseURL, "/")+sealCRLPath, time.Now())
			if err != nil {
				return nil, err
			}
			raw, err := c.Marshal()
			if err != nil {
				return nil, err
			}
			return s.sealer.Seal(raw, selfMadeSealAD), nil
		})
		if err != nil {
			return nil, fmt.Errorf("document_seal: the self-made certificate: %w", err)
		}
		raw, err := s.sealer.Open(sealed, selfMadeSealAD)
		if err != nil {
			return nil, errors.New("document_seal: the stored certificate does not open with this master key")
		}
		if cert, err = docseal.Unmarshal(raw); err != nil {
			return nil, fmt.Errorf("document_seal: the stored certificate: %w", err)
		}
		if err := docseal.CheckCertificate(cert.Cert, time.Now()); err != nil {
			return nil, fmt.Errorf("document_seal: the self-made certificate kept in the database: %w; configure a pkcs12_file", err)
		}
		// The leaf names the CRL where the gateway was reached when it
		// was made; a relying party that checks online asks there.
		crl := strings.TrimSuffix(a.PublicBaseURL, "/") + sealCRLPath
		if dp := cert.Cert.CRLDistributionPoints; len(dp) > 0 && dp[0] != crl {
			a.logger.Warn("the self-made seal certificate names its CRL at another address than public_base_url: relying parties that check revocation online ask there; keep the gateway reachable there too",
				zap.String("crl", dp[0]), zap.String("public_base_url", a.PublicBaseURL))
		}
	}
	metrics.sealExpiry.Set(float64(cert.Cert.NotAfter.Unix()))
	signer := docseal.NewSigner(cert, cfg.TimestampURL)
	if cfg.TimestampRootsFile != "" {
		raw, err := os.ReadFile(cfg.TimestampRootsFile)
		if err != nil {
			return nil, fmt.Errorf("document_seal: reading timestamp_roots_file: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(raw) {
			return nil, fmt.Errorf("document_seal: %s holds no PEM certificate", cfg.TimestampRootsFile)
		}
		signer.TrustTimestampRoots(roots)
	}
	return signer, nil
}

// warnSealExpiry logs, once a day, that the seal certificate expires
// within docseal.ExpiryWarning: after its end no contract can complete.
func (a *App) warnSealExpiry(now time.Time) {
	if a.signer == nil || now.Sub(a.lastSealWarning) < 24*time.Hour {
		return
	}
	end := a.signer.Certificate().Cert.NotAfter
	if left := end.Sub(now); left < docseal.ExpiryWarning {
		a.lastSealWarning = now
		a.logger.Warn("the document seal certificate expires soon: renew it (document_seal pkcs12_file) before completed contracts' documents wait unsealed",
			zap.Time("not_after", end), zap.Duration("left", left.Round(time.Minute)))
	}
}

// sealFunc is what the signing lifecycle seals a completed contract's
// documents with, outside any transaction: counted, and logged when the
// timestamp authority fails.
func sealFunc(signer *docseal.Signer, logger *zap.Logger) func([]byte, *contracts.Contract) ([]byte, error) {
	return func(doc []byte, c *contracts.Contract) ([]byte, error) {
		out, outcome, err := signer.Seal(doc, docseal.Info{
			Name:   "keygate document seal",
			Reason: "Contract " + c.ID + " completed; sealed so that any change shows",
			Time:   time.Now(),
		})
		metrics.documentSeals.WithLabelValues(string(outcome)).Inc()
		switch {
		case outcome == docseal.Failed:
			logger.Error("sealing a completed contract's document", zap.String("contract", c.ID), zap.Error(err))
			return nil, err
		case outcome == docseal.SealedWithoutValidationData:
			logger.Warn("document sealed short of B-LTA: the revocation status (B-T) or the document timestamp (B-LT) failed", zap.String("contract", c.ID), zap.Error(err))
		case outcome == docseal.TimestampFailed:
			logger.Warn("a timestamp authority's reply was refused: the document is sealed without that timestamp", zap.String("contract", c.ID), zap.Error(err))
		case err != nil:
			logger.Warn("document sealed without a timestamp: the timestamp authority failed", zap.String("contract", c.ID), zap.Error(err))
		}
		return out, nil
	}
}

// sealedFunc records, in the transaction that stores a completion's
// sealed documents, each one under its hash: /verify finds the contract
// by it.
func sealedFunc(index docseal.Index) func(storage.Tx, []byte, *contracts.Contract) error {
	return func(tx storage.Tx, doc []byte, c *contracts.Contract) error {
		return index.Record(tx, sha256.Sum256(doc), c.ID)
	}
}

// Documents is the `webapi_documents` handler: what anyone may fetch to
// check the gateway's documents, without a key. Today the seal
// certificate, at GET /webapi/documents/seal-certificate, in PEM with its
// SHA-256 fingerprint in the Seal-Certificate-SHA256 header, so that
// relying parties can pin it.
type Documents struct {
	app *App
	// crl is the root's CRL as last signed, kept for crlReuse: each
	// request signing its own would let a flood of them spend CPU.
	crl *signedCRL
}

// signedCRL is a CRL and when it was signed.
type signedCRL struct {
	sync.Mutex
	der  []byte
	made time.Time
}

// crlReuse is how long one signed CRL is served: well inside its
// validity (docseal.CRLValidity).
const crlReuse = time.Hour

// CaddyModule returns the Caddy module information.
func (Documents) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_documents",
		New: func() caddy.Module { return new(Documents) },
	}
}

// Provision finds the webapi app.
func (h *Documents) Provision(ctx caddy.Context) error {
	app, err := webapiApp(ctx)
	if err != nil {
		return err
	}
	h.app = app
	h.crl = new(signedCRL)
	return nil
}

// sealFingerprintHeader carries the seal certificate's SHA-256.
const sealFingerprintHeader = "Seal-Certificate-SHA256"

// sealCRLPath is where the self-made root's CRL is served, as its leaf
// names it.
const sealCRLPath = "/webapi/documents/seal-crl"

func (h *Documents) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	switch {
	case strings.HasSuffix(r.URL.Path, "/seal-certificate"):
		return h.serveCertificate(w, r)
	case strings.HasSuffix(r.URL.Path, "/seal-crl"):
		return h.serveCRL(w, r)
	}
	problem.Write(w, problem.NotFound("no such document resource"))
	return nil
}

// serveCRL serves the self-made root's CRL, fresh (DER,
// application/pkix-crl): a relying party learns from it that the leaf
// that seals is not revoked. An operator's certificate has its CA's.
func (h *Documents) serveCRL(w http.ResponseWriter, r *http.Request) error {
	if onlyGetHead(w, r) {
		return nil
	}
	crl, err := h.currentCRL(time.Now())
	if err != nil {
		problem.Write(w, problem.NotFound("the gateway publishes no CRL for this seal certificate: its CA does"))
		return nil
	}
	hdr := w.Header()
	problem.SecureHeaders(hdr)
	hdr.Set("Cache-Control", "public, max-age=3600")
	hdr.Set("Content-Type", "application/pkix-crl")
	hdr.Set("Content-Length", strconv.Itoa(len(crl)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(crl)
	}
	return nil
}

// currentCRL is the root's CRL, signed again once crlReuse has passed.
func (h *Documents) currentCRL(now time.Time) ([]byte, error) {
	h.crl.Lock()
	defer h.crl.Unlock()
	if h.crl.der == nil || now.Sub(h.crl.made) >= crlReuse {
		der, err := h.app.signer.Certificate().CRL(now)
		if err != nil {
			return nil, err
		}
		h.crl.der, h.crl.made = der, now
	}
	return h.crl.der, nil
}

// serveCertificate serves the seal's trust anchor, or its chain.
func (h *Documents) serveCertificate(w http.ResponseWriter, r *http.Request) error {
	if onlyGetHead(w, r) {
		return nil
	}
	cert := h.app.signer.Certificate()
	hdr := w.Header()
	problem.SecureHeaders(hdr)
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Type", "application/x-pem-file")
	// The anchor a relying party trusts (the root of the seal's chain),
	// named by its fingerprint; ?chain=1 the seal certificate and its
	// chain, as each seal carries them.
	anchor := cert.Anchor()
	hdr.Set(sealFingerprintHeader, docseal.FingerprintOf(anchor))
	body := docseal.PEMOf(anchor)
	if r.URL.Query().Get("chain") == "1" {
		body = cert.PEM()
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
	return nil
}

// sealInfo is the seal certificate as the admin API shows it.
func (a *App) sealInfo() docseal.CertificateInfo {
	c := a.signer.Certificate()
	return docseal.CertificateInfo{
		Subject: c.Cert.Subject.String(), Issuer: c.Cert.Issuer.String(), SHA256: c.Fingerprint(), AnchorSHA256: docseal.FingerprintOf(c.Anchor()),
		NotBefore: c.Cert.NotBefore.UTC(), NotAfter: c.Cert.NotAfter.UTC(), SelfMade: c.SelfMade,
		Timestamped: a.DocumentSeal != nil && a.DocumentSeal.TimestampURL != "",
		Level:       a.signer.Level(),
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Documents)(nil)
	_ caddyhttp.MiddlewareHandler = (*Documents)(nil)
)
