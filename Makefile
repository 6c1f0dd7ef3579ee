# txfence — one command proves it (make test), one command runs it (make dev).
SHELL := /bin/bash
GO    ?= go
PGBIN ?= /usr/lib/postgresql/15/bin

.PHONY: all test lint examples example-go history-lint deps postgres-bin chromium fmt vet build bin-server bin-emulator bin-soak dev e2e soak fuzz openapi-lint node tf-validate tf-tools contracts solcjs tsclient ts-types example-ts

all: test

## deps: make sure what the tests need is installed (Go modules, PostgreSQL 15 server binaries).
deps: postgres-bin
	$(GO) mod download

## postgres-bin: install the PostgreSQL 15 server binaries from Debian's packages if missing.
## Tests start their own throwaway server from them (or use TEST_DATABASE_URL).
postgres-bin:
	@if [ -n "$$TEST_DATABASE_URL" ] || [ -x "$(PGBIN)/initdb" ]; then exit 0; fi; \
	echo "PostgreSQL 15 server binaries not found in $(PGBIN); installing postgresql-15"; \
	SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql-15 >/dev/null

## chromium: Debian's chromium package, when /usr/bin/chromium is missing. The
## console tests (TestIssue14_*, and TestIssue46_LiveViewTwoShards against two
## shards) drive it headless with chromedp (functions/internal/browsertest);
## nothing downloads a browser of its own. Under CI (CI=true) a missing browser
## fails those tests rather than skipping them. About 100 MB the first time.
CHROMIUM ?= /usr/bin/chromium
chromium:
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	echo "$(CHROMIUM) not found; installing Debian's chromium"; \
	SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null

## test: vet, then every test with the race detector against a real PostgreSQL
## (the console's in headless Chromium), then every fuzz target for FUZZTIME
## (make fuzz). Builds tf-validate's binaries first (tf-tools), which
## terraform's tests use, and installs solc-js (solcjs), with which
## TestIssue47_ContractsCurrent checks the committed contract artefacts, and
## the TypeScript client's packages (tsclient), with which TestIssue49_*
## compile and run its node tests and example and check its types.
test: deps chromium vet tf-tools solcjs tsclient
	TXFENCE_CHROMIUM=$(CHROMIUM) $(GO) test -race -count=1 -timeout 15m ./...
	@$(MAKE) --no-print-directory fuzz

## fuzz: every native Go fuzz target for FUZZTIME each (default 10s; with the
## listing and the instrumented build about 35s a target, under two minutes
## for the three of today).
## Targets are found, not listed: each package with a func Fuzz... in a test
## file is asked with go test -list. A failure stops here and leaves the input
## in the package's testdata/fuzz/<Target>/: fix the code and commit the file,
## and go test runs it as a regular case from then on.
## A run that fails without writing an input (Go's own -fuzztime race,
## golang/go#75804, in Go before 1.27: about one 10s run in three of
## FuzzClassify on a 2-core machine) is run once more for a count of inputs
## (FUZZCOUNT) instead: a count sets no deadline, so there is none to race.
## Longer: make fuzz FUZZTIME=5m.
FUZZTIME ?= 10s
FUZZCOUNT ?= 1000x
fuzz:
	@set -e; \
	dirs=$$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' functions shared emulator 2>/dev/null | xargs -r -n1 dirname | sort -u); \
	for d in $$dirs; do \
	  list=$$($(GO) test -list '^Fuzz' ./$$d); \
	  for t in $$(echo "$$list" | grep '^Fuzz'); do \
	    echo "fuzz: $$t (./$$d) for $(FUZZTIME)"; \
	    seen=$$(find ./$$d/testdata/fuzz/$$t -type f 2>/dev/null | wc -l); \
	    if ! $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) ./$$d; then \
	      if [ "$$(find ./$$d/testdata/fuzz/$$t -type f 2>/dev/null | wc -l)" != "$$seen" ]; then exit 1; fi; \
	      echo "fuzz: $$t failed with no failing input written: Go's fuzzing coordinator races its own -fuzztime deadline (golang/go#75804, fixed in Go 1.27); once more, for $(FUZZCOUNT) inputs"; \
	      $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZCOUNT) ./$$d; \
	    fi; \
	  done; \
	done

