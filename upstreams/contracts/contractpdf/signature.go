package contractpdf

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"

	"github.com/go-pdf/fpdf"
)

// maxPixels bounds a signature image before it is decoded: a small PNG
// can claim an enormous canvas.
const maxPixels = 4096 * 4096

// Box of a signature image on the page, in millimetres.
const (
	sigMaxW = 70.0
	sigMaxH = 28.0
)

// sigImage is a signature image ready for fpdf.
type sigImage struct {
	data []byte
	kind string // "PNG" or "JPG"
	w, h int    // pixels
}

// prepareImage checks a PNG or JPEG and returns it in a form fpdf embeds.
// JPEG is embedded as it is. PNG is redrawn as 8-bit non-interlaced RGBA,
// because fpdf refuses 16-bit and interlaced PNGs, which browsers and image
// editors do produce.
func prepareImage(b []byte) (sigImage, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return sigImage{}, errors.New("signature is not a PNG or JPEG image")
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width*cfg.Height > maxPixels {
		return sigImage{}, fmt.Errorf("signature image of %dx%d pixels is out of bounds", cfg.Width, cfg.Height)
	}
	switch format {
	case "jpeg":
		if _, err := jpeg.Decode(bytes.NewReader(b)); err != nil {
			return sigImage{}, fmt.Errorf("signature JPEG: %w", err)
		}
		return sigImage{data: b, kind: "JPG", w: cfg.Width, h: cfg.Height}, nil
	case "png":
		src, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			return sigImage{}, fmt.Errorf("signature PNG: %w", err)
		}
		dst := image.NewNRGBA(image.Rect(0, 0, cfg.Width, cfg.Height))
		draw.Draw(dst, dst.Bounds(), src, src.Bounds().Min, draw.Src)
		var out bytes.Buffer
		if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, dst); err != nil {
			return sigImage{}, fmt.Errorf("signature PNG: %w", err)
		}
		return sigImage{data: out.Bytes(), kind: "PNG", w: cfg.Width, h: cfg.Height}, nil
	default:
		return sigImage{}, fmt.Errorf("signature is %s, not PNG or JPEG", format)
	}
}

// place draws img at the current position, scaled to fit the signature box
// with its aspect ratio kept, and moves below it.
func (d *document) place(name string, img sigImage) error {
	scale := min(sigMaxW/float64(img.w), sigMaxH/float64(img.h))
	w, h := float64(img.w)*scale, float64(img.h)*scale
	opts := fpdf.ImageOptions{ImageType: img.kind}
	d.f.RegisterImageOptionsReader(name, opts, bytes.NewReader(img.data))
	if err := d.f.Error(); err != nil {
		return fmt.Errorf("contractpdf: signature image: %w", err)
	}
	d.f.ImageOptions(name, d.f.GetX(), d.f.GetY(), w, h, true, opts, 0, "")
	return nil
}
