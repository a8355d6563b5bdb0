package contractpdf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/pdftest"
)

func TestCertificate(t *testing.T) {
	in := sampleInput(t)
	finalized, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(finalized)
	hexSum := hex.EncodeToString(sum[:])

	const firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
	in.Events = []Event{
		{At: created, What: "Contract created through the API by alice", IP: "198.51.100.9", UserAgent: "curl/8.5.0"},
		{At: signed3, What: "Contract completed: every signer has signed", IP: "198.51.100.1"},
	}
	in.Signers[0].Events = []Event{
		{At: created, What: "Invitation queued for delivery by e-mail to z•••@example.org", IP: "198.51.100.9", UserAgent: "curl/8.5.0"},
		{At: signed1.Add(-time.Hour), What: "Opened the signing page", IP: "203.0.113.7", UserAgent: firefox},
		{At: signed1.Add(-time.Minute), What: "One-time password queued for delivery by text message to •••567", IP: "203.0.113.7", UserAgent: firefox},
		{At: signed1, What: "One-time password accepted", IP: "203.0.113.7", UserAgent: firefox},
		{At: signed1, What: "Signed: signature drawn on the signing page", IP: "203.0.113.7", UserAgent: firefox},
	}
	// A step recorded before user agents were: the address alone.
	in.Signers[1].Events = []Event{{At: signed2, What: "Signed (recorded before the event trail)", IP: "2001:db8::42"}}
	// The last signer asked for a password a thousand times: the first
	// and last are listed, with how many are left out.
	for i := range 1000 {
		in.Signers[2].Events = append(in.Signers[2].Events, Event{At: created.Add(time.Duration(i) * time.Minute), What: fmt.Sprintf("Try %d", i)})
	}
	out, err := Certificate(in, strings.ToUpper(hexSum))
	if err != nil {
		t.Fatal(err)
	}
	text := lines(pdftest.Text(t, out))
	for _, want := range []string{
		"Certificate of completion",
		"NDA Zoë 2026", "7c0e2f4a-1b2c-4d5e-8f90-a1b2c3d4e5f6", "Mutual Non-Disclosure Agreement",
		hexSum,
		"20 November 2026, 09:00:00 UTC\nContract created through the API by alice\nIP address 198.51.100.9 · user agent “curl/8.5.0”",
		"Contract completed: every signer has signed\nIP address 198.51.100.1\n",
		"Signer 1 of 3", "Zoë Ångström", "zoe@example.org", "+46701234567",
		"Invitation queued for delivery by e-mail to z•••@example.org",
		"21 November 2026, 13:03:07 UTC\nOpened the signing page\nIP address 203.0.113.7 · user agent “" + firefox + "”",
		"21 November 2026, 14:02:07 UTC\nOne-time password queued for delivery by text message to •••567",
		"21 November 2026, 14:03:07 UTC\nOne-time password accepted",
		"21 November 2026, 14:03:07 UTC\nSigned: signature drawn on the signing page",
		"Signer 2 of 3", "Дмитрий Иванов",
		"22 November 2026, 10:15:00 UTC\nSigned (recorded before the event trail)\nIP address 2001:db8::42\n",
		"Signer 3 of 3", "Try 0\n", "Try 199\n", "… 600 more events are left out here …", "Try 800\n", "Try 999\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("certificate lacks %q", want)
		}
	}
	// In order, as recorded.
	if i, j := strings.Index(text, "Opened the signing page"), strings.Index(text, "One-time password accepted"); i < 0 || j < i {
		t.Errorf("events out of order:\n%s", text)
	}
	if strings.Contains(text, "Try 200\n") || strings.Contains(text, "Try 799\n") {
		t.Error("the left-out events are listed")
	}
	if doc := pdftest.Read(t, out); len(doc.Images) != 0 {
		t.Errorf("certificate embeds %d images", len(doc.Images))
	}

	// A user agent is the client's text: padded or long, it never starts
	// a line where the certificate's own lines start.
	forged := "Firefox/133.0" + strings.Repeat(" ", 72) + "26 November 2026, 03:30:00 UTC" + strings.Repeat(" ", 143) + "Declined: rejected the contract"
	long := "Agent/1.0 " + strings.Repeat("(very long comment) ", 40) + "Tail/9"
	in.Signers[1].Events = append(in.Signers[1].Events,
		Event{At: signed2, What: "Opened the signing page", IP: "192.0.2.9", UserAgent: forged},
		Event{At: signed2, What: "Opened\n\nthe signing page   again", IP: "192.0.2.10", UserAgent: long})
	out, err = Certificate(in, hexSum)
	if err != nil {
		t.Fatal(err)
	}
	raw := pdftest.Text(t, out)
	for _, line := range strings.Split(raw, "\n") {
		if strings.HasPrefix(line, "26 November 2026, 03:30") || strings.HasPrefix(line, "Declined") || strings.HasPrefix(line, "Tail/9") ||
			strings.HasPrefix(line, "the signing page") {
			t.Errorf("client text starts a line of its own: %q", line)
		}
	}
	for _, want := range []string{"IP address 192.0.2.9 · user agent “Firefox/133.0 26 November 2026, 03:30:00 UTC Declined: rejected the contract”",
		"Opened the signing page again", "user agent “Agent/1.0 (very long comment)", "…"} {
		if !strings.Contains(raw, want) {
			t.Errorf("certificate lacks %q", want)
		}
	}

	// A signer with no event says so.
	in.Signers = append(in.Signers, Signer{FullName: "Never Opened", Phone: "+15550100123"})
	out, err = Certificate(in, hexSum)
	if err != nil {
		t.Fatal(err)
	}
	if text := lines(pdftest.Text(t, out)); !strings.Contains(text, "Never Opened") || !strings.Contains(text, "No events recorded.") {
		t.Errorf("certificate of a signer without events:\n%s", text)
	}
}