## lint: formatting, vet, the OpenAPI document (openapi-lint) and no
## work-session history in the tree (history-lint).
lint: vet openapi-lint history-lint
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## history-lint: the repository describes the product as it is; what was
## tried, when and in which work session belongs in commit messages. Fails
## on any line under HISTORY_DIR (the repository by default) that names a
## work session (the word and a number, in any case), as the acceptance
## check does.
HISTORY_DIR ?= .
history-lint:
	@out=$$(grep -rIniE 'session [0-9]+' --exclude-dir=.git --exclude-dir=.tools --exclude-dir=node_modules $(HISTORY_DIR)); \
	status=$$?; \
	if [ $$status -gt 1 ]; then echo "history-lint: grep failed on $(HISTORY_DIR)"; exit 1; fi; \
	if [ -n "$$out" ]; then echo "work-session history in the repository (it belongs in commit messages):"; echo "$$out"; exit 1; fi

## openapi-lint: redocly lint of functions/api/openapi.json with redocly.yaml
## (the recommended rules). The linter, @redocly/cli 1.34.20 (the newest that
## runs on Debian bookworm's node 18; 2.x needs node 20.19), is pinned with
## its dependencies by functions/api/openapi-lint/package-lock.json and
## installed with npm ci into .tools/node (gitignored). The first run takes
## 20s to a minute for npm (244 packages, 205 MB), a few minutes more when
## Debian's nodejs and npm must be installed first; later runs about 2s.
NODE_DIR := .tools/node
LINT_PKG := functions/api/openapi-lint
REDOCLY  := $(NODE_DIR)/node_modules/.bin/redocly
openapi-lint: $(REDOCLY)
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
	  $(REDOCLY) lint --config redocly.yaml functions/api/openapi.json

$(REDOCLY): $(LINT_PKG)/package.json $(LINT_PKG)/package-lock.json | node
	rm -rf $(NODE_DIR) && mkdir -p $(NODE_DIR)
	cp $(LINT_PKG)/package.json $(LINT_PKG)/package-lock.json $(LINT_PKG)/.npmrc $(NODE_DIR)/
	cd $(NODE_DIR) && npm ci --loglevel=error
	touch $@

## node: Debian's nodejs and npm, when node or npm is missing (openapi-lint).
node:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  echo "node or npm not found; installing Debian's nodejs and npm"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm >/dev/null; \
	fi; \
	node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 18 || (a === 18 && b >= 17) ? 0 : 1)' || \
	  { echo "openapi-lint needs node >= 18.17, found $$(node --version)"; exit 1; }

## contracts: compile the test contracts' Solidity sources
## (shared/evm/evmtest/contracts/*.sol) with solc-js and rewrite their
## committed artefacts (contracts/artifacts/<Name>.json: ABI, creation
## bytecode and runtime bytecode, which a genesis alloc installs), which
## evmtest embeds. The compiler, the npm package solc
## 0.8.37, is pinned by contracts/solcjs/package-lock.json and installed with
## npm ci into .tools/solc (gitignored), apart from .tools/node so that
## openapi-lint's reinstall leaves it be; the settings (optimizer, EVM
## version, no metadata hash) are fixed in contracts/compile.js, so the same
## sources give the same bytes. TestIssue47_ContractsCurrent fails when the
## committed artefacts are not what this produces.
SOLC_DIR := .tools/solc
SOLC_PKG := shared/evm/evmtest/contracts/solcjs
SOLCJS   := $(SOLC_DIR)/node_modules/solc/package.json
contracts: $(SOLCJS)
	node shared/evm/evmtest/contracts/compile.js --solc $(SOLC_DIR)/node_modules/solc --out shared/evm/evmtest/contracts/artifacts

## solcjs: only install solc-js into .tools/solc (make test needs it).
solcjs: $(SOLCJS)

$(SOLCJS): $(SOLC_PKG)/package.json $(SOLC_PKG)/package-lock.json | node
	rm -rf $(SOLC_DIR) && mkdir -p $(SOLC_DIR)
	cp $(SOLC_PKG)/package.json $(SOLC_PKG)/package-lock.json $(SOLC_PKG)/.npmrc $(SOLC_DIR)/
	cd $(SOLC_DIR) && npm ci --loglevel=error
	touch $@

## tsclient: install the TypeScript client's packages (client/typescript:
## openapi-fetch 0.17.0, openapi-typescript 7.13.0, typescript 5.9.3 and
## @types/node 18.19.130, all of which run on Debian bookworm's node 18),
## pinned with their dependencies by client/typescript/package-lock.json,
## with npm ci into .tools/tsclient (gitignored), apart from .tools/node and
## .tools/solc so that their reinstalls leave it be. About 6s and 47 MB
## (37 packages) the first time. The client's tsconfig.json finds them
## there: nothing is installed in the Go tree.
TSCLIENT_DIR := .tools/tsclient
TSCLIENT_PKG := client/typescript
TSC          := $(TSCLIENT_DIR)/node_modules/typescript/bin/tsc
tsclient: $(TSC)

