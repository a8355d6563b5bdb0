package contracts

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
)

// source is one key range that yields candidate row keys: an index prefix
// (whose keys end in a row key) or the rows bucket itself.
type source struct {
	bucket []byte
	prefix []byte
	// dated: the row key follows the prefix directly, so the creation date
	// range narrows the key range.
	dated bool
	// expiry: the keys are expiration ms then row key, and only those due
	// at now are wanted.
	expiry bool
}

// plan is the sources a search reads, chosen for the fewest candidates.
type plan struct {
	sources []source
	// indexed: candidates come from an index and their row must be read.
	indexed bool
	cost    uint64
}

// match is a row that passed every filter, with its sort keys. All
// slices point into the read transaction's memory.
type match struct {
	rk         []byte
	key1, key2 []byte
}

// indexCostFactor weighs a candidate found through an index (key, then
// a row lookup) against one found by reading rows in order.
const indexCostFactor = 3

// Search implements Backend. Its cost follows the candidates of the most
// selective filter among template, creator, template and creator,
// placement and status, narrowed by the date range; only the returned
// page's records are decoded.
func (b *BoltBackend) Search(ctx context.Context, stx storage.Tx, q *Query, now time.Time) (int, []*Contract, error) {
	tx := boltdb.Of(stx)
	p := choosePlan(tx, q)
	sc := &scan{tx: tx, rows: tx.Bucket(bucketRows), q: q, p: &p, f: newFilter(q, now.UnixMilli()), now: now, ctx: ctx}
	var page []match
	var total int
	var err error
	if len(p.sources) == 1 && p.sources[0].dated &&
		(q.Order == OrderCreationDateAsc || q.Order == OrderCreationDateDesc) {
		total, page, err = sc.window()
	} else {
		var matches []match
		for _, src := range p.sources {
			if err = sc.each(src, false, func(m match) { matches = append(matches, m) }); err != nil {
				return 0, nil, err
			}
		}
		total = len(matches)
		page = pageOf(matches, q)
	}
	if err != nil {
		return 0, nil, err
	}
	out := make([]*Contract, 0, len(page))
	for _, m := range page {
		c, err := boltLoad(tx, rowKey(m.rk).id())
		if err != nil {
			return 0, nil, err
		}
		out = append(out, c)
	}
	return total, out, nil
}

// scan reads candidates of one search inside its read transaction.
type scan struct {
	ctx  context.Context
	tx   *bbolt.Tx
	rows *bbolt.Bucket
	q    *Query
	p    *plan
	f    *filter
	now  time.Time
	seen int
}

// each calls fn with every match that src yields, in key order or, if
// reverse, against it.
func (sc *scan) each(src source, reverse bool, fn func(match)) error {
	cur := sc.tx.Bucket(src.bucket).Cursor()
	lower, upper := src.prefix, []byte(nil) // lower ≤ key < upper
	if src.dated {
		if !sc.q.From.IsZero() {
			from := msBound(sc.q.From)
			lower = append(slices.Clip(src.prefix), from[:]...)
		}
		if !sc.q.To.IsZero() {
			to := msBound(sc.q.To)
			upper = append(slices.Clip(src.prefix), to[:]...)
		}
	}
	if src.expiry {
		due := msBound(sc.now.Add(time.Millisecond))
		upper = due[:]
	}
	var k, v []byte
	if !reverse {
		k, v = cur.Seek(lower)
	} else {
		if upper == nil {
			// Past every key of the prefix: time keys start below 0x80.
			upper = append(slices.Clip(src.prefix), 0xff)
		}
		if k, v = cur.Seek(upper); k == nil {
			k, v = cur.Last()
		} else {
			k, v = cur.Prev()
		}
	}
	// Forward stops at upper; backward started below it and stops at lower.
	for ; k != nil && bytes.HasPrefix(k, src.prefix); k, v = sc.step(cur, reverse) {
		if reverse && bytes.Compare(k, lower) < 0 || !reverse && upper != nil && bytes.Compare(k, upper) >= 0 {
			break
		}
		if sc.seen++; sc.seen&0x1fff == 0 {
			if err := sc.ctx.Err(); err != nil {
				return err
			}
		}
		rk := k[len(k)-rowKeyLen:]
		r := row(v)
		if sc.p.indexed {
			if r = row(sc.rows.Get(rk)); r == nil {
				continue
			}
		}
		if src.expiry && sc.f.scanned(r.status()) {
			continue // read already through its own status prefix
		}
		if m, ok := sc.f.match(rk, r); ok {
			fn(m)
		}
	}
	return nil
}

