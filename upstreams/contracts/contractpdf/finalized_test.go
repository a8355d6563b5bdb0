package contractpdf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/pdftest"
)

// drawnSignature is a PNG like the signing page's canvas produces: a
// transparent background with a dark stroke.
func drawnSignature(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for x := 5; x < w-5; x++ {
		y := h/2 + int(float64(h/4)*math.Sin(float64(x)/12))
		for dy := -1; dy <= 1; dy++ {
			img.SetNRGBA(x, y+dy, color.NRGBA{R: 10, G: 20, B: 90, A: 255})
		}
	}
	return encodePNG(t, img)
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func uploadedJPEG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: uint8(x), G: uint8(y), B: 200, A: 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var (
	created = time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	signed1 = time.Date(2026, 11, 21, 14, 3, 7, 250e6, time.UTC)
	signed2 = time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)
	signed3 = time.Date(2026, 11, 22, 18, 45, 30, 125e6, time.UTC)
)

func sampleInput(t *testing.T) Input {
	t.Helper()
	var body strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&body, "Clause %d. The parties agree that the services described in this agreement are provided with due care, and that confidential information stays confidential for five years after the end of the agreement.\n\n", i)
	}
	body.WriteString("Clause 41. Gerichtsstand ist Zürich; Стороны согласны.")
	return Input{
		ContractID:    "7c0e2f4a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
		Name:          "NDA Zoë 2026",
		TemplateTitle: "Mutual Non-Disclosure Agreement",
		Body:          body.String(),
		Created:       created,
		Signers: []Signer{
			{FullName: "Zoë Ångström", Email: "zoe@example.org", Phone: "+46701234567", Method: MethodDraw, Signature: drawnSignature(t, 400, 120),
				AppendSignatureMacro: true, Decision: DecisionSigned, DecisionTime: signed1, DecisionIP: "203.0.113.7", Opened: signed1.Add(-time.Hour)},
			{FullName: "Дмитрий Иванов", Email: "dmitry@example.org", Method: MethodRender, TypedName: "Дмитрий Иванов",
				AppendSignatureMacro: true, Decision: DecisionSigned, DecisionTime: signed2, DecisionIP: "2001:db8::42", Opened: signed2.Add(-time.Minute)},
			{FullName: "Kim Upload", Email: "kim@example.org", Method: MethodUpload, Signature: uploadedJPEG(t, 200, 80),
				Decision: DecisionSigned, DecisionTime: signed3, DecisionIP: "198.51.100.1", Opened: signed3.Add(-2 * time.Second)},
		},
	}
}

func TestFinalized(t *testing.T) {
	in := sampleInput(t)
	out, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, []byte("%PDF-1.5")) {
		t.Fatalf("not a PDF 1.5, the version a seal declares: %q", out[:16])
	}
	doc := pdftest.Read(t, out)
	if doc.Pages < 2 {
		t.Errorf("pages = %d; the body should wrap onto a second page", doc.Pages)
	}
	for _, want := range []string{
		"Mutual Non-Disclosure Agreement",
		"Contract “NDA Zoë 2026” · 7c0e2f4a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
		"Clause 1. ", "Clause 40. ", "Gerichtsstand ist Zürich; Стороны согласны.",
		"Signatures",
		"Zoë Ångström", "Дмитрий Иванов", "Kim Upload",
		"Signed 21 November 2026, 14:03:07 UTC · signature drawn on the signing page",
		"Signed 22 November 2026, 10:15:00 UTC · typed name",
		"Signed 22 November 2026, 18:45:30 UTC · uploaded signature image",
		fmt.Sprintf("page 1/%d", doc.Pages),
	} {
		if !strings.Contains(doc.Text, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	// The signature blocks follow the signatures, one per signer with the
	// macro, in signer order.
	blocks := strings.Count(doc.Text, "Signed electronically")
	if blocks != 2 {
		t.Errorf("%d signature blocks, want 2", blocks)
	}
	sigs := strings.Index(doc.Text, "Signatures")
	first := strings.Index(doc.Text, "Signed electronically")
	if sigs < 0 || first < sigs || !strings.Contains(doc.Text[sigs:], "Zoë Ångström\n21 November 2026, 14:03:07 UTC\nSigned electronically\nДмитрий Иванов\n22 November 2026, 10:15:00 UTC\nSigned electronically") {
		t.Errorf("signature blocks are not at the end in signer order:\n%s", doc.Text[max(0, sigs):])
	}

	// Drawn and uploaded signatures are embedded as images of their own size.
	if len(doc.Images) != 2 {
		t.Fatalf("images = %+v, want the drawn PNG and the uploaded JPEG", doc.Images)
	}
	if im := doc.Images[0]; im.W != 400 || im.H != 120 || im.Filter != "FlateDecode" {
		t.Errorf("drawn signature embedded as %+v", im)
	}
	if im := doc.Images[1]; im.W != 200 || im.H != 80 || im.Filter != "DCTDecode" {
		t.Errorf("uploaded signature embedded as %+v", im)
	}

	again, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, again) {
		t.Error("rendering the same contract twice gave different files")
	}
}