$(TSC): $(TSCLIENT_PKG)/package.json $(TSCLIENT_PKG)/package-lock.json | node
	rm -rf $(TSCLIENT_DIR) && mkdir -p $(TSCLIENT_DIR)
	cp $(TSCLIENT_PKG)/package.json $(TSCLIENT_PKG)/package-lock.json $(TSCLIENT_PKG)/.npmrc $(TSCLIENT_DIR)/
	cd $(TSCLIENT_DIR) && npm ci --loglevel=error
	touch $@

## ts-types: regenerate the TypeScript client's types
## (client/typescript/src/schema.d.ts) from functions/api/openapi.json with
## the pinned openapi-typescript; TestIssue49_TypeScriptTypesCurrent fails
## when the committed file is not what this makes.
ts-types: $(TSC)
	node $(TSCLIENT_DIR)/node_modules/openapi-typescript/bin/cli.js functions/api/openapi.json -o $(TSCLIENT_PKG)/src/schema.d.ts

## example-ts: compile the TypeScript sendmany example
## (examples/typescript/sendmany) with the pinned tsc into
## .tools/tsclient/build and run it: N transactions (default 1000) over the
## configured signers, followed on the feed until all are final, then one
## summary line (examples/README.md). URL is the API (default make dev's),
## KEY an API key (default $$TXFENCE_KEY; empty sends none, as development
## mode allows), handed over in the environment so that neither make's echo
## nor ps shows it; more flags with ARGS, e.g. ARGS="--signers 0x…,0x…".
URL ?= http://127.0.0.1:8080/Api
KEY ?= $(TXFENCE_KEY)
N   ?= 1000
example-ts: $(TSC)
	node $(TSC) -p examples/typescript --outDir $(TSCLIENT_DIR)/build
	@echo 'node $(TSCLIENT_DIR)/build/examples/typescript/sendmany/main.mjs --api "$(URL)" -n "$(N)" $(ARGS)'
	@TXFENCE_KEY="$(KEY)" node $(TSCLIENT_DIR)/build/examples/typescript/sendmany/main.mjs --api "$(URL)" -n "$(N)" $(ARGS)

vet:
	$(GO) vet ./...

## tf-validate: terraform fmt -check and terraform validate of the module
## (terraform/) and of every environment (terraform/environments/*), and
## the plan tests (terraform/tests: terraform test with a mocked google
## provider), offline, against the real schema of the google provider
## (terraform/tools/tf-validate.sh). Uses terraform when it is on PATH, else
## OpenTofu; both OpenTofu and the provider are built from the Go module
## proxy (terraform/tools/{tofu,provider-google}, pinned) and cached in
## .tools/terraform. Measured on this 2-core machine: cold, the provider
## takes ~750-800 CPU-seconds (6-7 min idle, 13-16 min under the load of other
## builds) and OpenTofu, only when terraform is not on PATH, as much again;
## with the Go build cache warm each only links (~30s); with the binaries
## cached, validating the module and both environments and running the
## plan tests takes ~40s.
tf-validate:
	GO=$(GO) terraform/tools/tf-validate.sh

## tf-tools: only build (or find) tf-validate's binaries.
tf-tools:
	GO=$(GO) terraform/tools/tf-validate.sh --build

fmt:
	gofmt -w $$(git ls-files '*.go')

## bench-api: create throughput of 1 and 3 real API processes on a durable
## ephemeral PostgreSQL, batched against the naive one-transaction-per-request
## path, a hot signer, 64 and 1,000 signers, and p99 at an offered 5,000/s
## for 10 s, each measured after a second at its own load that is printed
## apart and not counted (ARGS="-warm 0" counts from the first request);
## then the simulation comparison: a hot signer's ERC-20 transfers, which are
## simulated, against its plain transfers, which need no call, in alternating
## slices, with the simulation requests' round trip; then the capacity ladder:
## the open load a hot signer's 1 and 3 processes, and 1,000 signers' 3, carry
## (ARGS="-only 'hot|p99|signers'" leaves both out).
## Last two lines: bench-api-sim: plain= sim= ratio= sim_p50ms= sim_p99ms=
## bench-api: hot1= hot3= naive3= ratio= p99ms= signers1000= rssmb=
.PHONY: bench-api
bench-api: deps
	$(GO) run ./emulator/cmd/benchapi $(ARGS)

