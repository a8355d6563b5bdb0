package e2e

import (
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/certtest"
)

// TestSealCertificateRefusedAtStart: a document_seal certificate that
// could not make a seal any verifier accepts stops the gateway at start,
// with a message naming the file and what is wrong with it.
func TestSealCertificateRefusedAtStart(t *testing.T) {
	t.Parallel()
	now := time.Now()
	valid := certtest.Valid("s3cret")
	for _, tc := range []struct {
		name string
		seal certtest.Seal
		want string // "" starts
	}{
		{"valid", valid, ""},
		{"expired", certtest.Seal{NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, Password: "s3cret"}, "expired on"},
		{"not yet valid", certtest.Seal{NotBefore: now.Add(24 * time.Hour), NotAfter: now.Add(48 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, Password: "s3cret"}, "is not valid before"},
		{"no signing key usage", certtest.Seal{NotBefore: valid.NotBefore, NotAfter: valid.NotAfter, KeyUsage: x509.KeyUsageKeyEncipherment, Password: "s3cret"}, "neither digitalSignature nor nonRepudiation"},
		{"wrong password", certtest.Seal{NotBefore: valid.NotBefore, NotAfter: valid.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature, Password: "other"}, "password"},
		{"key of another certificate", certtest.Seal{NotBefore: valid.NotBefore, NotAfter: valid.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature, Password: "s3cret", WrongKey: true}, "is not the key of its certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			p12, password := filepath.Join(dir, "seal.p12"), filepath.Join(dir, "seal.password")
			config := filepath.Join(dir, "Caddyfile")
			for name, data := range map[string][]byte{p12: certtest.PKCS12(t, tc.seal), password: []byte("s3cret\n"), config: []byte(fmt.Sprintf(`{
	admin off
	webapi {
		data_dir %s
		document_seal {
			pkcs12_file %s
			password_file %s
		}
	}
}
`, dir, p12, password))} {
				if err := os.WriteFile(name, data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// validate provisions every module, as a start does, and stops.
			cmd := exec.Command(bin, "validate", "--config", config, "--adapter", "caddyfile")
			cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			out, err := cmd.CombinedOutput()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("a valid certificate refused: %v\n%s", err, out)
			case tc.want != "" && (err == nil || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), p12)):
				t.Errorf("started, or without naming %s and %q: %v\n%s", p12, tc.want, err, out)
			}
		})
	}
}
