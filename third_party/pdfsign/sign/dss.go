package sign

// keygate: this file is keygate's, not upstream's. It adds a Document
// Security Store (ISO 32000-2, 12.8.4.3; ETSI EN 319 142-1, 5.4.2) by an
// incremental update, which is what lifts a PAdES signature to B-LT.

import (
	"bytes"
	"fmt"
	"io"
	"strconv"

	"github.com/digitorus/pdf"
	"github.com/mattetti/filebuffer"
)

// DSS is the validation data a Document Security Store holds: DER
// certificates, OCSP responses and CRLs. It writes no /VRI (which
// signature each item validates): ISO 32000-2 and ETSI EN 319 142-1 make
// it optional, verifiers look through the lists, and pdfcpu refuses a
// DSS with one as unsupported.
type DSS struct {
	Certs, OCSPs, CRLs [][]byte
}

// AddDSS writes input (of size bytes, read by rdr) to output with dss in
// an incremental update: a stream per item, the /DSS dictionary, and a
// catalog that names it (an existing /DSS is replaced). It changes
// nothing a signature covers, so every signature of input stays valid;
// ISO 32000-2 (12.8.2.2.2) does not count such an update as a change
// under a certification's DocMDP permissions.
func AddDSS(input io.ReadSeeker, output io.Writer, rdr *pdf.Reader, size int64, dss DSS) error {
	context := SignContext{PDFReader: rdr, InputFile: input, OutputFile: output}
	context.OutputBuffer = filebuffer.New([]byte{})
	if _, err := input.Seek(0, 0); err != nil {
		return err
	}
	if _, err := io.CopyN(context.OutputBuffer, input, size); err != nil {
		return err
	}
	if _, err := context.OutputBuffer.Write([]byte("\n")); err != nil {
		return err
	}

	streams := func(items [][]byte) ([]uint32, error) {
		ids := make([]uint32, len(items))
		for i, item := range items {
			var b bytes.Buffer
			fmt.Fprintf(&b, "<< /Length %d >>\nstream\n", len(item))
			b.Write(item)
			b.WriteString("\nendstream")
			id, err := context.addObject(b.Bytes())
			if err != nil {
				return nil, err
			}
			ids[i] = id
		}
		return ids, nil
	}
	certs, err := streams(dss.Certs)
	if err != nil {
		return err
	}
	ocsps, err := streams(dss.OCSPs)
	if err != nil {
		return err
	}
	crls, err := streams(dss.CRLs)
	if err != nil {
		return err
	}

	var d bytes.Buffer
	d.WriteString("<< /Type /DSS\n")
	for _, list := range []struct {
		name string
		ids  []uint32
	}{{"Certs", certs}, {"OCSPs", ocsps}, {"CRLs", crls}} {
		if len(list.ids) == 0 {
			continue
		}
		d.WriteString(" /" + list.name + " [")
		for i, id := range list.ids {
			if i > 0 {
				d.WriteString(" ")
			}
			d.WriteString(strconv.Itoa(int(id)) + " 0 R")
		}
		d.WriteString("]\n")
	}
	d.WriteString(">>")
	dssID, err := context.addObject(d.Bytes())
	if err != nil {
		return err
	}

	// The catalog as it is, with /DSS in place of any earlier one.
	root := rdr.Trailer().Key("Root")
	rootPtr := root.GetPtr()
	context.CatalogData.RootString = strconv.Itoa(int(rootPtr.GetID())) + " " + strconv.Itoa(int(rootPtr.GetGen())) + " R"
	var catalog bytes.Buffer
	catalog.WriteString("<<\n")
	for _, key := range root.Keys() {
		if key == "DSS" {
			continue
		}
		fmt.Fprintf(&catalog, "  /%s ", key)
		context.serializeCatalogEntry(&catalog, rootPtr.GetID(), root.Key(key))
		catalog.WriteString("\n")
	}
	catalog.WriteString("  /DSS " + strconv.Itoa(int(dssID)) + " 0 R\n>>\n")
	if context.CatalogData.ObjectId, err = context.addObject(catalog.Bytes()); err != nil {
		return err
	}

	if err := context.writeXref(); err != nil {
		return fmt.Errorf("failed to write xref: %w", err)
	}
	if err := context.writeTrailer(); err != nil {
		return fmt.Errorf("failed to write trailer: %w", err)
	}
	_, err = output.Write(context.OutputBuffer.Buff.Bytes())
	return err
}
