// Package openssltest runs a small public-key infrastructure made with
// the openssl command, on loopback, for tests that must be proved by
// tools keygate did not write: a root CA, leaves it issues (in PKCS#12
// files), an OCSP responder (`openssl ocsp`) and a timestamp authority
// (`openssl ts`), each answering over HTTP as a real one does.
package openssltest

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// CA is a root certificate authority with its OCSP responder.
type CA struct {
	t   testing.TB
	dir string
	// Root is the CA's certificate, RootPEM the same in PEM: the anchor a
	// relying party trusts.
	Root    *x509.Certificate
	RootPEM []byte
	// OCSPURL is the responder every leaf names.
	OCSPURL string

	mu     sync.Mutex
	serial int
	// ocspDown makes the responder answer 503.
	ocspDown bool
}

// NewCA makes a root CA ("openssltest root") and starts its OCSP
// responder on loopback until the test ends.
func NewCA(t testing.TB) *CA {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is missing: run scripts/test-deps.sh (Debian openssl)")
	}
	ca := &CA{t: t, dir: t.TempDir()}
	ca.write("index.txt", "")
	ca.write("ext.cnf", `[root]
basicConstraints = critical,CA:true
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[ocsp]
basicConstraints = CA:false
keyUsage = critical,digitalSignature
extendedKeyUsage = critical,OCSPSigning
noCheck = ignored
[tsa]
basicConstraints = CA:false
keyUsage = critical,digitalSignature,nonRepudiation
extendedKeyUsage = critical,timeStamping
authorityInfoAccess = OCSP;URI:${ENV::OCSP_URL}
[seal]
basicConstraints = CA:false
keyUsage = critical,digitalSignature,nonRepudiation
authorityInfoAccess = OCSP;URI:${ENV::OCSP_URL}
`)
	srv := httptest.NewServer(http.HandlerFunc(ca.serveOCSP))
	t.Cleanup(srv.Close)
	ca.OCSPURL = srv.URL + "/ocsp"

	ca.key("root.key")
	ca.run("req", "-x509", "-new", "-key", "root.key", "-out", "root.pem", "-days", "30",
		"-subj", "/CN=openssltest root", "-config", ca.reqConfig(), "-extensions", "root")
	ca.issue("ocsp", "/CN=openssltest OCSP responder", "ocsp")
	ca.RootPEM = ca.read("root.pem")
	ca.Root = parsePEM(t, ca.RootPEM)
	return ca
}

// reqConfig is a minimal openssl req configuration with the extension
// sections, so that `req -x509` can make the root.
func (ca *CA) reqConfig() string {
	ca.write("req.cnf", "[req]\ndistinguished_name = dn\n[dn]\n"+string(ca.read("ext.cnf")))
	return "req.cnf"
}

// run runs openssl in the CA's directory, with the responder's URL in
// the environment, where its configuration reads it.
func (ca *CA) run(args ...string) []byte {
	ca.t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Dir = ca.dir
	cmd.Env = append(os.Environ(), "OCSP_URL="+ca.OCSPURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		ca.t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (ca *CA) write(name, data string) {
	if err := os.WriteFile(filepath.Join(ca.dir, name), []byte(data), 0o600); err != nil {
		ca.t.Fatal(err)
	}
}

func (ca *CA) read(name string) []byte {
	b, err := os.ReadFile(filepath.Join(ca.dir, name))
	if err != nil {
		ca.t.Fatal(err)
	}
	return b
}

// key makes an ECDSA P-256 key in name.
func (ca *CA) key(name string) {
	ca.run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name)
}

// issue makes name.key and name.pem, a certificate for subject with the
// extensions of section, issued by the root, and records it in the
// responder's index as valid.
func (ca *CA) issue(name, subject, section string) *x509.Certificate {
	ca.t.Helper()
	ca.mu.Lock()
	ca.serial++
	serial := fmt.Sprintf("%04X", ca.serial+0x1000)
	ca.mu.Unlock()
	ca.key(name + ".key")
	ca.run("req", "-new", "-key", name+".key", "-out", name+".csr", "-subj", subject, "-config", ca.reqConfig())
	ca.run("x509", "-req", "-in", name+".csr", "-CA", "root.pem", "-CAkey", "root.key",
		"-set_serial", "0x"+serial, "-days", "20", "-out", name+".pem", "-extfile", "ext.cnf", "-extensions", section)
	cert := parsePEM(ca.t, ca.read(name+".pem"))
	index := string(ca.read("index.txt"))
	index += fmt.Sprintf("V\t%s\t\t%s\tunknown\t/CN=%s\n", cert.NotAfter.UTC().Format("060102150405Z"), serial, cert.Subject.CommonName)
	ca.write("index.txt", index)
	return cert
}

// Leaf issues a seal certificate (digitalSignature and nonRepudiation,
// naming the responder) for cn and returns it in a PKCS#12 file, its
// chain (the root) included, protected by password.
func (ca *CA) Leaf(cn, password string) (p12 []byte, cert *x509.Certificate) {
	ca.t.Helper()
	name := "leaf" + fmt.Sprint(ca.serial+1)
	cert = ca.issue(name, "/CN="+cn, "seal")
	ca.run("pkcs12", "-export", "-inkey", name+".key", "-in", name+".pem", "-certfile", "root.pem",
		"-out", name+".p12", "-passout", "pass:"+password)
	return ca.read(name + ".p12"), cert
}

// Revoke marks cert revoked in the responder's index.
func (ca *CA) Revoke(cert *x509.Certificate) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	serial := fmt.Sprintf("%04X", cert.SerialNumber)
	var out []string
	for _, line := range strings.Split(strings.TrimRight(string(ca.read("index.txt")), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) == 6 && f[3] == serial {
			f[0], f[2] = "R", f[1]
		}
		out = append(out, strings.Join(f, "\t"))
	}
	ca.write("index.txt", strings.Join(out, "\n")+"\n")
}