// TestCertificateInFinalized: the finalized PDF ends with the
// certificate of completion, after the signature blocks: the same pages
// as the certificate's own PDF, but that they say they are part of the
// file rather than name its hash, which the certificate's own PDF does.
// Both name the SHA-256 of the contract's text.
func TestCertificateInFinalized(t *testing.T) {
	in := sampleInput(t)
	in.Events = []Event{
		{At: created, What: "Contract created through the API by alice", IP: "198.51.100.9", UserAgent: "curl/8.5.0"},
		{At: signed3, What: "Contract completed: every signer has signed", IP: "198.51.100.1"},
	}
	in.Signers[0].Events = []Event{{At: signed1, What: "Signed: signature drawn on the signing page", IP: "203.0.113.7", UserAgent: "Firefox/133.0"}}
	in.Signers[1].Events = []Event{{At: signed2, What: "Signed: typed name", IP: "2001:db8::42"}}
	finalized, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	standalone, err := Certificate(in, sum)
	if err != nil {
		t.Fatal(err)
	}
	text := sha256.Sum256([]byte(in.Body))
	textSum := hex.EncodeToString(text[:])

	ftext := lines(pdftest.Text(t, finalized))
	blocks := strings.LastIndex(ftext, "Signed electronically")
	cert := strings.Index(ftext, "Certificate of completion\nThis certificate records")
	if blocks < 0 || cert < blocks {
		t.Fatalf("the certificate does not follow the signature blocks:\n%s", ftext)
	}
	embedded := ftext[cert:]
	for _, want := range []string{
		"Contract ID\n" + in.ContractID,
		"Text SHA-256\n" + textSum,
		"Finalized PDF\n" + embeddedNote,
		"20 November 2026, 09:00:00 UTC\nContract created through the API by alice\nIP address 198.51.100.9 · user agent “curl/8.5.0”",
		"Contract completed: every signer has signed",
		"Signer 1 of 3\nFull name\nZoë Ångström",
		"Signed: signature drawn on the signing page\nIP address 203.0.113.7 · user agent “Firefox/133.0”",
		"Signer 2 of 3", "Signed: typed name\nIP address 2001:db8::42", "Signer 3 of 3",
	} {
		if !strings.Contains(embedded, want) {
			t.Errorf("the finalized PDF's certificate lacks %q:\n%s", want, embedded)
		}
	}
	stext := lines(pdftest.Text(t, standalone))
	for _, want := range []string{"Text SHA-256\n" + textSum, "Finalized PDF SHA-256\n" + sum} {
		if !strings.Contains(stext, want) {
			t.Errorf("the certificate lacks %q:\n%s", want, stext)
		}
	}
	if strings.Contains(stext, embeddedNote) || strings.Contains(embedded, "Finalized PDF SHA-256") {
		t.Error("a certificate says what the other does")
	}

	// All else is the same, line for line, but for the footers.
	same := func(text string, drop ...string) string {
		var out []string
		for _, line := range strings.Split(text, "\n") {
			if !strings.Contains(line, " · page ") && !slices.Contains(drop, line) {
				out = append(out, line)
			}
		}
		return strings.Join(out, "\n")
	}
	if a, b := same(embedded, "Finalized PDF", embeddedNote), same(stext, "Finalized PDF SHA-256", sum); a != b {
		t.Errorf("the two certificates differ:\n%s\n----\n%s", a, b)
	}
}