// TestSignatureImageFormats: the PNG variants that browsers and editors
// produce are embedded, and what is not an image is refused.
func TestSignatureImageFormats(t *testing.T) {
	gray16 := image.NewGray16(image.Rect(0, 0, 60, 20))
	gray16.SetGray16(3, 3, color.Gray16{Y: 0x1234})
	rgba64 := image.NewNRGBA64(image.Rect(0, 0, 60, 20))
	rgba64.SetNRGBA64(5, 5, color.NRGBA64{R: 0xffff, A: 0x8000})
	paletted := image.NewPaletted(image.Rect(0, 0, 60, 20), color.Palette{color.Transparent, color.Black})
	paletted.SetColorIndex(4, 4, 1)
	var gifBuf bytes.Buffer
	if err := gif.Encode(&gifBuf, paletted, nil); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		image   []byte
		wantErr bool
	}{
		{"8-bit RGBA PNG with transparency", drawnSignature(t, 300, 90), false},
		{"16-bit gray PNG", encodePNG(t, gray16), false},
		{"16-bit RGBA PNG", encodePNG(t, rgba64), false},
		{"paletted PNG", encodePNG(t, paletted), false},
		{"JPEG", uploadedJPEG(t, 64, 32), false},
		{"GIF", gifBuf.Bytes(), true},
		{"not an image", []byte("<svg/>"), true},
		{"truncated PNG", drawnSignature(t, 300, 90)[:100], true},
		{"PNG claiming 60000x60000 pixels", hugePNG(t), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleInput(t)
			in.Signers = in.Signers[:1]
			in.Signers[0].Method = MethodUpload
			in.Signers[0].Signature = tt.image
			out, err := Finalized(in)
			if tt.wantErr {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if doc := pdftest.Read(t, out); len(doc.Images) != 1 {
				t.Fatalf("images = %+v", doc.Images)
			}
		})
	}
}

// hugePNG is a valid PNG whose header claims a huge canvas.
func hugePNG(t *testing.T) []byte {
	t.Helper()
	b := encodePNG(t, image.NewGray(image.Rect(0, 0, 1, 1)))
	// IHDR data starts at byte 16: width, height, then 5 bytes; CRC at 29.
	binary.BigEndian.PutUint32(b[16:], 60000)
	binary.BigEndian.PutUint32(b[20:], 60000)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

func TestFinalizedRefusesIncomplete(t *testing.T) {
	tests := []struct {
		name   string
		change func(in *Input)
	}{
		{"no signers", func(in *Input) { in.Signers = nil }},
		{"a signer rejected", func(in *Input) { in.Signers[1].Decision = DecisionRejected }},
		{"a signer undecided", func(in *Input) { in.Signers[2].Decision = "" }},
		{"drawn signature without image", func(in *Input) { in.Signers[0].Signature = nil }},
		{"typed signature without name", func(in *Input) { in.Signers[1].TypedName = "" }},
		{"unknown method", func(in *Input) { in.Signers[2].Method = "stamp" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleInput(t)
			tt.change(&in)
			if _, err := Finalized(in); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestPrintable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Zoë Ångström", "Zoë Ångström"},
		{"Дмитрий", "Дмитрий"},
		{"Ελένη", "Ελένη"},
		{"a\r\nb\tc", "a\nb    c"},
		{"no\u00a0break", "no break"},
		{"zero\u200bwidth\x07bell", "zerowidthbell"},
		{"山田 😀", "山田 ?"},
		{"محمد דוד राहुल 김", "محمد דוד राहुल 김"},
		{"\U00020000 \u0E01", "? ?"},                             // CJK Extension B; Thai, which no face draws
		{"Nguye\u0302\u0303n Thi\u0323 Minh", "Nguyễn Thị Minh"}, // composed
		{"bad \xff byte", "bad ? byte"},
	}
	for _, tt := range tests {
		if got := printable(tt.in); got != tt.want {
			t.Errorf("printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestSignatureBlockLongName: a name too long for the block is shortened
// there with an ellipsis, and printed whole above its signature.
func TestSignatureBlockLongName(t *testing.T) {
	in := sampleInput(t)
	in.Signers = in.Signers[1:2]
	long := strings.TrimSpace(strings.Repeat("Дмитрий ", 30))
	in.Signers[0].FullName = long
	out, err := Finalized(in)
	if err != nil {
		t.Fatal(err)
	}
	doc := pdftest.Read(t, out)
	if !strings.Contains(doc.Text, "…\n22 November 2026, 10:15:00 UTC\nSigned electronically") {
		t.Errorf("long name not shortened in the signature block:\n%s", doc.Text)
	}
	if !strings.Contains(strings.ReplaceAll(doc.Text, "\n", " "), long) {
		t.Error("full name missing above the signature")
	}
}

// TestTypedInHandwriting: a typed signature is set in the embedded
// handwriting font when it has every letter, in italics otherwise.
func TestTypedInHandwriting(t *testing.T) {
	for _, tc := range []struct {
		name string
		hand bool
	}{{"Zoe Angstrom", true}, {"Дмитрий Иванов", false}} {
		in := sampleInput(t)
		for i := range in.Signers {
			in.Signers[i].Method, in.Signers[i].TypedName, in.Signers[i].Signature = MethodRender, tc.name, nil
		}
		pdf, err := Finalized(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(pdf, []byte("/BaseFont /utf8hand")); got != tc.hand {
			t.Errorf("%s: the handwriting font embedded %v, want %v", tc.name, got, tc.hand)
		}
		text := pdftest.Read(t, pdf).Text
		if !strings.Contains(text, tc.name) {
			t.Errorf("%s: the name is not in the document", tc.name)
		}
		if !strings.Contains(strings.ReplaceAll(text, "\n", " "), "This document is sealed") {
			t.Errorf("no line saying the document is sealed:\n%s", text)
		}
	}
}