func (sc *scan) step(cur *bbolt.Cursor, reverse bool) ([]byte, []byte) {
	if reverse {
		return cur.Prev()
	}
	return cur.Next()
}

// window serves the creation orders from a source already in creation
// order without collecting or sorting every match: it counts them all
// but keeps only the page. Descending reads backwards; ties (same
// millisecond) still go by ascending id, so each tie group is turned
// around before the page is cut.
func (sc *scan) window() (int, []match, error) {
	start := (sc.q.Page - 1) * sc.q.PageSize
	stop := start + sc.q.PageSize
	desc := sc.q.Order == OrderCreationDateDesc
	total := 0
	var kept []match
	err := sc.each(sc.p.sources[0], desc, func(m match) {
		total++
		switch {
		case !desc:
			if total > start && total <= stop {
				kept = append(kept, m)
			}
		case len(kept) < stop:
			kept = append(kept, m)
		case bytes.Equal(kept[len(kept)-1].rk[:8], m.rk[:8]):
			// Complete the tie group the page boundary cuts through.
			kept = append(kept, m)
		}
	})
	if err != nil || !desc {
		return total, kept, err
	}
	for i := 0; i < len(kept); {
		j := i + 1
		for j < len(kept) && bytes.Equal(kept[j].rk[:8], kept[i].rk[:8]) {
			j++
		}
		slices.Reverse(kept[i:j])
		i = j
	}
	if start >= len(kept) {
		return total, nil, nil
	}
	return total, kept[start:min(stop, len(kept))], nil
}

// msBound is t as a time key, clamped to the epoch: no contract is older.
func msBound(t time.Time) [8]byte {
	if t.UnixMilli() < 0 {
		return [8]byte{}
	}
	return millisKey(t)
}

// choosePlan picks, from the counters, the sources with the fewest
// candidates for q.
func choosePlan(tx *bbolt.Tx, q *Query) plan {
	counts := tx.Bucket(bucketCounts)
	count := func(key string) uint64 { return readCount(counts, []byte(key)) }
	best := plan{sources: []source{{bucket: bucketRows, dated: true}}, cost: count(countAll)}
	consider := func(cost uint64, sources ...source) {
		if cost*indexCostFactor < best.cost {
			best = plan{sources: sources, indexed: true, cost: cost * indexCostFactor}
		}
	}
	switch {
	case q.TemplateID != "" && q.CreatorID != "":
		consider(count(countTemplateCreator+q.TemplateID+"\x00"+q.CreatorID),
			source{bucket: bucketByTemplateCreator, prefix: prefixOf(q.TemplateID, q.CreatorID), dated: true})
	case q.TemplateID != "":
		consider(count(countTemplate+q.TemplateID),
			source{bucket: bucketByTemplate, prefix: prefixOf(q.TemplateID), dated: true})
	case q.CreatorID != "":
		consider(count(countCreator+q.CreatorID),
			source{bucket: bucketByCreator, prefix: prefixOf(q.CreatorID), dated: true})
	}
	if q.Placement != "" {
		pb := placementByte(q.Placement)
		consider(count(string([]byte{countPlacement[0], 0, pb})),
			source{bucket: bucketByPlacement, prefix: []byte{pb}, dated: true})
	}
	if q.Statuses != nil {
		var cost uint64
		var sources []source
		expired := false
		for _, st := range q.Statuses {
			sb := statusByte(st)
			cost += count(string([]byte{countStatus[0], 0, sb}))
			sources = append(sources, source{bucket: bucketByStatus, prefix: []byte{sb}, dated: true})
			expired = expired || st == StatusExpired
		}
		if expired {
			// Contracts stored as sent or ongoing whose time has come.
			for _, st := range [...]Status{StatusSent, StatusOngoing} {
				if !slices.Contains(q.Statuses, st) {
					cost += count(string([]byte{countStatus[0], 0, statusByte(st)}))
				}
			}
			sources = append(sources, source{bucket: bucketByExpiry, expiry: true})
		}
		consider(cost, sources...)
	}
	return best
}

