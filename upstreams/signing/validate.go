package signing

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // signatures are PNG or JPEG
	_ "image/png"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
	"github.com/keygate/keygate/upstreams/contracts"
)

// Limits of a decision.
const (
	// maxSignatureBytes bounds a signature image (spec: up to 1 MiB).
	maxSignatureBytes = 1 << 20
	// maxSignatureSide bounds its width and height before it is decoded:
	// a small PNG can claim an enormous canvas. Within it, contractpdf's
	// bound of 4096×4096 pixels holds too.
	maxSignatureSide = 4096
	maxTypedName     = 255
	maxReason        = 2000
)

// decisionInput is the decision request as sent, by JSON or form.
type decisionInput struct {
	Decision  string `json:"decision"`
	OTP       string `json:"otp"`
	Method    string `json:"method"`
	Signature string `json:"signature"`
	Reason    string `json:"reason"`
	// file is a signature image sent as a multipart file part.
	file    []byte
	hasFile bool
}

// validateDecision checks in against signer sg's options, listing every
// violation, and returns the decision to record. The one-time password is
// checked later, in the transaction that records the decision.
func validateDecision(in *decisionInput, sg *contracts.Signer) (*decision, error) {
	var f problem.Fields
	d := &decision{Decision: in.Decision, OTP: strings.TrimSpace(in.OTP), Method: in.Method}
	switch in.Decision {
	case "":
		f.Add("decision", "required", "decision is required: signed or rejected")
	case contracts.DecisionSigned, contracts.DecisionRejected:
	default:
		f.Add("decision", "invalid", "decision must be signed or rejected")
	}
	if in.Decision == contracts.DecisionSigned {
		switch {
		case in.Method == "":
			f.Add("method", "required", "method is required when signing: one of "+strings.Join(sg.SigningMethods, ", "))
		case !slices.Contains(sg.SigningMethods, in.Method):
			f.Add("method", "not_allowed", "method must be one of "+strings.Join(sg.SigningMethods, ", "))
		case in.Method == contracts.MethodRender:
			name := strings.TrimSpace(in.Signature)
			if name == "" {
				f.Add("signature", "required", "signature is required: the name to render")
			} else if !text.Printable(name, maxTypedName) {
				f.Add("signature", "invalid", "the typed name must be 1 to 255 printable characters")
			}
			d.TypedName = name
		default:
			img, code, msg := signatureImage(in, in.Method == contracts.MethodDraw)
			if code != "" {
				f.Add("signature", code, msg)
			}
			d.Signature = img
		}
		if in.Reason != "" {
			f.Add("reason", "not_allowed", "reason is only given when rejecting")
		}
	}
	if in.Decision == contracts.DecisionRejected {
		d.Reason = strings.TrimSpace(strings.ReplaceAll(in.Reason, "\r\n", "\n"))
		if !validReason(d.Reason) {
			f.Add("reason", "invalid", fmt.Sprintf("reason must be at most %d printable characters", maxReason))
		}
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return d, nil
}

func validReason(s string) bool {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > maxReason {
		return false
	}
	for _, r := range s {
		if r != '\n' && !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// signatureImage reads the image of an upload or draw signature: a file
// part, or base64 text, optionally as a data: URL. It returns a field
// error code and message when it is not a PNG or JPEG of at most 1 MiB
// that decodes, or, for a drawing, when nothing was drawn.
func signatureImage(in *decisionInput, drawn bool) ([]byte, string, string) {
	var raw []byte
	switch {
	case in.hasFile:
		raw = in.file
	case strings.TrimSpace(in.Signature) == "":
		return nil, "required", "signature is required: a PNG or JPEG image"
	default:
		var ok bool
		if raw, ok = decodeBase64(in.Signature); !ok {
			return nil, "invalid", "signature must be a base64 PNG or JPEG image"
		}
	}
	if len(raw) > maxSignatureBytes {
		return nil, "too_large", "the signature image must be at most 1 MiB"
	}
	if len(raw) == 0 {
		return nil, "required", "signature is required: a PNG or JPEG image"
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || (format != "png" && format != "jpeg") {
		return nil, "invalid", "signature must be a PNG or JPEG image"
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width > maxSignatureSide || cfg.Height > maxSignatureSide {
		return nil, "invalid", "the signature image must be at most 4096 by 4096 pixels"
	}
	img, _, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		return nil, "invalid", "the signature image is damaged"
	}
	if drawn && blank(img) {
		return nil, "blank", "the drawn signature is empty: draw your signature first"
	}
	return raw, "", ""
}

// decodeBase64 accepts standard or URL-safe base64, padded or not, with
// line breaks, optionally as a data: URL.
func decodeBase64(s string) ([]byte, bool) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "data:") {
		i := strings.Index(s, ",")
		if i < 0 || !strings.HasSuffix(s[:i], ";base64") {
			return nil, false
		}
		s = s[i+1:]
	}
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, s)
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		b, err := base64.RawURLEncoding.DecodeString(s)
		return b, err == nil
	}
	b, err := base64.RawStdEncoding.DecodeString(s)
	return b, err == nil
}

// blank reports whether img shows nothing: every pixel transparent or
// near white.
func blank(img image.Image) bool {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			if c.A > 16 && (c.R < 230 || c.G < 230 || c.B < 230) {
				return false
			}
		}
	}
	return true
}
