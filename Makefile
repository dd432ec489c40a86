# The workbook's commands. Everything a fresh machine needs is installed by these targets.
#   make lab        set up, then start JupyterLab on notebooks/
#   make test       set up, then run every test (unit, end-to-end, notebooks through nbval)
#   make bench      the loader / device-loop benchmark, ratios against the targets
#   make data       download (or build offline) and verify MNIST
#   make notebooks  re-execute the notebooks in place on this machine, committing-ready
#   make browser    install Chromium for the browser test (Debian/Ubuntu, as root; make test runs it)
#   make reset      notebooks back to their committed state, checkpoints/results removed (data kept)
#   make classroom-cache                  precompile every graph the workbook traces, one archive
#   make classroom-import ARCHIVE=<file>  load that archive into this machine's compile cache
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-stamp
# On a Trainium host (a Neuron device node exists) also install torch-neuronx and neuronx-cc
# from the Neuron pip repository; elsewhere they are not installable and not needed.
REQUIREMENTS := requirements.txt $(if $(wildcard /dev/neuron0),requirements-neuron.txt)
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# make lab LAB_IP=0.0.0.0 LAB_PORT=8890: where JupyterLab listens. The default, the loopback
# address, is what an SSH tunnel reaches (README: "JupyterLab on a remote trn1").
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888
# Jupyter refuses to start as root unless told: root is normal in containers and on instances.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
CHROMIUM ?= /usr/bin/chromium
CLASSROOM_ARCHIVE ?= build/classroom-cache.tar.gz

.PHONY: lab test bench data notebooks venv clean-venv browser reset classroom-cache classroom-import

venv: $(STAMP)

# Re-install only when the requirements change; re-create the venv when its python is gone
# (e.g. the system python was upgraded under it).
$(STAMP): $(REQUIREMENTS) pyproject.toml
	@if ! $(PY) -c 'import sys' >/dev/null 2>&1; then \
	    echo "Creating $(VENV) with $$($(PYTHON) --version)"; \
	    rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); \
	fi
	@echo "Installing $(REQUIREMENTS) into $(VENV): the first time this downloads about 3 GB"
	@echo "(torch and the CUDA libraries it needs even on a CPU) and takes a few minutes."
	$(PY) -m pip install --disable-pip-version-check $(addprefix -r ,$(REQUIREMENTS))
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -e .
	@touch $@

data: $(STAMP)
	$(PY) -m mnist_mlp.download

# The venv's bin/ first on PATH: kernels and what they start find its torchrun, neuronx-cc and
# neuron_parallel_compile by name without `source .venv/bin/activate`.
lab: data
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/jupyter lab --notebook-dir=notebooks \
	    --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) $(LAB_ROOT_FLAG)

test: data browser
	$(PY) -m pytest tests $(NOTEBOOKS) --nbval --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg

bench: data
	$(PY) mnist_mlp/bench.py

# Executes the notebooks in order (later ones read results earlier ones wrote).
notebooks: data
	@for nb in $(NOTEBOOKS); do \
	    echo "executing $$nb"; \
	    $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	        --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.timeout=900 \
	        --ExecutePreprocessor.record_timing=False "$$nb" || exit 1; \
	done

# Chromium for tests/browser (Debian's package; Playwright drives it, it downloads no browser).
# Where it cannot be installed, the browser test fails and says why.
browser:
	@if [ -x $(CHROMIUM) ]; then \
	    echo "Browser for the browser test: $$($(CHROMIUM) --version 2>/dev/null || echo $(CHROMIUM))"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Chromium for the browser test (apt-get, about 250 MB)"; \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	        chromium fonts-noto-color-emoji; } || echo "apt-get failed: the browser test will fail"; \
	else \
	    echo "No $(CHROMIUM) and no way to install it here (needs root and apt-get): the browser"; \
	    echo "test will fail. Install it: sudo apt-get install -y chromium"; \
	fi

# Shows what it restores and removes first; keeps data/, .venv/ and notebooks you created.
reset:
	$(PY) -m helpers.classroom reset $(if $(filter 1,$(YES)),--yes)

classroom-cache: data
	$(PY) -m helpers.classroom cache --archive $(CLASSROOM_ARCHIVE)

classroom-import: venv
	@if [ -z "$(ARCHIVE)" ]; then \
	    echo "usage: make classroom-import ARCHIVE=path/to/classroom-cache.tar.gz" >&2; exit 2; fi
	$(PY) -m helpers.cache import "$(ARCHIVE)"

clean-venv:
	rm -rf $(VENV)
