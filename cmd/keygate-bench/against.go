package main

import (
	"flag"
	"fmt"
	"path/filepath"
)

var against = flag.String("against", "", "only compare the contract creates of --caddy with those of this other build (interleaved rounds, one gateway each on a store of its own), and --caddy's creates with an Idempotency-Key with those without")

// runAgainst is -against: two builds' creates side by side, measured in
// turn, so that a change to the create path shows as a ratio that the
// load of a shared machine moves less than two figures of separate runs.
func runAgainst(be *backend, tmp string, st store, d *dataset) {
	otherStore, err := be.store(filepath.Join(tmp, "against"), "against")
	if err != nil {
		fatalf("%v", err)
	}
	other, err := prepare(otherStore, 1, 1, 1)
	if err != nil {
		fatalf("%v", err)
	}
	base, err := startGateway(*against, otherStore)
	if err != nil {
		fatalf("%v", err)
	}
	defer base.stop()
	gw, err := startGateway(*caddyBin, st)
	if err != nil {
		fatalf("%v", err)
	}
	defer gw.stop()
	r := gw.compare(*against, base.createContract(other), *caddyBin, gw.createContract(d))
	fmt.Printf("contract creates, %s / %s: ratio = %.3f\n", *caddyBin, *against, r)
	k := gw.compare("without a key", gw.createContract(d), "with an Idempotency-Key", gw.createContractKeyed(d))
	fmt.Printf("contract creates of %s, with an Idempotency-Key / without: ratio = %.3f\n", *caddyBin, k)
}
