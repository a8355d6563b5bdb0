# keygate: a custom Caddy build. `make run` serves both APIs on :8080 with
# data in ./data, and the Web API Keys page on http://localhost:8081/admin/
# once KEYGATE_ADMIN_PASSWORD_HASH is set (docs/administrators.md); `make test` runs every test; `make test-ui` only the
# browser tests (headless Chromium, axe-core); `make bench` prints the
# benchmark ratios.

GO      ?= go
BIN     := bin/caddy
CADDY_VERSION := $(shell sed -n 's/.*"caddy_version": *"\([^"]*\)".*/\1/p' xcaddy.json)
PLUGINS := $(shell sed -n 's/.*"module_path": *"\([^"]*\)".*/\1/p' xcaddy.json)

.PHONY: all build run redmine test test-ui bench soak fuzz xcaddy clean test-deps

all: build

build:
	$(GO) build -o $(BIN) ./cmd/caddy

run: build
	mkdir -p data
	./$(BIN) run --config Caddyfile --adapter caddyfile

# A real Redmine (Debian's, installed by test-deps.sh redmine) on a loopback port
# with a project, an issue and a wiki page, connected to the next
# `make run` through webapi.d/redmine.caddyfile; Ctrl-C removes it.
redmine:
	@./scripts/test-deps.sh redmine
	$(GO) run ./cmd/keygate-redmine -dir webapi.d

# The browser tests need Debian's chromium and axe-core (npm ci, pinned
# by internal/testkit/browsertest/axe/package-lock.json); test-deps installs what
# is missing, and PostgreSQL's binaries.
test: test-deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

# Only the browser tests: the pages in headless Chromium, each checked
# with axe-core, and internal/testkit/browsertest's own tests.
test-ui: test-deps
	$(GO) test -count=1 -run 'InBrowser' ./caddymodule/... ./internal/testkit/browsertest

test-deps:
	@./scripts/test-deps.sh

# BACKEND=postgres runs the gateway on a throwaway PostgreSQL of the
# bench's own (durable, on this machine), as the tests start theirs.
# INSTANCES=2 (with BACKEND=postgres) compares two gateways on one
# database, the load spread over both, with one.
BACKEND ?= bolt
INSTANCES ?= 1
bench: build
	$(GO) run ./cmd/keygate-bench --caddy ./$(BIN) -backend $(BACKEND) -instances $(INSTANCES)

# A mixed load for SOAK_DURATION while the gateway's RSS, goroutines and
# open files are sampled; fails on any 5xx or a leak (not part of `make test`).
SOAK_DURATION ?= 10m
soak: build
	$(GO) run ./cmd/keygate-bench --caddy ./$(BIN) -soak $(SOAK_DURATION)

# Each fuzz target for FUZZTIME, one after the other (`make test` runs
# their checked-in seed corpora). A failing input is written under the
# package's testdata/fuzz/ and stops the run. FUZZFLAGS go to every
# `go test -fuzz`: the fuzzer spends up to -fuzzminimizetime shrinking
# each new interesting input, and its default (60s) would eat a short run.
FUZZTIME ?= 30s
FUZZFLAGS ?= -fuzzminimizetime=10s
FUZZ_TARGETS := \
	keystore:FuzzAuthorize keystore:FuzzAllowedIPs caddymodule:FuzzAuthServeHTTP \
	upstreams/contracts:FuzzCreate upstreams/contracts:FuzzSearch \
	upstreams/share:FuzzCreate upstreams/share:FuzzUpdate upstreams/share:FuzzList upstreams/share:FuzzUnlock \
	upstreams/signing:FuzzDecision upstreams/signing:FuzzSignatureImage internal/host:FuzzParseJQL \
	internal/docseal:FuzzSealedBy
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn ./$$pkg"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./$$pkg; \
	done

# xcaddy is not on the Go module proxy; when it is installed, this builds
# the same binary from xcaddy.json's manifest. The plugins are packages of
# this module, so the module itself is replaced by this checkout.
xcaddy:
	@command -v xcaddy >/dev/null || { echo "xcaddy is not installed; use 'make build'"; exit 1; }
	xcaddy build $(CADDY_VERSION) --output $(BIN) $(addprefix --with ,$(PLUGINS)) --replace github.com/keygate/keygate=$(CURDIR)

clean:
	rm -rf bin
