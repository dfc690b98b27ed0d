# celgate: the entry point for people and CI. `make help` lists the targets.
SHELL := /bin/bash
CARGO ?= cargo
LOCAL_CLUSTER ?= $(CURDIR)/.local/cluster
WEBHOOK_PORT ?= 9443

.PHONY: help build test unit docs e2e e2e-versions e2e-node e2e-node-release release release-check node-up node-down monitoring-rules dashboard-png lint fmt crds crds-check schemas cluster-build cluster-up cluster-down run conformance bench bench-table bench-cel bench-webhook bench-check bench-baseline bench-decode bench-memory bench-apply bench-scale bench-scale-bindings bench-footprint bench-audit bench-e2e bench-bindings deps differential image map-differential admission-fuzz fuzz helm-build helm-template helm-test

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: ## Install the system packages the tests need (curl, openssl, python3, prometheus) when missing
	@e2e/cluster/deps.sh
	@e2e/monitoring/deps.sh

build: ## Build every crate
	$(CARGO) build --workspace

test: deps ## Unit tests, CRD drift, CEL conformance and differential ratchets, and the e2e suite
	$(CARGO) test --workspace --exclude celgate-e2e
	$(MAKE) differential
	$(MAKE) e2e

unit: ## Unit and in-process tests only
	$(CARGO) test --workspace --exclude celgate-e2e

e2e: deps ## The black-box suite against a real control plane (built on first use, then cached); the real node's test is make e2e-node
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build -p celgate
	$(CARGO) test -p celgate-e2e -- --test-threads=1 --skip real_node_

# The suites that prove celgate on a Kubernetes minor: install and RBAC, enforcement, status and
# type checking against the cluster's OpenAPI, audit and PolicyReports, HA, certificates, the
# VAP differential and the cluster requirements (the MAP differential joins from 1.32 on).
VERSIONS ?= all
VERSION_SUITES ?= install rbac enforcement status audit ha certificates differential requirements convert
e2e-versions: deps ## The suites of VERSION_SUITES on each Kubernetes minor of VERSIONS (all, or 1.30,1.34,…: e2e/cluster/versions/), control planes built on first use; table in target/e2e-versions.txt
	e2e/cluster/versions.sh list $(VERSIONS) >/dev/null
	$(CARGO) build -p celgate
	CARGO=$(CARGO) e2e/cluster/matrix.sh $(VERSIONS) $(VERSION_SUITES)

e2e-node: deps ## celgate as its Deployment on a real node (kubelet, containerd, kube-proxy; needs root): kustomize and Helm installs, rolling update and Pod deletion under load
	e2e/cluster/build.sh >/dev/null
	e2e/node/build.sh >/dev/null
	$(CARGO) test -p celgate-e2e --test node -- --nocapture

e2e-node-release: deps ## The real node's suite with a release folder (make release): published to the node's registry, signatures verified, the chart installed from oci:// by digest; VERSION or RELEASE_DIR
	@[ -f "$(RELEASE_DIR)/SHA256SUMS" ] || { echo "make e2e-node-release: no release in $(RELEASE_DIR): make release VERSION=… first (or set RELEASE_DIR)" >&2; exit 1; }
	e2e/cluster/build.sh >/dev/null
	e2e/node/build.sh >/dev/null
	CELGATE_RELEASE=$(RELEASE_DIR) $(CARGO) test -p celgate-e2e --test node -- --nocapture

# The node's state directory: short, containerd's socket paths must stay under 108 bytes.
LOCAL_NODE ?= /tmp/celgate-local-node
node-up: deps ## Start a one-node cluster (control plane, kube-scheduler, kubelet, kube-proxy, a loopback registry) in LOCAL_NODE and print `export KUBECONFIG=… REGISTRY=…`; needs root
	@e2e/node/up.sh $(LOCAL_NODE)

node-down: ## Stop the node of make node-up, delete its pods, clean up, remove LOCAL_NODE
	@e2e/node/down.sh $(LOCAL_NODE) && rm -rf $(LOCAL_NODE)