// filter holds a query's conditions in the form rows are compared in.
type filter struct {
	q           *Query
	template    []byte
	creator     []byte
	substring   []byte
	from, to    int64
	placement   int // -1 for any
	statuses    [len(statuses)]bool
	anyStatus   bool
	nowMs       int64
	needsFields bool
}

func newFilter(q *Query, nowMs int64) *filter {
	f := &filter{q: q, nowMs: nowMs, placement: -1, anyStatus: q.Statuses == nil}
	f.template, f.creator, f.substring = []byte(q.TemplateID), []byte(q.CreatorID), []byte(q.Substring)
	f.from, f.to = -1<<63, 1<<63-1
	if !q.From.IsZero() {
		f.from = q.From.UnixMilli()
	}
	if !q.To.IsZero() {
		f.to = q.To.UnixMilli()
	}
	if q.Placement != "" {
		f.placement = int(placementByte(q.Placement))
	}
	for _, st := range q.Statuses {
		f.statuses[statusByte(st)] = true
	}
	f.needsFields = len(f.template) > 0 || len(f.creator) > 0 || len(f.substring) > 0 || q.Order != OrderRandom
	return f
}

// scanned reports whether rows stored in st are read through the status
// index itself.
func (f *filter) scanned(st Status) bool { return f.statuses[statusByte(st)] }

// match applies every condition to the row at rk and returns its sort keys.
func (f *filter) match(rk []byte, r row) (match, bool) {
	created := millisOf(rk[:8])
	if created < f.from || created >= f.to {
		return match{}, false
	}
	if f.placement >= 0 && int(r.placement()) != f.placement {
		return match{}, false
	}
	if !f.anyStatus {
		st := r.status()
		if st.live() && f.nowMs >= r.expiresMillis() {
			st = StatusExpired
		}
		if !f.statuses[statusByte(st)] {
			return match{}, false
		}
	}
	m := match{rk: rk}
	if !f.needsFields {
		return m, true
	}
	template, creator, name, text := r.fields()
	if len(f.template) > 0 && !bytes.Equal(template, f.template) ||
		len(f.creator) > 0 && !bytes.Equal(creator, f.creator) ||
		len(f.substring) > 0 && !bytes.Contains(text, f.substring) {
		return match{}, false
	}
	switch f.q.Order {
	case OrderNameAsc, OrderNameDesc:
		m.key1, m.key2 = foldedName(text), name
	case OrderCreatorIDAsc, OrderCreatorIDDesc:
		m.key1 = creator
	}
	return m, true
}

// pageOf orders the matches and cuts the page out. Every order but random
// breaks ties by id, ascending whatever the direction; random draws a
// page-size sample and ignores page.
func pageOf(ms []match, q *Query) []match {
	if q.Order == OrderRandom {
		n := min(q.PageSize, len(ms))
		for i := 0; i < n; i++ {
			j := i + rand.IntN(len(ms)-i)
			ms[i], ms[j] = ms[j], ms[i]
		}
		return ms[:n]
	}
	byID := func(a, b match) int { return bytes.Compare(a.rk[8:], b.rk[8:]) }
	var cmp func(a, b match) int
	switch q.Order {
	case OrderCreationDateAsc:
		cmp = func(a, b match) int { return bytes.Compare(a.rk, b.rk) }
	case OrderCreationDateDesc:
		cmp = func(a, b match) int {
			if c := bytes.Compare(b.rk[:8], a.rk[:8]); c != 0 {
				return c
			}
			return byID(a, b)
		}
	case OrderNameAsc, OrderCreatorIDAsc:
		cmp = func(a, b match) int {
			if c := bytes.Compare(a.key1, b.key1); c != 0 {
				return c
			}
			if c := bytes.Compare(a.key2, b.key2); c != 0 {
				return c
			}
			return byID(a, b)
		}
	case OrderNameDesc, OrderCreatorIDDesc:
		cmp = func(a, b match) int {
			if c := bytes.Compare(b.key1, a.key1); c != 0 {
				return c
			}
			if c := bytes.Compare(b.key2, a.key2); c != 0 {
				return c
			}
			return byID(a, b)
		}
	}
	slices.SortFunc(ms, cmp)
	start := (q.Page - 1) * q.PageSize
	if start >= len(ms) {
		return nil
	}
	return ms[start:min(start+q.PageSize, len(ms))]
}
