# keygate: a custom Caddy build. `make run` serves both APIs on :8080 with
# data in ./data; `make test` runs every test; `make bench` prints the
# benchmark ratios.

GO      ?= go
BIN     := bin/caddy
CADDY_VERSION := $(shell sed -n 's/.*"caddy_version": *"\([^"]*\)".*/\1/p' xcaddy.json)
PLUGINS := $(shell sed -n 's/.*"module_path": *"\([^"]*\)".*/\1/p' xcaddy.json)

.PHONY: all build run test bench xcaddy clean test-deps

all: build

build:
	$(GO) build -o $(BIN) ./cmd/caddy

run: build
	mkdir -p data
	./$(BIN) run --config Caddyfile --adapter caddyfile

# Tests need a browser for the signing-page test; test-deps installs
# Debian's chromium when it is missing.
test: test-deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

test-deps:
	@./scripts/test-deps.sh

bench: build
	$(GO) run ./cmd/keygate-bench --caddy ./$(BIN)

# xcaddy is not on the Go module proxy; when it is installed, this builds
# the same binary from xcaddy.json's manifest. The plugins are packages of
# this module, so the module itself is replaced by this checkout.
xcaddy:
	@command -v xcaddy >/dev/null || { echo "xcaddy is not installed; use 'make build'"; exit 1; }
	xcaddy build $(CADDY_VERSION) --output $(BIN) $(addprefix --with ,$(PLUGINS)) --replace github.com/keygate/keygate=$(CURDIR)

clean:
	rm -rf bin