helm-build: ## Build (or reuse) helm (e2e/cluster/helm.env) from the Go module proxy; prints its path
	@e2e/cluster/build-helm.sh

# `make helm-template VALUES='--set certificates.source=cert-manager'`
VALUES ?=
helm-template: ## Render charts/celgate into celgate-system with VALUES (helm flags); the defaults render config/default
	@. e2e/cluster/versions.env && "$$(e2e/cluster/build-helm.sh)" template celgate charts/celgate --namespace celgate-system --kube-version "$$K8S_VERSION" $(VALUES)

helm-test: deps ## The chart: helm lint --strict, renders compared with config/default and its components, the schema, the CRDs' keep rule; install, uninstall, reinstall and upgrades on a control plane (part of make e2e)
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build -p celgate
	$(CARGO) test -p celgate-e2e --test helm -- --test-threads=1

image: ## The container image (static binaries, FROM scratch) for linux/amd64 and linux/arm64: an OCI archive and SBOMs in target/image/; prints its reference
	@CARGO=$(CARGO) e2e/image/build.sh

# `make release VERSION=0.1.0 [REGISTRY=registry.example/celgate]` (docs/release.md); VERSION must be
# Cargo.toml's. Outside CI: the image's release build takes tens of minutes.
VERSION ?=
REGISTRY ?=
RELEASE_DIR ?= $(abspath $(or $(CARGO_TARGET_DIR),target))/release-$(VERSION)
release: ## Everything a user pulls in <target>/release-VERSION/: the two-architecture image (release build), CLI binaries, SBOMs, the chart, SHA256SUMS signed; with REGISTRY, the image and chart pushed there and signed
	@[ -n "$(VERSION)" ] || { echo "make release: set VERSION (Cargo.toml's version)" >&2; exit 1; }
	@CARGO=$(CARGO) e2e/release/build.sh $(VERSION) $(REGISTRY) >/dev/null

release-check: ## The release's packaging and signing on a tiny stand-in folder (seconds; CI runs it after make test)
	e2e/release/check.sh

monitoring-rules: deps ## promtool check and test the alert rules (config/monitoring); part of make e2e
	$(CARGO) test -p celgate-e2e --test monitoring alert_rules

dashboard-png: deps ## Render the Grafana dashboard's panels from a real run to target/dashboard.png (needs matplotlib)
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build -p celgate
	CELGATE_DASHBOARD_DATA=$(abspath $(or $(CARGO_TARGET_DIR),target))/dashboard-data.json \
		$(CARGO) test -p celgate-e2e --test monitoring a_real_prometheus
	python3 e2e/monitoring/render.py $(abspath $(or $(CARGO_TARGET_DIR),target))/dashboard-data.json \
		$(abspath $(or $(CARGO_TARGET_DIR),target))/dashboard.png

lint: ## rustfmt and clippy, warnings are errors
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## Format the code
	$(CARGO) fmt --all

docs: ## Regenerate docs/reference (flags and metrics) from the code
	CELGATE_WRITE_DOCS=1 $(CARGO) test -p celgate --test reference

crds: ## Regenerate config/crd from the Rust types
	$(CARGO) run -q -p celgate-crds --bin crdgen -- config/crd

crds-check: ## Fail when config/crd is out of date
	$(CARGO) test -q -p celgate-crds --test drift

schemas: deps ## Regenerate kinds/schemas/builtin-<k8s minor>.json (built-in kinds' discovery + OpenAPI v3) from a local control plane
	e2e/cluster/build.sh >/dev/null
	$(CARGO) run -q -p celgate-e2e --bin builtin-schemas

cluster-build: ## Build (or reuse) kube-apiserver, kube-controller-manager, kubectl and etcd
	e2e/cluster/build.sh

cluster-up: deps ## Start a local control plane and print `export KUBECONFIG=…`
	@e2e/cluster/up.sh $(LOCAL_CLUSTER)

