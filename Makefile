# shield — see README.md. Every target works on a fresh machine with Go,
# gcc, git, make and apt: what a target needs it installs itself.

GO      ?= go
BIN     := bin
# Tools built once per machine (the Consul agent for cluster tests) live
# outside the repository.
CACHE   ?= $(HOME)/.cache/shield
CONSUL  := $(CACHE)/consul
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# staticcheck, pinned, built once per machine beside the Consul agent.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(CACHE)/staticcheck-$(STATICCHECK_VERSION)
# h2spec (HTTP/2 conformance, for e2e TestH2Spec), pinned with its
# dependencies by the tools module tools/h2spec, built once per machine:
# the binary's name carries a digest of that module's go.mod and go.sum,
# so a fresh clone (whose files are newer than any cached binary) reuses
# it and a changed pin builds a new one.
H2SPEC_PIN := $(shell cat tools/h2spec/go.mod tools/h2spec/go.sum 2>/dev/null | sha256sum | cut -c1-12)
H2SPEC := $(CACHE)/h2spec-v2.2.1-$(H2SPEC_PIN)
# testreport turns `go test -json` into go test's usual output plus a
# count of skipped tests; under CI=true any skip fails (internal/testreport).
TESTREPORT := $(BIN)/testreport
# Unit packages: everything but the suites that start real processes
# (e2e, deploy), which test-e2e runs after building the binaries.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e '/e2e$$' -e '/deploy$$')

# Recipes pipe go test into testreport: a failing go test must fail make.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: all build run test test-unit test-e2e bench fuzz fuzz-short vet fmt-check tidy-check staticcheck consul h2spec clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/shield ./cmd/shield
	$(GO) build -o $(BIN)/demo-origin ./cmd/demo-origin

## run: the demo origin on 127.0.0.1:9000 and one shield (config.example.yaml) on 127.0.0.1:8080.
run: build
	scripts/run.sh

## test: format, go mod tidy, vet, staticcheck, unit tests with the race
## detector, allocation tests, short fuzz runs, e2e. Each test step prints
## its count of skipped tests; under CI=true a skip fails it.
test: fmt-check tidy-check vet staticcheck test-unit fuzz-short test-e2e

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# go.mod and go.sum must already be what `go mod tidy` makes them.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

vet:
	$(GO) vet ./...

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

$(STATICCHECK):
	mkdir -p $(CACHE)/staticcheck-build
	GOBIN=$(CACHE)/staticcheck-build $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(CACHE)/staticcheck-build/staticcheck $@

h2spec: $(H2SPEC)

$(H2SPEC):
	mkdir -p $(CACHE)
	cd tools/h2spec && $(GO) build -trimpath -o $@.tmp github.com/summerwind/h2spec/cmd/h2spec
	mv $@.tmp $@

$(TESTREPORT): $(wildcard internal/testreport/*.go)
	$(GO) build -o $@ ./internal/testreport

test-unit: consul $(TESTREPORT)
	CONSUL_BIN=$(CONSUL) $(GO) test -json -race -count=1 $(UNIT_PKGS) | $(TESTREPORT) -label unit
	# allocation tests are excluded under -race; run them without it
	$(GO) test -json -count=1 -run 'Allocs' $(UNIT_PKGS) | $(TESTREPORT) -label allocs

test-e2e: build consul h2spec $(TESTREPORT)
	CONSUL_BIN=$(CONSUL) H2SPEC_BIN=$(H2SPEC) $(GO) test -json -count=1 -timeout 20m ./deploy/ ./e2e/ | $(TESTREPORT) -label e2e

## fuzz-short: every fuzz target for a few seconds (part of make test).
fuzz-short:
	FUZZTIME=10000x scripts/fuzz.sh

## fuzz: every fuzz target for FUZZTIME (default 60s) each.
fuzz:
	FUZZTIME=$${FUZZTIME:-60s} scripts/fuzz.sh

## bench: wrk against shield (1 KiB hit) and the bare demo origin, same run, ratio printed;
## then bench-compare.
bench: build bench-compare
	scripts/bench.sh

## bench-compare: the hit, forwarded-hit, range and 100 KiB hit Go benchmarks
## against BASE (the previous release) on this machine, interleaved runs,
## benchstat (see scripts/bench-compare.sh; MAX_SLOWDOWN=5 fails above +5%).
BASE ?= f1f8204
.PHONY: bench-compare
bench-compare:
	BASE=$(BASE) scripts/bench-compare.sh

consul: $(CONSUL)

$(CONSUL):
	scripts/build-consul.sh $(CONSUL)

clean:
	rm -rf $(BIN)

## bench-peers: shield vs Varnish vs nginx vs a bare fasthttp origin, side by side
## (installs wrk, varnish, nginx from Debian if missing; see bench/peers.sh).
.PHONY: bench-peers
bench-peers: build
	bench/peers.sh

## bench-economics: only the cluster-economics part of bench-peers (Zipf over
## 1,000,000 keys: 3-node shield cluster vs 3 independent nginx / Varnish).
.PHONY: bench-economics
bench-economics: build
	bench/economics.sh

## soak: e2e TestSoak for SOAK_DURATION (default 10m): three shields under a
## bounded load with a node restarted mid-run; RSS, goroutines and fds checked
## (see scripts/soak.sh). `make test` runs the same test for 30s.
.PHONY: soak
soak: build consul
	CONSUL_BIN=$(CONSUL) scripts/soak.sh
