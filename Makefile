# Developer and CI entry points. `make test` builds what it needs: the venv
# (pinned by constraints.txt), the kube-apiserver/etcd binaries and kustomize
# (cached outside the tree by tests/controlplane/build.sh, tests/tools/kustomize.sh),
# and promtool and helm (tests/tools/promtool.sh, tests/tools/helm.sh).

VENV ?= .venv
PY = $(VENV)/bin/python
PYTHON ?= python3
PYTEST_ARGS ?=
VERSION ?= 0.1.0
IMAGE_REPO ?= ghcr.io/inference-cache

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
define pytest
	$(PY) -m pytest -q $(PYTEST_ARGS) $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests in $(1)" >&2; exit 1; fi; \
	exit $$rc
endef

.PHONY: install controlplane kustomize kubectl promtool helm engine-sources engine-contracts test unit fuzz lint cluster-up cluster-down run e2e manifests images images-test compose-up bench-webhook

install: $(VENV)/.install-stamp

$(VENV)/.install-stamp: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

controlplane:
	bash tests/controlplane/build.sh

# The pinned kustomize the tests compare `icache manifests` with (Go module proxy,
# cached outside the tree).
kustomize:
	bash tests/tools/kustomize.sh

# The pinned kubectl the README test runs the laptop steps with (Go module proxy,
# cached outside the tree).
kubectl:
	bash tests/tools/kubectl.sh

# The pinned promtool (alert rules and dashboard queries) and helm (the chart), from
# the Go module proxy, cached outside the tree.
promtool:
	bash tests/tools/promtool.sh

helm:
	bash tests/tools/helm.sh

# The pinned vLLM, SGLang and LMCache releases' sources (shared/engine_versions.py),
# from PyPI, cached outside the tree (tests/engine_contracts/fetch.py); seconds when
# cached.
engine-sources: install
	$(PY) -m tests.engine_contracts.fetch

# The injected wiring checked against those releases' CLI and config surface.
engine-contracts: install engine-sources
	$(call pytest,tests/engine_contracts)

test: install controlplane kustomize kubectl promtool helm engine-sources
	$(call pytest,tests)

# The pure tests only: no Go, no control plane, no Redis; seconds, for the
# edit-test loop. A test that uses a real process is marked `services`.
unit: install
	$(call pytest,tests/unit -m "not services and not integration and not e2e")

# Hypothesis fuzzing of the three admission routes, >= 100,000 cases with a
# fresh seed (in-process through the ASGI app; `make test` runs a fixed-seed slice).
FUZZ_EXAMPLES ?= 100000
fuzz: install
	ICACHE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(call pytest,-s tests/unit/webhook_process/test_webhook_fuzz.py)

e2e: install controlplane
	$(call pytest,tests/e2e)

lint: install
	rc=0; \
	$(VENV)/bin/ruff check . || rc=1; \
	$(VENV)/bin/mypy || rc=1; \
	$(VENV)/bin/ruff format --check . || rc=1; \
	$(VENV)/bin/mypy tests || rc=1; \
	$(VENV)/bin/lint-imports || rc=1; \
	exit $$rc

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok with fake
# GPU and CPU nodes (CLUSTER_ARGS=--no-controllers: the API server alone).
CLUSTER_ARGS ?=
cluster-up: install controlplane
	$(PY) -m tests.harness.cli $(CLUSTER_ARGS) up

cluster-down:
	$(PY) -m tests.harness.cli down

run: install
	$(VENV)/bin/icache webhook --insecure --port 8443 --backends-from manifests/samples

# Re-render manifests/rendered/ (what `icache manifests` prints) with the pinned
# kustomize after changing anything under manifests/; a test fails while it is stale.
manifests:
	bash tests/tools/render-manifests.sh

# The commit and build date `icache --version` prints inside the images.
BUILD_ARGS = --build-arg ICACHE_BUILD_COMMIT=$$(git rev-parse --short=12 HEAD 2>/dev/null) \
	--build-arg ICACHE_BUILD_DATE=$$(date -u +%Y-%m-%dT%H:%M:%SZ)

images:
	docker build $(BUILD_ARGS) -f Dockerfile.webhook -t $(IMAGE_REPO)/webhook:$(VERSION) .
	docker build $(BUILD_ARGS) -f Dockerfile.worker -t $(IMAGE_REPO)/worker:$(VERSION) .

compose-up:
	docker compose up --build

# Both images built from a clean checkout (git archive HEAD) on a base made from
# Debian's packages (no registry needed; cached), then run: the webhook read-only in
# embedded mode against examples/admission/, the worker's dispatcher and worker
# against the test control plane with real controllers. Installs and starts a Docker
# engine first where none runs. Run as root: installing the engine, starting dockerd
# and building the base (debootstrap, chroot) need it. See docs/testing.md.
images-test: install controlplane
	bash tests/images/docker-engine.sh
	$(PY) -m tests.images.check

# Admission throughput over TLS vs a compiled floor; needs Go.
BENCH_ARGS ?=
bench-webhook: install controlplane
	$(PY) benchmarks/bench_webhook.py $(BENCH_ARGS)
