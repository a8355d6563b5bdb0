package contracts

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
)

func TestRecordCache(t *testing.T) {
	id := uuid.New()
	c := &Contract{ID: id.String(), Name: "first", Signers: []Signer{{ID: "s1", FullName: "Ann", SigningMethods: []string{"draw"}}}}
	raw, _ := json.Marshal(c)
	rc := &recordCache{m: make(map[uuid.UUID]cachedRecord)}

	got, err := rc.decode(id, raw)
	if err != nil || got.Name != "first" {
		t.Fatalf("first decode: %+v %v", got, err)
	}
	// A reader changing its copy must not change what the next reader gets.
	got.Name = "changed"
	got.Signers[0].FullName = "Bob"
	got.Signers[0].SigningMethods[0] = "upload"
	again, _ := rc.decode(id, raw)
	if again.Name != "first" || again.Signers[0].FullName != "Ann" || again.Signers[0].SigningMethods[0] != "draw" {
		t.Fatalf("cached entry was changed through a copy: %+v", again)
	}
	// New bytes under the same id are decoded afresh, never served stale.
	c.Name = "second"
	raw2, _ := json.Marshal(c)
	if fresh, _ := rc.decode(id, raw2); fresh.Name != "second" {
		t.Fatalf("stale entry served: %q", fresh.Name)
	}
	// The bound holds.
	for i := 0; i < maxCachedRecords+10; i++ {
		rc.decode(uuid.New(), raw)
	}
	if len(rc.m) > maxCachedRecords {
		t.Fatalf("%d entries, bound %d", len(rc.m), maxCachedRecords)
	}
}
