# turnstile — run `make help` for the list of targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/turnstile
GOLANGCI_LINT_VERSION := v2.6.2
TOOLS := $(CURDIR)/bin/tools

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/turnstile
	$(GO) build -o $(BIN) ./cmd/turnstile

.PHONY: run
run: build ## build, then run `turnstile serve` on the embedded store in ./data; ARGS="--addr 127.0.0.1:9090 …" passes flags to it
	./$(BIN) serve $(ARGS)

.PHONY: test
test: ## vet, every test with the race detector (PostgreSQL and the browser test in Chromium included), a minute of simulation seeds, eight mutants (a daily window of make mutants), then the 3-minute soak (what CI runs)
	$(GO) vet ./...
	TURNSTILE_SIM_BUDGET=5s scripts/with-postgres.sh scripts/with-chromium.sh $(GO) test -race -count=1 -timeout 30m ./...
	@# The simulation's random seeds run ~9x faster without the race detector:
	@# a minute of them is over a million simulated lifecycle steps.
	TURNSTILE_SIM_BUDGET=60s $(GO) test -count=1 -run '^TestSeeds$$' -v ./sim
	@# Eight of the curated mutants (~1 min), a window of the list chosen by the day: consecutive days cover the whole list (all at once: make mutants).
	$(GO) run ./scripts/mutants -rotate 8 -baseline=false
	$(MAKE) --no-print-directory soak-short

.PHONY: torture
torture: ## the full crash matrix: 10,000 executions, 200 random SIGKILLs and every crash point 3 times, embedded and PostgreSQL
	TURNSTILE_TORTURE=full scripts/with-postgres.sh $(GO) test -count=1 -timeout 120m -run '^TestCrashMatrix$$' -v ./cmd/turnstile/

.PHONY: mutants
mutants: ## plant each bug of scripts/mutants/mutants.txt in a scratch copy; every one must fail its named tests (prints the table)
	$(GO) run ./scripts/mutants

.PHONY: soak
soak: ## 60 minutes of `turnstile serve` at ~500 appends/s and 200 API requests/s; fails on a missed target (RSS, lag, goroutines, audit)
	TURNSTILE_SOAK=60m TURNSTILE_SOAK_ENFORCE=1 $(GO) test -count=1 -timeout 90m -run '^TestSoak$$' -v ./cmd/turnstile/

.PHONY: soak-archive
soak-archive: ## the soak with archiving on (after 5 min of log time, a checkpoint a minute, 100,000-event segments; warm-up 10 min); the audit reads archive + live log
	d=$$(mktemp -d) && TURNSTILE_SOAK=60m TURNSTILE_SOAK_ENFORCE=1 TURNSTILE_SOAK_ARCHIVE=$$d TURNSTILE_SOAK_SERVE_ARGS="--archive-after 5m --checkpoint-every 1m --archive-segment-events 100000" $(GO) test -count=1 -timeout 90m -run '^TestSoak$$' -v ./cmd/turnstile/; rc=$$?; rm -rf $$d; exit $$rc

.PHONY: soak-short
soak-short: ## the soak for 3 minutes (CI: fails on audit violations, failed requests or leaking goroutines; prints the figures)
	TURNSTILE_SOAK=3m $(GO) test -count=1 -timeout 20m -run '^TestSoak$$' -v ./cmd/turnstile/

.PHONY: test-short
test-short: ## the tests without the race detector, skipping slow ones (PostgreSQL's skip without TURNSTILE_POSTGRES_URL)
	$(GO) test -short -count=1 ./...

.PHONY: test-race
test-race: ## the tests with the race detector
	$(GO) test -race -count=1 ./...

SEED ?= 0
STEPS ?= 5000
.PHONY: simulate
simulate: ## replay one deterministic simulation: make simulate SEED=… STEPS=… [TRACE=1] [SINGLE=1] [SPLIT=1] [MIXED=1] [ARCHIVE=1] (SEED=0 picks one and prints it; SINGLE: a log without atomic multi-stream appends; SPLIT: two executors at once now and then; MIXED: workers that serve different runners; ARCHIVE: checkpoints, archive and trims)
	TURNSTILE_SIMULATE=1 $(GO) test -count=1 -run '^TestSimulate$$' -v ./sim -args -seed=$(SEED) -steps=$(STEPS) $(if $(TRACE),-trace) $(if $(SINGLE),-single-stream) $(if $(SPLIT),-split-brain) $(if $(MIXED),-mixed-runners) $(if $(ARCHIVE),-archive)

.PHONY: bench
bench: ## micro-benchmarks of the log (see BENCHMARKS.md for whole-system ones)
	$(GO) test -run '^$$' -bench . -benchtime 2s ./eventstore/...

BASE ?=
PAIRS ?= 5
BENCH ?= lifecycle,freeslot
.PHONY: bench-compare
bench-compare: ## compare a base revision with the current tree: make bench-compare BASE=<rev> [PAIRS=5] [BENCH=lifecycle,freeslot,postgres] [EXECUTIONS=N]; interleaved pairs, ratios per pair and their median
	@test -n "$(BASE)" || { echo "usage: make bench-compare BASE=<rev> [PAIRS=5] [BENCH=lifecycle,freeslot,postgres]" >&2; exit 2; }
	$(if $(findstring postgres,$(BENCH)),scripts/with-postgres.sh) $(GO) run ./scripts/benchcompare --base $(BASE) --pairs $(PAIRS) --bench $(BENCH) $(if $(EXECUTIONS),--executions $(EXECUTIONS))

.PHONY: lint
lint: $(TOOLS)/golangci-lint ## golangci-lint (installed into bin/tools at a pinned version)
	$(TOOLS)/golangci-lint run ./...

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: clean
clean: ## remove build output
	rm -rf bin
