# Ratchet. `make test` is what CI runs; `make lint` is what reviewers run.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO      ?= go

.PHONY: all build run test test-short cross interop interop-oauth interop-vendors console-test console-screenshots bench lint fmt clean

all: lint test

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/ratchet ./cmd/ratchet

# Run Ratchet on the embedded default: built-in config, ledger in ./data,
# MCP at http://127.0.0.1:8787/mcp, probes on 127.0.0.1:8788. The built
# binary, not go run: go run exits 1 on Ctrl-C (make: *** Error 1), serve
# exits 0.
run: build
	./bin/ratchet serve --data-dir ./data

# Every test, with the race detector (the engine is concurrent by design).
# Fuzz tests run their seed corpus here; run one for longer with e.g.
#   go test -run XXX -fuzz FuzzCanonicalJSON -fuzztime 1m ./ledger
# Then the interop suite when Node.js is here (CI sets RATCHET_REQUIRE_INTEROP
# so that it is never skipped there), and the console's browser test when
# Chromium is too (RATCHET_REQUIRE_CONSOLE in CI). Last, one line per
# optional suite (PostgreSQL, interop, console browser, netns): ran, or
# skipped and why. go test drops passing packages' output, so each suite
# notes its fate in $(SUITES) (internal/suites).
SUITES = $(CURDIR)/bin/suites.txt
# stripe-node for cmd/ratchet's TestStripeNodeForwardUnderTheExampleConfig
# (interop/stripe), installed when its package.json is newer than the last
# install, without a lock file.
STRIPE_NPM = cd interop/stripe && { [ node_modules/.installed -nt package.json ] || \
	{ npm install --no-package-lock && touch node_modules/.installed; }; }
test: export RATCHET_SUITES_FILE = $(SUITES)
test:
	@mkdir -p bin && rm -f $(SUITES)
	$(GO) vet ./...
	@if command -v node >/dev/null 2>&1; then $(STRIPE_NPM); fi
	$(GO) test -race -count=1 ./...
	cd third_party/badger && $(GO) test -race -count=1 ./...
	cd third_party/go-sdk && $(GO) test -race -count=1 ./...
	@if command -v node >/dev/null 2>&1; then $(MAKE) --no-print-directory interop && printf 'interop\tran\n' >> $(SUITES); \
	elif [ -n "$$RATCHET_REQUIRE_INTEROP" ]; then echo "Node.js is required for the interop suite" >&2; exit 1; \
	else echo "Node.js not found: the interop suite (make interop) did not run"; printf 'interop\tskipped\tNode.js not found\n' >> $(SUITES); fi
	@if command -v node >/dev/null 2>&1 && { [ -n "$$CHROMIUM" ] || command -v chromium >/dev/null 2>&1; }; then \
		$(MAKE) --no-print-directory console-test && printf 'console browser\tran\n' >> $(SUITES); \
	elif [ -n "$$RATCHET_REQUIRE_CONSOLE" ]; then echo "Node.js and Chromium are required for the console's browser test" >&2; exit 1; \
	else echo "Node.js or Chromium not found: the console's browser test (make console-test) did not run"; \
		printf 'console browser\tskipped\tNode.js or Chromium not found\n' >> $(SUITES); fi
	@$(GO) run ./internal/suites/summary $(SUITES)

test-short:
	$(GO) test -count=1 ./...

# Ratchet builds and vets for macOS and Windows too (`ratchet mcp --stdio`
# on a laptop): platform code lives in _linux.go, _darwin.go, _windows.go
# files with a portable fallback (CI runs this).
CROSS = darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
cross:
	@set -e; for t in $(CROSS); do echo "GOOS=$${t%/*} GOARCH=$${t#*/}"; \
		GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build ./...; \
		GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) vet ./...; done

# The official TypeScript MCP clients and the Inspector CLI against a real
# ratchet over HTTP, stdio and the bridge (interop/, under a minute).
# Installs the pinned npm packages when package.json is newer than the last
# install, without a lock file.
interop: build
	cd interop && { [ node_modules/.installed -nt package.json ] || \
		{ npm install --no-package-lock && touch node_modules/.installed; }; } && \
		RATCHET_BIN=$(CURDIR)/bin/ratchet node --test --test-reporter=spec interop.test.mjs sessions.test.mjs conversation.test.mjs
	$(MAKE) --no-print-directory interop-oauth
	$(MAKE) --no-print-directory interop-vendors

# The TypeScript SDK's OAuth client flow (discovery from the 401, dynamic
# registration, authorization code + PKCE) against a real authorization
# server, oidc-provider (interop/oauth/package.json), then every tool and
# the Inspector CLI with the access token (docs/identity.md): under a
# minute. It uses interop/'s SDK and Inspector, so interop/ installs first.
interop-oauth: build
	cd interop && { [ node_modules/.installed -nt package.json ] || \
		{ npm install --no-package-lock && touch node_modules/.installed; }; }
	cd interop/oauth && { [ node_modules/.installed -nt package.json ] || \
		{ npm install --no-package-lock && touch node_modules/.installed; }; } && \
		RATCHET_BIN=$(CURDIR)/bin/ratchet node --test --test-reporter=spec oauth.test.mjs

# The vendor definitions shipped in configs/vendors/, each driven by its
# vendor's official Node SDK (interop/vendors/package.json) through a real
# ratchet serve in reverse-proxy mode, against fake upstreams, on Badger and
# on PostgreSQL where it answers (RATCHET_TEST_PG_DSN; RATCHET_REQUIRE_PG
# makes it required, as CI does): under two minutes. make interop runs it,
# so make test and CI do.
interop-vendors: build
	cd interop/vendors && { [ node_modules/.installed -nt package.json ] || \
		{ npm install --no-package-lock && touch node_modules/.installed; }; } && \
		RATCHET_BIN=$(CURDIR)/bin/ratchet node --test --test-reporter=spec vendors.test.mjs

# The operator console in Debian's Chromium (playwright-core) against a real
# ratchet serve, an agent speaking MCP beside it (console/browser/, about 15
# seconds); conversation.test.mjs has the operator decide on the page an
# agent's client was asked to open. CHROMIUM names the browser when it is not
# /usr/bin/chromium.
# console-screenshots also rewrites docs/console-*.png (docs/console.md's pictures).
CONSOLE_NPM = cd console/browser && { [ node_modules/.installed -nt package.json ] || \
	{ npm install --no-package-lock && touch node_modules/.installed; }; }
console-test: build
	$(CONSOLE_NPM) && RATCHET_BIN=$(CURDIR)/bin/ratchet node --test --test-reporter=spec console.test.mjs conversation.test.mjs

console-screenshots: build
	$(CONSOLE_NPM) && RATCHET_BIN=$(CURDIR)/bin/ratchet RATCHET_SCREENSHOT_DIR=$(CURDIR)/docs node --test console.test.mjs

# Throughput and latency against baselines measured in the same run, with a
# million-effect ledger; rewrites BENCHMARKS.md (about 3 minutes on 2 cores).
bench:
	$(GO) run ./internal/benchreport -out BENCHMARKS.md

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

fmt:
	gofmt -w .

clean:
	rm -rf bin
