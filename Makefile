# `make run` and `make test` do all set-up on a fresh machine: virtualenv, install,
# Go-built control plane (cached outside the repo), cluster, then the work.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: bench-scale bench-failover ops-tools venv binaries cluster cluster-down run test unit lint crd bench bench-upstream fuzz lock chaos \
	image-test kind-e2e node-binaries tf-image e2e-tf run-tf bench-progress bench-flood run-check run-tf-check

venv: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,bench]'
	@# kubeflow-training ships a top-level `test` package that would shadow the
	@# standard library's; nothing of ours uses it.
	rm -rf $(VENV)/lib/python3*/site-packages/test
	@touch $@

# The control plane's binaries and the gang scheduler (scheduler-plugins' Coscheduling).
binaries: venv
	VENV=$(VENV) hack/build-binaries.sh --scheduler-plugins

# helm and promtool, from their Go modules (the chart's and the alerts' tests).
ops-tools: binaries
	VENV=$(VENV) hack/build-ops-tools.sh

# What a real node runs: kubelet, containerd and its shim, ctr, runc, crictl, CoreDNS,
# the pause and workload images (apt and debootstrap: root).
node-binaries: venv
	VENV=$(VENV) hack/build-node.sh

# The TensorFlow image for the real node (tfjob.local/tensorflow:2.21.0-bookworm): the
# workload image plus tensorflow-cpu and tf_keras (hack/node/tf-requirements.txt), as an
# OCI archive in a cache entry of its own. Not part of `make test`.
tf-image: node-binaries
	VENV=$(VENV) hack/build-tf-image.sh

# Real TensorFlow on the real node: the training programs of tests/tf/programs/ run by
# TFJobs in the TensorFlow image (tests marked tf, which `make test` leaves out).
# First `make run-tf` as a newcomer runs it, on a cluster of its own (one real node at a
# time: the main cluster's leaves first, and the tests add it back).
e2e-tf: lint cluster tf-image
	hack/cluster.sh down --real-node
	hack/run-check.sh run-tf
	TFJOB_KEEP_CLUSTER=1 $(PY) -m pytest -p no:cacheprovider -m 'tf or tf_quick' tests/cluster

cluster: binaries
	hack/cluster.sh up --gang scheduler-plugins

cluster-down:
	hack/cluster.sh down

# The controller on the local cluster with the sample TFJobs, printing their progress,
# until each has finished: exits 0 when every one Succeeded, the cluster left up.
run: cluster
	$(PY) -m hack.run_local

# `make run` (run-tf-check: `make run-tf`) as a newcomer runs it, bounded, on a cluster
# directory of its own that is brought up from nothing and taken down after
# (hack/run-check.sh); `make test` runs run-check, `make e2e-tf` run-tf-check.
run-check: binaries
	hack/run-check.sh run

run-tf-check: binaries tf-image
	hack/run-check.sh run-tf

# Real TensorFlow in one command: the local cluster with the real node and the TensorFlow
# image, the controller, and the MultiWorkerMirroredStrategy sample trained to the end.
run-tf: binaries tf-image
	hack/cluster.sh up --gang scheduler-plugins --real-node --tf-image
	$(PY) -m hack.run_tf

lint: venv
	$(PY) -m hack.check_layers
	$(VENV)/bin/ruff check controller reconcile tfjob_controller hack tests
	$(VENV)/bin/mypy
	$(PY) -m hack.gen_crd --check
	$(PY) -m hack.gen_chart --check

unit: venv
	$(PY) -m pytest tests/unit -q

# Every test: lint and layering checks, unit tests, the cluster tests against the real
# local control plane (left running afterwards for fast re-runs; tests/cluster/
# test_real_node.py adds the real node to it, and one MultiWorkerMirroredStrategy job
# trains on it with real TensorFlow), then `make run` as a newcomer runs it (its own
# cluster, hack/run-check.sh) and the image test.
test: lint cluster node-binaries tf-image ops-tools
	TFJOB_KEEP_CLUSTER=1 $(PY) -m pytest -p no:cacheprovider
	hack/run-check.sh run
	PYTHON=$(PY) hack/image-test.sh