// OCSPDown makes the responder answer 503 (down), or answer again.
func (ca *CA) OCSPDown(down bool) {
	ca.mu.Lock()
	ca.ocspDown = down
	ca.mu.Unlock()
}

// serveOCSP answers one OCSP request with `openssl ocsp`, signed by the
// responder's certificate, from the index.
func (ca *CA) serveOCSP(w http.ResponseWriter, r *http.Request) {
	ca.mu.Lock()
	down := ca.ocspDown
	ca.mu.Unlock()
	if down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	dir, err := os.MkdirTemp(ca.dir, "ocsp")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer os.RemoveAll(dir)
	req, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err := os.WriteFile(filepath.Join(dir, "req.der"), req, 0o600); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ca.mu.Lock()
	cmd := exec.Command("openssl", "ocsp", "-index", "index.txt", "-CA", "root.pem", "-rsigner", "ocsp.pem", "-rkey", "ocsp.key",
		"-reqin", filepath.Join(dir, "req.der"), "-respout", filepath.Join(dir, "resp.der"), "-ndays", "1")
	cmd.Dir = ca.dir
	out, err := cmd.CombinedOutput()
	ca.mu.Unlock()
	if err != nil {
		http.Error(w, string(out), http.StatusInternalServerError)
		return
	}
	resp, err := os.ReadFile(filepath.Join(dir, "resp.der"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/ocsp-response")
	_, _ = w.Write(resp)
}

// TSAMode is how a timestamp authority answers.
type TSAMode int

const (
	TSAAnswer    TSAMode = iota // a token over the request, with its nonce
	TSAFail                     // 500
	TSAHang                     // no answer until the test ends
	TSAWrongHash                // a valid token over another hash
	TSAOnce                     // a token for the first request, then 500
)

// TSA starts a timestamp authority of mode on loopback until the test
// ends, answering with `openssl ts -reply`, its certificate issued by
// the root (timeStamping extended key usage), and returns its URL.
func (ca *CA) TSA(mode TSAMode) string {
	ca.t.Helper()
	if _, err := os.Stat(filepath.Join(ca.dir, "tsa.pem")); err != nil {
		ca.issue("tsa", "/CN=openssltest timestamp authority", "tsa")
		ca.write("tsaserial", "01\n")
		ca.write("ts.cnf", `[tsa]
default_tsa = tsa1
[tsa1]
serial = tsaserial
signer_cert = tsa.pem
certs = root.pem
signer_key = tsa.key
signer_digest = sha256
default_policy = 1.3.6.1.4.1.59999.1
digests = sha256, sha384, sha512
accuracy = secs:1
ess_cert_id_alg = sha256
ess_cert_id_chain = yes
`)
		ca.write("other.txt", "not what was asked for")
	}
	hang := make(chan struct{})
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := mode
		if m == TSAOnce && asked.Add(1) > 1 {
			m = TSAFail
		}
		switch m {
		case TSAFail:
			http.Error(w, "failing", http.StatusInternalServerError)
			return
		case TSAHang:
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		query, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		reply, err := ca.reply(query, m == TSAWrongHash)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/timestamp-reply")
		_, _ = w.Write(reply)
	}))
	ca.t.Cleanup(func() { close(hang); srv.Close() })
	return srv.URL
}

// reply is openssl ts's reply to query, or, wrongHash, to a query of its
// own over other data.
func (ca *CA) reply(query []byte, wrongHash bool) ([]byte, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	dir, err := os.MkdirTemp(ca.dir, "ts")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	q := filepath.Join(dir, "q.tsq")
	if wrongHash {
		cmd := exec.Command("openssl", "ts", "-query", "-data", "other.txt", "-sha256", "-cert", "-out", q)
		cmd.Dir = ca.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%v: %s", err, out)
		}
	} else if err := os.WriteFile(q, query, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command("openssl", "ts", "-reply", "-config", "ts.cnf", "-queryfile", q, "-out", filepath.Join(dir, "r.tsr"))
	cmd.Dir = ca.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	return os.ReadFile(filepath.Join(dir, "r.tsr"))
}

// VerifyToken runs `openssl ts -verify` on token (a TimeStampToken, DER)
// over the SHA-256 digest, trusting the root, and returns what it printed
// and whether it said OK.
func (ca *CA) VerifyToken(token, digest []byte) (string, bool) {
	ca.t.Helper()
	dir := ca.t.TempDir()
	f := filepath.Join(dir, "token.der")
	if err := os.WriteFile(f, token, 0o600); err != nil {
		ca.t.Fatal(err)
	}
	cmd := exec.Command("openssl", "ts", "-verify", "-token_in", "-in", f, "-digest", fmt.Sprintf("%x", digest),
		"-CAfile", filepath.Join(ca.dir, "root.pem"), "-untrusted", filepath.Join(ca.dir, "tsa.pem"))
	out, err := cmd.CombinedOutput()
	return string(out), err == nil && bytes.Contains(out, []byte("Verification: OK"))
}

func parsePEM(t testing.TB, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
