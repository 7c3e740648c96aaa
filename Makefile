# shield — see README.md. Every target works on a fresh machine with Go,
# gcc, git, make and apt: what a target needs it installs itself.

GO      ?= go
BIN     := bin
# Tools built once per machine (the Consul agent for cluster tests) live
# outside the repository.
CACHE   ?= $(HOME)/.cache/shield
CONSUL  := $(CACHE)/consul
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: all build run test test-unit test-e2e bench fuzz fuzz-short vet fmt-check consul clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/shield ./cmd/shield
	$(GO) build -o $(BIN)/demo-origin ./cmd/demo-origin

## run: the demo origin on 127.0.0.1:9000 and one shield (config.example.yaml) on 127.0.0.1:8080.
run: build
	scripts/run.sh

## test: format, vet, unit tests with the race detector, allocation tests, short fuzz runs, e2e.
test: fmt-check vet test-unit fuzz-short test-e2e

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

test-unit:
	$(GO) test -race -short -count=1 ./...
	# allocation tests are excluded under -race; run them without it
	$(GO) test -count=1 -run 'Allocs' ./...

test-e2e: build consul
	CONSUL_BIN=$(CONSUL) $(GO) test -count=1 -timeout 15m ./deploy/ ./e2e/

## fuzz-short: every fuzz target for a few seconds (part of make test).
fuzz-short:
	FUZZTIME=10000x scripts/fuzz.sh

## fuzz: every fuzz target for FUZZTIME (default 60s) each.
fuzz:
	FUZZTIME=$${FUZZTIME:-60s} scripts/fuzz.sh

## bench: wrk against shield (1 KiB hit) and the bare demo origin, same run, ratio printed.
bench: build
	scripts/bench.sh

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

## soak: e2e TestSoak for SOAK_DURATION (default 10m): three shields under a
## bounded load with a node restarted mid-run; RSS, goroutines and fds checked
## (see scripts/soak.sh). `make test` runs the same test for 30s.
.PHONY: soak
soak: build consul
	CONSUL_BIN=$(CONSUL) scripts/soak.sh
