package contractpdf

import "unicode"

// fpdf draws one glyph per character, the one the font's character map
// gives, and knows nothing of a font's shaping tables (GSUB, GPOS). What
// the scripts of names need most is done here by choosing other
// characters: Arabic letters in the presentation form their neighbours
// ask for, and the Devanagari vowel sign I before its consonants. The
// rest (Devanagari conjuncts, which show as consonants with a visible
// virama, mark positioning) is left to the fonts' default glyphs.

// arabicForms maps an Arabic letter to its presentation forms: isolated,
// final, initial, medial, 0 where it has none (a letter that joins only
// the letter before it has neither initial nor medial form). A test
// checks each against the form's compatibility decomposition.
var arabicForms = func() map[rune][4]rune {
	m := map[rune][4]rune{}
	// Arabic Presentation Forms-B, from U+FE80: each letter of the
	// basic alphabet with its forms in that order.
	next := rune(0xFE80)
	for _, l := range []struct {
		letter rune
		forms  int
	}{
		{0x0621, 1}, {0x0622, 2}, {0x0623, 2}, {0x0624, 2}, {0x0625, 2}, {0x0626, 4}, {0x0627, 2}, {0x0628, 4},
		{0x0629, 2}, {0x062A, 4}, {0x062B, 4}, {0x062C, 4}, {0x062D, 4}, {0x062E, 4}, {0x062F, 2}, {0x0630, 2},
		{0x0631, 2}, {0x0632, 2}, {0x0633, 4}, {0x0634, 4}, {0x0635, 4}, {0x0636, 4}, {0x0637, 4}, {0x0638, 4},
		{0x0639, 4}, {0x063A, 4}, {0x0641, 4}, {0x0642, 4}, {0x0643, 4}, {0x0644, 4}, {0x0645, 4}, {0x0646, 4},
		{0x0647, 4}, {0x0648, 2}, {0x0649, 2}, {0x064A, 4},
	} {
		var f [4]rune
		for i := range l.forms {
			f[i] = next + rune(i)
		}
		m[l.letter] = f
		next += rune(l.forms)
	}
	// Arabic Presentation Forms-A: the letters Persian and Urdu add.
	for _, l := range []struct {
		letter, first rune
		forms         int
	}{
		{0x0671, 0xFB50, 2}, {0x067E, 0xFB56, 4}, {0x0679, 0xFB66, 4}, {0x0686, 0xFB7A, 4}, {0x0688, 0xFB88, 2},
		{0x0698, 0xFB8A, 2}, {0x0691, 0xFB8C, 2}, {0x06A9, 0xFB8E, 4}, {0x06AF, 0xFB92, 4}, {0x06BA, 0xFB9E, 2},
		{0x06C1, 0xFBA6, 4}, {0x06BE, 0xFBAA, 4}, {0x06D2, 0xFBAE, 2}, {0x06CC, 0xFBFC, 4},
	} {
		var f [4]rune
		for i := range l.forms {
			f[i] = l.first + rune(i)
		}
		m[l.letter] = f
	}
	return m
}()

// lamAlef maps the alef that follows a lam to their ligature's isolated
// form; its final form is the next character.
var lamAlef = map[rune]rune{0x0622: 0xFEF5, 0x0623: 0xFEF7, 0x0625: 0xFEF9, 0x0627: 0xFEFB}

const (
	lam     = 0x0644
	tatweel = 0x0640
)

