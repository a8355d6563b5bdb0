package pdftest

import (
	"os"
	"os/exec"
	"path/filepath"
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
