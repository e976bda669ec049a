# Two commands: `make demo` (set up, run the quickstart matrix, write its report) and
# `make test` (set up, start the services, run every test).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MATRIX := $(VENV)/bin/matrix
DEMO_DB ?= results/demo.db
DEMO_OUT ?= results/demo-report

.PHONY: demo test services images venv lint bench clean gpu-evidence gpu-wheels

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is pinned: the CPU build; an unpinned torch pulls several GB of CUDA packages.
	$(PY) -m pip install -q -e '.[local,docker,dev]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(MATRIX) run -m examples/quickstart.yaml --db $(DEMO_DB)
	$(MATRIX) report --db $(DEMO_DB) --format md --format html --out $(DEMO_OUT)
	@echo
	@echo "Results are stored in $(DEMO_DB) (try: $(MATRIX) ls --db $(DEMO_DB); $(MATRIX) show --db $(DEMO_DB))."
	@echo "Report: $(DEMO_OUT)/report.md and $(DEMO_OUT)/report.html"

# Docker engine + the Debian-built test image, Slurm with accounting (this machine as partition debug,
# three namespaced nodes as partition multi; `scripts/slurm-nodes.sh down` stops those), headless Chromium.
services:
	bash scripts/services.sh

# The era images of images/recipes.py (2018's PyTorch 1.0 to 2026's 2.13), each skipped when its tag
# exists; downloads and root filesystems are cached in /var/cache/matrix. Needs root and a Docker engine.
images: venv
	$(PY) images/build.py

# Two workers (pytest-xdist); each service's tests run one at a time on one of them (tests/conftest.py).
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: venv services
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

lint: venv
	$(VENV)/bin/ruff check runner tests benchmarks images
	$(VENV)/bin/mypy runner

# The GPU evidence kit (docs/gpu-evidence.md): on a machine with an NVIDIA GPU and PyTorch, no venv needed;
# GPU_EVIDENCE_ARGS e.g. "--budget 540 --pack /tmp/state.tgz". gpu-wheels fetches what such a machine lacks.
gpu-evidence:
	$(PYTHON) scripts/gpu_evidence.py $(GPU_EVIDENCE_ARGS)

gpu-wheels:  # any python3 with pip; the project's venv, where there is one, gives its tested versions
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/gpu_evidence_wheels.py

clean:
	rm -rf results .pytest_cache
