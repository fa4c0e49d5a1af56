# The task server's Makefile. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/taskserver/taskserver/internal/daemon.Version=$(VERSION)
BIN := bin
DURATION ?= 0
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## download Go modules (the server's and the examples')
	$(GO) mod download
	cd examples && $(GO) mod download

.PHONY: build
build: deps ## build every program into bin/
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

.PHONY: db-up
db-up: ## make a MariaDB/MySQL server available (installs and starts a private one if none answers)
	@scripts/db-up.sh >/dev/null

.PHONY: run
run: build ## set up and run a local project with simulated volunteers (DURATION=60s stops by itself)
	@dsn=$$(scripts/db-up.sh) && \
	$(BIN)/localproject --bin-dir $(BIN) --server-dsn "$$dsn" --duration $(DURATION) --summary-json project/summary.json

SIM_OUT ?= sim-report

.PHONY: simulate
simulate: ## run the reference scenario in simulated time (SIM_OUT=sim-report/)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/simclient ./cmd/simclient
	$(BIN)/simclient --clock simulated --scenario scenarios/reference.yaml --out "$(SIM_OUT)"

BENCH_JOBS ?= 50000
BENCH_OUT ?= bench-results/paper.json

.PHONY: bench
bench: build ## run the paper's benchmark on a private MariaDB (BENCH_JOBS=50000, BENCH_OUT=bench-results/paper.json)
	@scripts/db-up.sh >/dev/null
	$(BIN)/bench --jobs $(BENCH_JOBS) --out "$(BENCH_OUT)"

SCALE ?= 100000
SCALE_OUT ?= bench-results/scale
SCALE_POOLS ?=
SCALE_STATEMENTS ?=

.PHONY: bench-scale
bench-scale: build ## measure costs against table size on a private MariaDB (SCALE="100000 1000000" makes a curve; SCALE_OUT=bench-results/scale; SCALE_POOLS="256M 1G 4G" sweeps the buffer pool for each phase's working set; SCALE_STATEMENTS=1 lists each phase's costliest statements)
	@scripts/db-up.sh >/dev/null
	$(BIN)/benchscale --scale "$(SCALE)" --out "$(SCALE_OUT)" --pools "$(SCALE_POOLS)"$(if $(SCALE_STATEMENTS), --statements)

CHAOS_JOBS ?= 5000
CHAOS_OUT ?= chaos-report

.PHONY: chaos
chaos: build ## run jobs under faults (daemon kills, DB restart, full upload disk, scheduler flood) and check nothing was lost (CHAOS_JOBS=5000, CHAOS_OUT=chaos-report)
	@scripts/db-up.sh >/dev/null
	$(BIN)/chaos --jobs $(CHAOS_JOBS) --out $(CHAOS_OUT)

CLUSTER_JOBS ?= 3000
CLUSTER_OUT ?= cluster-report

.PHONY: cluster
cluster: build ## run jobs on a private three-node Galera cluster with two feeder/scheduler pairs, kill a database node mid-run and rejoin it, check nothing was lost (installs galera-4 and rsync if missing; CLUSTER_JOBS=3000, CLUSTER_OUT=cluster-report)
	@scripts/galera-up.sh
	$(BIN)/chaos cluster --jobs $(CLUSTER_JOBS) --out $(CLUSTER_OUT)

LOAD_DURATION ?= 5m
LOAD_OUT ?= load-report

.PHONY: load
load: build ## load the scheduler with a steady stream of hosts, cut the database connections once, check memory stays bounded and nothing is lost (LOAD_DURATION=5m, LOAD_OUT=load-report)
	@scripts/db-up.sh >/dev/null
	$(BIN)/chaos load --duration $(LOAD_DURATION) --out $(LOAD_OUT)

.PHONY: test
test: deps boinc-app ## run the whole test suite (race detector on) against a real database, the real BOINC client running a real BOINC-API app, Prometheus and Chromium, and a short run on a Galera cluster (installs what is missing: gcc, g++, libboinc-app-dev, mariadb-server, galera-4, rsync, boinc-client, prometheus, chromium)
	@scripts/cgo-up.sh && scripts/boinc-client-up.sh && scripts/prometheus-up.sh && scripts/chromium-up.sh && scripts/galera-up.sh && dsn=$$(scripts/db-up.sh) && \
	TEST_MYSQL_DSN="$$dsn" TASKSERVER_REAL_CLIENT=1 TASKSERVER_BOINC_APP="$(abspath $(BOINC_APP))" $(GO) test -race -count=1 -timeout 60m ./... && \
	(cd examples && TEST_MYSQL_DSN="$$dsn" $(GO) test -race -count=1 -timeout 10m ./...)

# The real BOINC-API application the real-client test runs (C++, built
# with Debian's libboinc-app-dev, whose libraries are shared only: its .a
# files are empty stubs).
BOINC_APP := $(BIN)/boinc_demo
CXX ?= g++

.PHONY: boinc-app
boinc-app: ## build the real BOINC-API demo app into bin/boinc_demo (installs g++ and libboinc-app-dev if missing)
	@scripts/boinc-app-up.sh
	@mkdir -p $(BIN)
	$(CXX) -O2 -Wall -Wextra -o $(BOINC_APP) apps/boinc_demo/boinc_demo.cpp -lboinc_api -lboinc -lpthread

.PHONY: test-client
test-client: deps boinc-app ## run the server against two real BOINC clients running a real BOINC-API app, then again with a cc_config.xml coprocessor, a multi-threaded version and a failing host's daily quota, and once more as a client of a BOINC project imported here (installs boinc-client, g++ and libboinc-app-dev if missing)
	@scripts/boinc-client-up.sh && dsn=$$(scripts/db-up.sh) && \
	TEST_MYSQL_DSN="$$dsn" TASKSERVER_REAL_CLIENT=1 TASKSERVER_BOINC_APP="$(abspath $(BOINC_APP))" $(GO) test -count=1 -timeout 25m -run TestRealBOINCClient -v ./e2e/

.PHONY: test-race
test-race: test ## alias of test: the race detector is always on

.PHONY: lint
lint: ## gofmt and go vet (the server and the examples)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	$(GO) vet ./...
	cd examples && $(GO) vet ./...

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-30s} $$pkg || exit 1; \
	  done; done

.PHONY: clean
clean: ## remove built programs and the local project
	rm -rf $(BIN) project

.PHONY: db-down
db-down: ## stop the private MariaDB that db-up started (if any)
	@pidf=.local/mariadb/mysqld.pid; \
	if [ -f $$pidf ] && kill $$(cat $$pidf) 2>/dev/null; then \
	  for _ in $$(seq 60); do [ -f $$pidf ] || break; sleep 1; done; echo "stopped the private MariaDB"; \
	else echo "no private MariaDB running"; fi