cluster-down: ## Stop the local control plane
	@e2e/cluster/down.sh $(LOCAL_CLUSTER)

run: deps ## Run celgate against KUBECONFIG, or against a local control plane it starts
	$(CARGO) build -p celgate
	LOCAL_CLUSTER=$(LOCAL_CLUSTER) WEBHOOK_PORT=$(WEBHOOK_PORT) e2e/cluster/run.sh

conformance: ## The cel-spec conformance suite: prints a summary and writes target/conformance.json
	@mkdir -p target
	CEL_CONFORMANCE_REPORT=$(CURDIR)/target/conformance.json \
		$(CARGO) test -p celgate-cel --release --test conformance -- --nocapture

# The cel-go oracle (engine/cel/differential), built from the Go module proxy.
DIFF_DIR ?= $(CURDIR)/target/differential
DIFF_BIN := $(DIFF_DIR)/celgate-differential
FUZZ_SECONDS ?= 60

$(DIFF_BIN): $(wildcard engine/cel/differential/*.go engine/cel/differential/go.*)
	@mkdir -p $(DIFF_DIR)
	cd engine/cel/differential && GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -o $(DIFF_BIN) .

# Every benchmark writes its JSON report here (whatever CARGO_TARGET_DIR is).
BENCH_DIR := $(CURDIR)/target/bench

# cel-go, celgate, cel-go, celgate: each side's best of its two runs, so drift favours neither.
bench-cel: $(DIFF_BIN) ## celgate vs cel-go on the policy corpus, runs alternated: ns/op, ratios, geometric mean; writes target/bench/cel.json
	$(DIFF_BIN) gen -out $(DIFF_DIR)/corpus.json
	@mkdir -p $(BENCH_DIR)
	$(CARGO) bench -p celgate-cel --bench versus --no-run
	$(DIFF_BIN) bench -corpus $(DIFF_DIR)/corpus.json -out $(DIFF_DIR)/bench-cel-go-1.json
	CEL_BENCH_CORPUS=$(DIFF_DIR)/corpus.json CEL_BENCH_CEL_GO=$(DIFF_DIR)/bench-cel-go-1.json \
		CEL_BENCH_REPORT=$(DIFF_DIR)/bench-celgate-1.json $(CARGO) bench -p celgate-cel --bench versus
	$(DIFF_BIN) bench -corpus $(DIFF_DIR)/corpus.json -out $(DIFF_DIR)/bench-cel-go-2.json
	CEL_BENCH_CORPUS=$(DIFF_DIR)/corpus.json \
		CEL_BENCH_CEL_GO=$(DIFF_DIR)/bench-cel-go-1.json:$(DIFF_DIR)/bench-cel-go-2.json \
		CEL_BENCH_PREVIOUS=$(DIFF_DIR)/bench-celgate-1.json \
		CEL_BENCH_REPORT=$(BENCH_DIR)/cel.json $(CARGO) bench -p celgate-cel --bench versus

bench-webhook: ## Load-test the HTTPS webhook in-process: 2 KB review/5 policies, realistic 6 KB Pod/20 of 1,000 (HTTP/2), 5 of 1,000 vs 5; writes target/bench/webhook.json
	$(CARGO) bench -p celgate-webhook --bench load

bench-check: ## The realistic review's own cost in process (validating, mutating; one VAP with 1,024 bindings, one binding with 1,024 params): instructions and instruction-cache misses (callgrind) and CPU per review against webhook/benches/review-cost-baseline.json; names each figure that got worse and fails; writes target/bench/review-cost.json
	$(CARGO) bench -p celgate-webhook --bench review_cost

bench-baseline: ## Measure as bench-check does and commit the figures as the new baseline (webhook/benches/review-cost-baseline.json)
	REVIEW_COST_WRITE_BASELINE=1 $(CARGO) bench -p celgate-webhook --bench review_cost

bench-decode: ## Decoding bombs of every shape (128 connections) against the webhook in its own process: its peak RSS, small reviews' and handshakes' p50/p99 beside idle; writes target/bench/decode.json
	$(CARGO) bench -p celgate-webhook --bench bombs

bench-memory: deps ## celgate's resident memory when idle, against a local control plane with the docs' policies; writes target/bench/memory.json
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build --release -p celgate
	e2e/bench/idle-rss.sh

map-differential: deps ## MutatingAdmissionPolicy: in-tree vs celgate on one control plane (CELGATE_DIFF_ONLY=<prefix,…> to pick scenarios)
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build -p celgate
	$(CARGO) test -p celgate-e2e --test mutating_differential -- --nocapture

SEED ?= 1
CASES ?= 2000
BUDGET ?= 5400
FIRST ?= 0
admission-fuzz: deps ## Generated admission differential: SEED, CASES and BUDGET (seconds) bound it, FIRST is the first case (make test runs 48 cases); reproducers in target/generated-differential/
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build -p celgate
	CELGATE_FUZZ_SEED=$(SEED) CELGATE_FUZZ_CASES=$(CASES) CELGATE_FUZZ_SECONDS=$(BUDGET) CELGATE_FUZZ_FIRST=$(FIRST) \
		$(CARGO) test -p celgate-e2e --test generated_differential -- --nocapture

# The release build of celgate, wherever CARGO_TARGET_DIR puts it.
CELGATE_RELEASE := $(abspath $(or $(CARGO_TARGET_DIR),target))/release/celgate

bench-apply: deps ## Binding created → first denial and policy changed → status written, celgate (release) vs in-tree, and Ready never True before enforcement: p50/p99; writes target/bench/apply.json
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build --release -p celgate
	CELGATE_BIN=$(CELGATE_RELEASE) $(CARGO) bench -p celgate-e2e --bench apply

bench-scale: deps ## 1,000 VAPs + bindings (realistic mix) as celgate objects: memory, start-up, apply → enforced; writes target/bench/scale.json
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build --release -p celgate
	CELGATE_BIN=$(CELGATE_RELEASE) $(CARGO) bench -p celgate-e2e --bench scale

# Issue 46, part 2, in process: the heap bytes each owner holds per binding, without a cluster.
# Run alone (--test-threads=1, one test): the counting allocator counts the whole process.
bench-footprint: ## Heap bytes per binding by owner (stores, compiled set, status writes, the audit's parts) held and at the start-up's high-water mark, and the time a publish of the set takes, for FOOTPRINT_POLICIES x FOOTPRINT_BINDINGS_PER_POLICY (default 1,000 x 20), in process
	FOOTPRINT_POLICIES=$${FOOTPRINT_POLICIES:-1000} FOOTPRINT_BINDINGS_PER_POLICY=$${FOOTPRINT_BINDINGS_PER_POLICY:-20} \
		$(CARGO) test --release -p celgate-operator --lib audit::footprint -- --ignored --nocapture --test-threads=1

# Issue 46, part 2: 1,000 policies x 100 bindings; the params phase is bench-scale's.
bench-scale-bindings: deps ## 1,000 VAPs x 100 bindings (100,000, realistic mix) as celgate objects: memory, start-up, status writer's pace, apply → enforced; writes target/bench/scale-bindings.json
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build --release -p celgate
	BENCH_SCALE_BINDINGS_PER_POLICY=$${BENCH_SCALE_BINDINGS_PER_POLICY:-100} BENCH_SCALE_PARAMS=0 \
		BENCH_SCALE_CLIENTS=$${BENCH_SCALE_CLIENTS:-16} BENCH_SCALE_SAMPLES=$${BENCH_SCALE_SAMPLES:-20} \
		CELGATE_BIN=$(CELGATE_RELEASE) $(CARGO) bench -p celgate-e2e --bench scale

bench-audit: deps ## Background audit scan of 10,000 objects (BENCH_AUDIT_OBJECTS; 100000 for issue 46) (release): scan time, reports time, API requests and their 429s, RSS over idle, the webhook's p99 idle and during the scan, default pacing, unpaced, and default with celgate on a core of its own; writes target/bench/audit.json
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build --release -p celgate
	CELGATE_BIN=$(CELGATE_RELEASE) $(CARGO) bench -p celgate-e2e --bench audit

bench-e2e: deps ## Creates through kube-apiserver: no policy, in-tree, celgate (release), interleaved create by create, with two small policies and with the realistic mix (1,000 VAPs + 1,000 MAPs, 6 KB Pod); prints celgate/in-tree p50/p99; writes target/bench/e2e.json
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build --release -p celgate
	CELGATE_BIN=$(CELGATE_RELEASE) $(CARGO) bench -p celgate-e2e --bench creates

bench-bindings: deps ## One VAP with 10-1,024 bindings, one binding selecting 10-1,024 params: creates through kube-apiserver, no engine, in-tree and celgate (release) alternated: p50/p99, creates/s, celgate's own and round-trip time per review; writes target/bench/bindings.json
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build --release -p celgate
	CELGATE_BIN=$(CELGATE_RELEASE) $(CARGO) bench -p celgate-e2e --bench bindings

# One run of every benchmark, then one table of figures beside issue 13's targets and the
# machine's load. A benchmark that fails does not stop the others: its rows say "not run".
BENCHES ?= bench-cel bench-webhook bench-check bench-memory bench-apply bench-scale bench-scale-bindings bench-audit bench-e2e bench-bindings
bench: export WEBHOOK_BENCH_HTTP2 ?= 1
bench: deps ## Every benchmark once, then one table: figure, target, met or not, and the machine's load
	@mkdir -p $(BENCH_DIR)
	@rm -f $(BENCH_DIR)/{cel,webhook,review-cost,memory,apply,scale,scale-bindings,audit,e2e,bindings,table}.json
	@cat /proc/loadavg > $(BENCH_DIR)/loadavg-before
	@for b in $(BENCHES); do $(MAKE) --no-print-directory $$b || echo "make bench: $$b failed" >&2; done
	@cat /proc/loadavg > $(BENCH_DIR)/loadavg-after
	@$(MAKE) --no-print-directory bench-table

bench-table: ## Print the table of the JSON reports under target/bench/ (missing ones: "not run")
	@python3 e2e/bench/table.py $(BENCH_DIR) --load-before "$$(cat $(BENCH_DIR)/loadavg-before 2>/dev/null)" \
		--load-after "$$(cat $(BENCH_DIR)/loadavg-after 2>/dev/null)"

differential: $(DIFF_BIN) ## Differential test against cel-go: prints a summary, writes target/differential/report.json
	$(DIFF_BIN) gen -out $(DIFF_DIR)/corpus.json
	$(DIFF_BIN) oracle -corpus $(DIFF_DIR)/corpus.json -out $(DIFF_DIR)/cel-go.json
	CEL_DIFFERENTIAL_CORPUS=$(DIFF_DIR)/corpus.json CEL_DIFFERENTIAL_ORACLE=$(DIFF_DIR)/cel-go.json \
		CEL_DIFFERENTIAL_REPORT=$(DIFF_DIR)/report.json \
		$(CARGO) test -p celgate-cel --release --test differential -- --ignored --nocapture

# Nightly for libFuzzer's instrumentation; no sanitizer (the crate forbids unsafe code, and
# without ASan it runs ~15x more inputs): the hunt is for panics, stack overflows and hangs.
# Seeds: engine/cel/fuzz/seeds plus every expression of the differential corpus.
fuzz: $(DIFF_BIN) ## Fuzz parse + check + eval for FUZZ_SECONDS (default 60) with cargo-fuzz (installed if missing)
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	@mkdir -p engine/cel/fuzz/corpus/eval
	$(DIFF_BIN) seeds -out engine/cel/fuzz/corpus/differential
	cd engine/cel/fuzz && $(CARGO) +nightly fuzz run -s none eval corpus/eval seeds corpus/differential -- \
		-max_total_time=$(FUZZ_SECONDS) -max_len=512 -timeout=10 -dict=eval.dict