// lines is pdftotext's output without the empty lines it puts between
// blocks of text.
func lines(text string) string {
	return regexp.MustCompile(`\n\s*\n`).ReplaceAllString(text, "\n")
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

// TestCertificateClientText: a user agent, a name or an e-mail address is
// the client's text; whatever quotes or separators it holds, the
// certificate shows them escaped, so no client value closes its quotes or
// starts a clause of its own, while ordinary values read as typed.
func TestCertificateClientText(t *testing.T) {
	const firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
	tests := []struct {
		name                       string
		fullName, email, userAgent string
		want                       []string // lines as pdftotext prints them
	}{
		{name: "statements planted in the user agent", fullName: "Zoë Ångström", email: "zoe@example.org",
			userAgent: "Mozilla/5.0” · identity verified with passport no. X123 · IP address 10.0.0.1 “",
			want:      []string{`user agent “Mozilla/5.0\u201D \u00B7 identity verified with passport no. X123 \u00B7 IP address 10.0.0.1 \u201C”`}},
		{name: "straight quotes and a backslash", fullName: "Zoë Ångström", email: "zoe@example.org",
			userAgent: `curl/8.5.0" · verified \u201D`,
			want:      []string{`IP address 203.0.113.7 · user agent “curl/8.5.0\u0022 \u00B7 verified \u005Cu201D”`}},
		{name: "look-alikes of the quotes and the separator", fullName: "Zoë Ångström", email: "zoe@example.org",
			userAgent: "a•b‧c∙d⋅e・f״g″h„i‟j«k»l‹m›n「o」p’’q",
			want:      []string{`user agent “a\u2022b\u2027c\u2219d\u22C5e\u30FBf\u05F4g\u2033h\u201Ei\u201Fj\u00ABk\u00BBl\u2039m\u203An\u300Co\u300Dp’\u2019q”`}},
		{name: "a name and an e-mail address with quotes and separators", fullName: "Eve” · identity verified “Bob",
			email: "eve”·“@example.org", userAgent: "curl/8.5.0",
			want: []string{"Full name\nEve\\u201D \\u00B7 identity verified \\u201CBob\nE-mail\neve\\u201D\\u00B7\\u201C@example.org\n"}},
		{name: "ordinary values read as typed", fullName: "Zoë O’Brien-Ångström", email: "zoe.obrien@example.org", userAgent: firefox,
			want: []string{"Full name\nZoë O’Brien-Ångström\nE-mail\nzoe.obrien@example.org\n",
				"IP address 203.0.113.7 · user agent “" + firefox + "”"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleInput(t)
			in.Signers = in.Signers[:1]
			in.Signers[0].FullName, in.Signers[0].Email = tt.fullName, tt.email
			in.Signers[0].Events = []Event{{At: signed1, What: "Opened the signing page", IP: "203.0.113.7", UserAgent: tt.userAgent}}
			out, err := Certificate(in, strings.Repeat("ab", 32))
			if err != nil {
				t.Fatal(err)
			}
			text := lines(pdftest.Text(t, out))
			for _, want := range tt.want {
				if !strings.Contains(text, want) {
					t.Errorf("certificate lacks %q:\n%s", want, text)
				}
			}
			// The user agent's quotes are the certificate's: one pair,
			// nothing of the certificate's syntax between them.
			for _, line := range strings.Split(text, "\n") {
				_, ua, ok := strings.Cut(line, "user agent “")
				if !ok {
					continue
				}
				ua = strings.TrimSuffix(ua, "”")
				if i := strings.IndexAny(ua, "“”\"·"); i >= 0 {
					t.Errorf("the user agent's text holds %q: %q", ua[i:], line)
				}
			}
		})
	}
}

// TestClientTextIsolated: a value with Hebrew or Arabic letters is
// isolated (U+2068 to U+2069), so that, ordered right to left within
// itself, it stays between the certificate's words around it; other
// values are as typed.
func TestClientTextIsolated(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Zoë Ångström", "Zoë Ångström"},
		{"张伟", "张伟"},
		{"דוד כהן", "\u2068דוד כהן\u2069"},
		{"محمد علي 2", "\u2068محمد علي 2\u2069"},
		// isolates of the client's own are dropped first, like any
		// format character
		{"\u2069x\u2067", "x"},
	}
	for _, tt := range tests {
		if got := ClientText(tt.in); got != tt.want {
			t.Errorf("ClientText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestFinalizedClientText: the finalized PDF's own lines (the contract
// line under the title, the footer) print a contract name that imitates
// their syntax as escapes, as the certificate does.
func TestFinalizedClientText(t *testing.T) {
	in := sampleInput(t)
	in.Name = "NDA” · approved by the board · “x"
	out, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	text := lines(pdftest.Text(t, out))
	if want := `Contract “NDA\u201D \u00B7 approved by the board \u00B7 \u201Cx” · ` + in.ContractID; !strings.Contains(text, want) {
		t.Errorf("finalized PDF lacks %q:\n%s", want, text)
	}
	if strings.Contains(text, "NDA” · approved") {
		t.Errorf("the name's quote and separator print as the document's own:\n%s", text)
	}
}