# The long fuzz runs (make test runs short seeded ones): 10,000 specs through the pure
# path, 20,000 answers through the HTTP client against h11, 1,000 through the real
# apiserver and controller. TFJOB_FUZZ_SEED picks the seed.
fuzz: cluster
	TFJOB_FUZZ_EXAMPLES=10000 $(PY) -m pytest -p no:cacheprovider -s tests/unit/test_fuzz.py
	TFJOB_HTTP_FUZZ_EXAMPLES=20000 $(PY) -m pytest -p no:cacheprovider -s tests/unit/controller/client/test_http_fuzz.py
	TFJOB_KEEP_CLUSTER=1 TFJOB_FUZZ_CLUSTER_EXAMPLES=1000 $(PY) -m pytest -p no:cacheprovider -s \
		tests/cluster/test_fuzz_cluster.py

# The image's pinned, hashed dependencies (config/manager/requirements.lock) and build
# backend (build-requirements.lock), from pyproject.toml's; run after changing either
# (tests/unit/test_packaging.py checks).
lock: venv
	$(PY) -m pip install --quiet uv
	$(VENV)/bin/uv pip compile pyproject.toml --generate-hashes --no-header \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		-o config/manager/requirements.lock
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
		| $(VENV)/bin/uv pip compile - --generate-hashes --no-header \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		-o config/manager/build-requirements.lock

bench: binaries
	hack/bench $(BENCH_ARGS)

# The same with the upstream TFJob controller beside ours (built and cached on first use).
bench-upstream: binaries
	hack/bench --compare upstream $(BENCH_ARGS)

# One process at size (docs/benchmarks.md#scaling-with-the-number-of-jobs): 200, 1,000 and 5,000 TFJobs of 8 at
# unlimited QPS, ours, upstream at 4 threads and at its default 1, and the floor at each
# size, on one cluster sized for 40,000 pods (.cluster-bench/); about 3 hours on 2 cores (the 5,000-job row alone: 2 h 4 min at 6e98f41).
bench-scale: binaries
	hack/bench --scaling 200,1000,5000 --qps unlimited --compare upstream --timeout 5400 \
		$(BENCH_SCALE_ARGS)

# The training-progress benchmark (docs/benchmarks.md#training-progress): 200 TFJobs of
# 8 workers, every pod reporting every 5 s, on a cluster of its own (.cluster-bench-progress/).
bench-progress: binaries
	$(PY) -m hack.bench_progress $(BENCH_PROGRESS_ARGS)

# An anonymous flood of the progress endpoint (docs/benchmarks.md#progress-endpoint-flood):
# 4,096 and 20,000 held connections and 1,100 bare connects while a new job reports, on
# a cluster of its own (.cluster-bench-flood/).
bench-flood: binaries
	$(PY) -m hack.bench_flood $(BENCH_FLOOD_ARGS)

# A restart at size (docs/benchmarks.md#restart-and-failover-at-size): a new process's
# time to its first write with every job's pods cached, ours beside upstream, on a
# cluster of its own (.cluster-bench-failover/).
bench-failover: binaries
	$(PY) -m hack.bench_failover --compare upstream $(BENCH_FAILOVER_ARGS)

# The chaos suite at full size (tests/chaos: 50 TFJobs, 300 pod kills, 10 controller
# SIGKILLs, apiserver and etcd restarts, watch faults, leader partitions), seeds 1 2 3
# in a row, each on a cluster of its own (.cluster-chaos/); reports under chaos-out/.
# make test runs a short seeded version (tests/cluster/test_chaos_scale.py).
chaos: binaries
	rc=0; for seed in 1 2 3; do $(PY) -m tests.chaos --seed $$seed $(CHAOS_ARGS) || rc=1; done; \
		exit $$rc

# The image really run: a Docker engine (Debian's docker.io, installed and started when
# none answers, stopped again), a base image made from Debian's packages, the image
# built on it with config/manager/Dockerfile, then run with the Deployment's security
# settings against a local cluster of its own until a sample TFJob succeeds.
image-test: binaries
	PYTHON=$(PY) hack/image-test.sh

# For those with Docker and a registry: a kind cluster, the image loaded and deployed, a
# sample to Succeeded, then the cluster tests against it (hack/kind.sh e2e).
kind-e2e: venv
	PYTHON=$(PY) hack/kind.sh e2e
