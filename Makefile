# The workbook's commands. Everything a fresh machine needs is installed by these targets.
#   make lab        set up, then start JupyterLab on notebooks/
#   make test       set up, then run every test (unit, end-to-end, notebooks through nbval)
#   make bench      the loader / device-loop benchmark, ratios against the targets
#   make data       download (or build offline) and verify MNIST
#   make notebooks  re-execute the notebooks in place on this machine, committing-ready
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-stamp
# On a Trainium host (a Neuron device node exists) also install torch-neuronx and neuronx-cc
# from the Neuron pip repository; elsewhere they are not installable and not needed.
REQUIREMENTS := requirements.txt $(if $(wildcard /dev/neuron0),requirements-neuron.txt)
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))

.PHONY: lab test bench data notebooks venv clean-venv

venv: $(STAMP)

# Re-install only when the requirements change; re-create the venv when its python is gone
# (e.g. the system python was upgraded under it).
$(STAMP): $(REQUIREMENTS) pyproject.toml
	@if ! $(PY) -c 'import sys' >/dev/null 2>&1; then \
	    echo "Creating $(VENV) with $$($(PYTHON) --version)"; \
	    rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); \
	fi
	$(PY) -m pip install --disable-pip-version-check -q $(addprefix -r ,$(REQUIREMENTS))
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -e .
	@touch $@

data: $(STAMP)
	$(PY) -m mnist_mlp.download

# The venv's bin/ first on PATH: kernels and what they start find its torchrun, neuronx-cc and
# neuron_parallel_compile by name without `source .venv/bin/activate`.
lab: data
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/jupyter lab --notebook-dir=notebooks

test: data
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

clean-venv:
	rm -rf $(VENV)
