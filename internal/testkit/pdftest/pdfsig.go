package pdftest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Pdfsig runs poppler's pdfsig, the independent verifier of PDF
// signatures (Debian poppler-utils, which scripts/test-deps.sh installs),
// on doc and returns what it prints.
func Pdfsig(t testing.TB, doc []byte) string {
	t.Helper()
	if _, err := exec.LookPath("pdfsig"); err != nil {
		t.Fatal("pdfsig is missing: run scripts/test-deps.sh (Debian poppler-utils)")
	}
	f := filepath.Join(t.TempDir(), "doc.pdf")
	if err := os.WriteFile(f, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("pdfsig", "-nocert", f).CombinedOutput()
	return string(out)
}

// SealValid reports whether pdfsig finds doc's signature valid and
// covering the whole file.
func SealValid(t testing.TB, doc []byte) (string, bool) {
	t.Helper()
	out := Pdfsig(t, doc)
	return out, strings.Contains(out, "Signature Validation: Signature is Valid.") && strings.Contains(out, "Total document signed") &&
		!strings.Contains(out, "Not total document signed")
}

// Text runs poppler's pdftotext (Debian poppler-utils) on doc and returns
// its text in reading order, as a person copying it out would get it: a
// check independent of the Go reader Read uses.
func Text(t testing.TB, doc []byte) string {
	t.Helper()
	if _, err := exec.LookPath("pdftotext"); err != nil {
		t.Fatal("pdftotext is missing: run scripts/test-deps.sh (Debian poppler-utils)")
	}
	f := filepath.Join(t.TempDir(), "doc.pdf")
	if err := os.WriteFile(f, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("pdftotext", "-enc", "UTF-8", f, "-").Output()
	if err != nil {
		t.Fatalf("pdftotext: %v", err)
	}
	return string(out)
}

// SealTrusted runs pdfsig on doc as a relying party that trusts
// anchorPEM as a root: in an NSS database of its own, made with NSS's
// certutil (Debian libnss3-tools, which scripts/test-deps.sh installs),
// the certificate is trusted to issue signing certificates. It returns
// what pdfsig prints and whether it found the signature valid over the
// whole file and the signer's certificate trusted.
func SealTrusted(t testing.TB, doc, anchorPEM []byte) (string, bool) {
	t.Helper()
	for _, tool := range []string{"pdfsig", "certutil"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/test-deps.sh", tool)
		}
	}
	dir := t.TempDir()
	db := "sql:" + filepath.Join(dir, "nss")
	if err := os.Mkdir(filepath.Join(dir, "nss"), 0o700); err != nil {
		t.Fatal(err)
	}
	anchor, f := writeAnchored(t, dir, doc, anchorPEM)
	for _, args := range [][]string{
		{"-N", "-d", db, "--empty-password"},
		{"-A", "-d", db, "-n", "anchor", "-t", "C,C,C", "-a", "-i", anchor},
	} {
		if out, err := exec.Command("certutil", args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %v: %v\n%s", args, err, out)
		}
	}
	out, _ := exec.Command("pdfsig", "-nssdir", db, f).CombinedOutput()
	s := string(out)
	return s, strings.Contains(s, "Signature Validation: Signature is Valid.") && strings.Contains(s, "Certificate Validation: Certificate is Trusted.") &&
		strings.Contains(s, "Total document signed") && !strings.Contains(s, "Not total document signed")
}

// Pdfcpu runs pdfcpu's signature validation (`pdfcpu signatures validate
// --full`, pinned as a tool in go.mod and run with `go tool`) on doc as a
// relying party whose certificate store holds anchorPEM, in a
// configuration directory of its own, and returns what it prints.
func Pdfcpu(t testing.TB, doc, anchorPEM []byte) string {
	t.Helper()
	dir := t.TempDir()
	anchor, f := writeAnchored(t, dir, doc, anchorPEM)
	run := func(args ...string) string {
		cmd := exec.Command("go", append([]string{"tool", "pdfcpu"}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
		out, err := cmd.CombinedOutput()
		if err != nil && !strings.Contains(string(out), "Status:") {
			t.Fatalf("pdfcpu %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("certificates", "import", anchor)
	// pdfcpu asks OCSP responders itself, never trusting archived
	// responses alone; the tests' responders run on loopback, which it
	// refuses unless allowed.
	conf := filepath.Join(dir, "config", "pdfcpu", "config.yml")
	yml, err := os.ReadFile(conf)
	if err != nil {
		t.Fatalf("pdfcpu's configuration: %v", err)
	}
	yml = regexp.MustCompile(`(?m)^allowedRevocationHosts:.*$`).ReplaceAll(yml, []byte("allowedRevocationHosts: [127.0.0.1, localhost]"))
	yml = regexp.MustCompile(`(?m)^preferredCertRevocationChecker:.*$`).ReplaceAll(yml, []byte("preferredCertRevocationChecker: ocsp"))
	if err := os.WriteFile(conf, yml, 0o600); err != nil {
		t.Fatal(err)
	}
	return run("signatures", "validate", "--full", f)
}

// writeAnchored writes doc and anchorPEM into dir, for a verifier to
// read, and returns their paths.
func writeAnchored(t testing.TB, dir string, doc, anchorPEM []byte) (anchor, file string) {
	t.Helper()
	anchor, file = filepath.Join(dir, "anchor.pem"), filepath.Join(dir, "doc.pdf")
	for name, data := range map[string][]byte{anchor: anchorPEM, file: doc} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return anchor, file
}
