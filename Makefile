# celgate: the entry point for people and CI. `make help` lists the targets.
SHELL := /bin/bash
CARGO ?= cargo
LOCAL_CLUSTER ?= $(CURDIR)/.local/cluster
WEBHOOK_PORT ?= 9443

.PHONY: help build test unit e2e lint fmt crds crds-check cluster-build cluster-up cluster-down run conformance bench-cel deps

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: ## Install the system packages the tests need (curl, openssl, python3) when missing
	@e2e/cluster/deps.sh

build: ## Build every crate
	$(CARGO) build --workspace

test: deps ## Everything CI runs: unit tests, CRD drift, CEL conformance and the e2e suite
	$(CARGO) test --workspace --exclude celgate-e2e
	$(MAKE) e2e

unit: ## Unit and in-process tests only
	$(CARGO) test --workspace --exclude celgate-e2e

e2e: deps ## The black-box suite against a real control plane (built on first use, then cached)
	e2e/cluster/build.sh >/dev/null
	$(CARGO) build -p celgate
	$(CARGO) test -p celgate-e2e -- --test-threads=1

lint: ## rustfmt and clippy, warnings are errors
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## Format the code
	$(CARGO) fmt --all

crds: ## Regenerate config/crd from the Rust types
	$(CARGO) run -q -p celgate-crds --bin crdgen -- config/crd

crds-check: ## Fail when config/crd is out of date
	$(CARGO) test -q -p celgate-crds --test drift

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
	$(CARGO) test -p celgate-cel --release --test conformance -- --nocapture

bench-cel: ## CEL evaluation benchmark
	$(CARGO) bench -p celgate-cel --bench eval
