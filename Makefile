# `make run` and `make test` do all set-up on a fresh machine: virtualenv, install,
# Go-built control plane (cached outside the repo), cluster, then the work.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv binaries cluster cluster-down run test unit lint crd bench

venv: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,bench]'
	@# kubeflow-training ships a top-level `test` package that would shadow the
	@# standard library's; nothing of ours uses it.
	rm -rf $(VENV)/lib/python3*/site-packages/test
	@touch $@

binaries: venv
	VENV=$(VENV) hack/build-binaries.sh

cluster: binaries
	hack/cluster.sh up

cluster-down:
	hack/cluster.sh down

# The controller on the local cluster with a sample TFJob, printing its progress.
run: cluster
	$(PY) -m hack.run_local

lint: venv
	$(PY) -m hack.check_layers
	$(VENV)/bin/ruff check controller reconcile tfjob_controller hack tests
	$(VENV)/bin/mypy
	$(PY) -m hack.gen_crd --check

unit: venv
	$(PY) -m pytest tests/unit -q

# Every test: lint and layering checks, unit tests, and the cluster tests against
# the real local control plane (left running afterwards for fast re-runs).
test: lint cluster
	TFJOB_KEEP_CLUSTER=1 $(PY) -m pytest -p no:cacheprovider

bench: binaries
	hack/bench $(BENCH_ARGS)
