package contractpdf

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/pdftest"
)

func TestCertificate(t *testing.T) {
	in := sampleInput(t)
	finalized, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(finalized)
	hexSum := hex.EncodeToString(sum[:])

	// The certificate also serves contracts that ended otherwise: a
	// rejecting signer without method, one who never opened the page.
	in.Signers = append(in.Signers,
		Signer{FullName: "Ελένη Παπαδοπούλου", Email: "eleni@example.org", Phone: "+306912345678", Decision: DecisionRejected,
			DecisionTime: time.Date(2026, 11, 22, 19, 0, 0, 0, time.UTC), DecisionIP: "192.0.2.55", Opened: time.Date(2026, 11, 22, 18, 59, 0, 0, time.UTC)},
		Signer{FullName: "Never Opened", Phone: "+15550100123"},
	)
	out, err := Certificate(in, strings.ToUpper(hexSum))
	if err != nil {
		t.Fatal(err)
	}
	doc := pdftest.Read(t, out)
	for _, want := range []string{
		"Certificate of completion",
		"NDA Zoë 2026", "7c0e2f4a-1b2c-4d5e-8f90-a1b2c3d4e5f6", "Mutual Non-Disclosure Agreement",
		"Finalized PDF SHA-256\n" + hexSum,
		"Created\n20 November 2026, 09:00:00 UTC",
		"Signer 1 of 5", "Signer 5 of 5",
		// Signer 1: drawn.
		"Full name\nZoë Ångström", "E-mail\nzoe@example.org", "Phone\n+46701234567", "Signing method\nsignature drawn on the signing page",
		"Decision\nsigned", "Decision time\n21 November 2026, 14:03:07 UTC", "Decision IP\n203.0.113.7", "Opened\n21 November 2026, 13:03:07 UTC",
		// Signer 2: typed, IPv6, no phone.
		"Full name\nДмитрий Иванов\nE-mail\ndmitry@example.org\nPhone\n—\nSigning method\ntyped name\nDecision\nsigned\nDecision time\n22 November 2026, 10:15:00 UTC\nDecision IP\n2001:db8::42\nOpened\n22 November 2026, 10:14:00 UTC",
		// Signer 3: uploaded.
		"Kim Upload", "Signing method\nupload", "Decision IP\n198.51.100.1",
		// Signer 4: rejected.
		"Full name\nΕλένη Παπαδοπούλου\nE-mail\neleni@example.org\nPhone\n+306912345678\nSigning method\n—\nDecision\nrejected\nDecision time\n22 November 2026, 19:00:00 UTC\nDecision IP\n192.0.2.55",
		// Signer 5: undecided, never opened.
		"Full name\nNever Opened\nE-mail\n—\nPhone\n+15550100123\nSigning method\n—\nDecision\n—\nDecision time\n—\nDecision IP\n—\nOpened\n—",
	} {
		if !strings.Contains(doc.Text, want) {
			t.Errorf("certificate lacks %q", want)
		}
	}
	if len(doc.Images) != 0 {
		t.Errorf("certificate embeds %d images", len(doc.Images))
	}
}

func TestCertificateRefusesBadInput(t *testing.T) {
	in := sampleInput(t)
	good := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		in   Input
		sum  string
	}{
		{"short hash", in, "abcd"},
		{"not hex", in, strings.Repeat("zz", 32)},
		{"no signers", Input{ContractID: "x"}, good},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Certificate(tt.in, tt.sum); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