// shapeArabic gives each Arabic letter of gs the form its neighbours ask
// for (a letter joins the one before it when both join on that side;
// combining marks between them do not count) and makes lam and alef one
// ligature, where the Arabic face has the form. A joined letter stands
// for its letter (ActualText), so that the text reads back as written. A
// lam-alef ligature has no ActualText: poppler reads the text of a
// glyph, left to right, before it orders right-to-left text, so two
// letters of one glyph would come out reversed; it reads back as the
// ligature's own character, which NFKC normalisation, and the search of
// common viewers, take for lam and alef.
func shapeArabic(gs []glyph) []glyph {
	if !hasArabic(gs) {
		return gs
	}
	af := textFaces[arabicFace]
	letters := make([]rune, len(gs))
	for i, g := range gs {
		letters[i] = g.r
		if g.face != arabicFace {
			letters[i] = 0
		}
	}
	// neighbour is the index of the letter before (step -1) or after
	// (+1) i, past combining marks; -1 if none.
	neighbour := func(i, step int) int {
		for j := i + step; j >= 0 && j < len(gs); j += step {
			if !unicode.In(gs[j].r, unicode.Mn, unicode.Me) {
				return j
			}
		}
		return -1
	}
	joinsAfter := func(i int) bool { // joins the letter after it
		f, ok := arabicForms[letters[i]]
		return letters[i] == tatweel || ok && f[2] != 0
	}
	joinsBefore := func(i int) bool { // joins the letter before it
		f, ok := arabicForms[letters[i]]
		return letters[i] == tatweel || ok && f[1] != 0
	}
	out := gs[:0:0]
	for i := 0; i < len(gs); i++ {
		g := gs[i]
		forms, ok := arabicForms[letters[i]]
		if !ok {
			out = append(out, g)
			continue
		}
		prev, next := neighbour(i, -1), neighbour(i, 1)
		afterPrev := prev >= 0 && joinsAfter(prev) && forms[1] != 0
		if letters[i] == lam && i+1 < len(gs) && lamAlef[letters[i+1]] != 0 {
			lig := lamAlef[letters[i+1]]
			if afterPrev {
				lig++
			}
			if af.has(lig) {
				g.r = lig
				out = append(out, g)
				i++ // the alef is in the ligature
				continue
			}
		}
		beforeNext := next >= 0 && forms[2] != 0 && joinsBefore(next)
		form := forms[0] // isolated
		switch {
		case afterPrev && beforeNext:
			form = forms[3]
		case afterPrev:
			form = forms[1]
		case beforeNext:
			form = forms[2]
		}
		if form != 0 && form != g.r && af.has(form) {
			g.actual, g.cover = string(g.r), 1
			g.r = form
		}
		out = append(out, g)
	}
	return out
}

func hasArabic(gs []glyph) bool {
	for _, g := range gs {
		if g.face == arabicFace {
			return true
		}
	}
	return false
}

// Devanagari characters the reordering looks at.
const (
	vowelSignI = 0x093F
	nukta      = 0x093C
	virama     = 0x094D
)

func isDevanagariConsonant(r rune) bool {
	return r >= 0x0915 && r <= 0x0939 || r >= 0x0958 && r <= 0x095F || r >= 0x0978 && r <= 0x097F
}

// reorderDevanagari moves each vowel sign I, written after its consonant
// (or conjunct: consonants joined by viramas) but drawn before it, in
// front of them. The moved glyphs stand for the consonants and the sign
// in the order written (ActualText), so that the text reads back as
// written.
func reorderDevanagari(gs []glyph) {
	for i := range gs {
		if gs[i].r != vowelSignI || gs[i].face != devanagariFace {
			continue
		}
		start := -1
		for k := i - 1; ; k -= 2 {
			if k >= 0 && gs[k].r == nukta {
				k--
			}
			if k < 0 || gs[k].face != devanagariFace || !isDevanagariConsonant(gs[k].r) {
				break
			}
			start = k
			if k < 1 || gs[k-1].r != virama {
				break
			}
		}
		if start < 0 {
			continue
		}
		written := make([]rune, 0, i-start+1)
		for _, g := range gs[start : i+1] {
			written = append(written, g.r)
		}
		sign := gs[i]
		copy(gs[start+1:i+1], gs[start:i])
		gs[start] = sign
		gs[start].actual, gs[start].cover = string(written), i-start+1
	}
}