## bench-pipeline: the local stack (2 function servers, durable PostgreSQL,
## the simulated chain, a block a second) under a sustained create load on a
## hot signer and 100 others: the rate of each stage, the finality lag, and
## the hot signer's broadcast rate against the node's own ingestion rate,
## and the CPU per confirmed transaction of each function and of PostgreSQL.
## Last line: bench-pipeline: created= confirmed= broadcast_ratio= lag_p50ms= lag_p99ms= cpu_ms_per_tx=
.PHONY: bench-pipeline
bench-pipeline: deps
	$(GO) run ./emulator/cmd/benchpipe $(ARGS)

## bench-coldstart: exec → first served create of a fresh API process,
## several runs; last line bench-coldstart: first_request_ms=<median>.
.PHONY: bench-coldstart
bench-coldstart: deps
	$(GO) run ./emulator/cmd/benchcold

## build: the function server (one binary, every function), the emulator
## and the soak; make dev and make soak build only the two each runs.
build: bin-server bin-emulator bin-soak

bin-server:
	$(GO) build -o bin/server ./functions/server
bin-emulator:
	$(GO) build -o bin/emulator ./emulator/cmd/emulator
bin-soak:
	$(GO) build -o bin/soak ./emulator/cmd/soak

## dev: the whole stack on this machine (PostgreSQL, Pub/Sub, a chain, the
## functions, schedulers); prints the URLs, an API key and the curls. Ctrl-C
## stops it. Pass flags with ARGS, e.g. make dev ARGS="-servers 2 -block-time 2s";
## make dev ARGS="-auth apikey" turns development mode off (API keys only).
dev: deps bin-server bin-emulator
	./bin/emulator -server bin/server $(ARGS)

## examples: each example against the make dev stack (issue 49's acceptance:
## both run to completion in CI). Starts ./bin/emulator -server bin/server
## (make dev, on free ports) in the background, waits for its banner, then
## runs each target in EXAMPLES as `make <target> URL=<API> KEY=<API key>
## N=<EXAMPLES_N>` and fails unless its output has the summary line
## `sent=N confirmed=N failed=0 stuck=0`; the stack is stopped at the end,
## also on failure (examples/run-against-dev.sh). An example is added to
## the list by giving it a target that takes URL, KEY and N and prints that
## line. On a 2-core machine each example's 1,000 transactions confirm in
## about 10s once the stack is up (~3s).
EXAMPLES   ?= example-go example-ts
EXAMPLES_N ?= 1000
examples: bin-server bin-emulator
	EXAMPLES="$(EXAMPLES)" N=$(EXAMPLES_N) MAKE="$(MAKE)" examples/run-against-dev.sh

## example-go: the Go example (examples/go/sendmany) against a running
## stack: make example-go URL=http://127.0.0.1:8080/Api KEY=$$TXFENCE_KEY N=1000
## (URL, KEY and N default as for example-ts).
example-go:
	@echo "$(GO) run ./examples/go/sendmany -api $(URL) -key \$$TXFENCE_KEY -n $(N)"
	@TXFENCE_KEY='$(KEY)' $(GO) run ./examples/go/sendmany -api '$(URL)' -n $(N)

## e2e: two function-server processes, several signers, one SIGKILLed
## mid-run, then every invariant checked; and the Go client's creates
## under a SIGKILL and a PostgreSQL restart (also part of make test).
e2e: deps
	$(GO) test -count=1 -timeout 10m -run 'TestIssue6_|TestIssue49_' -v ./emulator/e2e/

## soak: the fault soak (issue 10): 2,000 creates on 4 signers and 3 function
## servers while it injects, in turn, a funding dip, a fee spike, JSON-RPC
## errors, timeouts and dropped connections, dropped broadcasts, a SIGKILL and
## a SIGSTOP of a server, a PostgreSQL restart and reorgs; then it checks every
## row and the completions feed. Last line: soak: txs=N confirmed=N failed=N
## open=N violations=N faults=N. Flags with ARGS, e.g. ARGS="-txs 500 -seed 7";
## the servers' logs with ARGS="-server-log /tmp/soak-servers.log".
## (make test runs a short version: TestIssue10_Soak.)
soak: deps bin-server bin-soak
	./bin/soak -server bin/server -txs 2000 -signers 4 -servers 3 $(ARGS)
