# The workbook's commands. Everything a fresh machine needs is installed by these targets.
#   make lab        set up, then start JupyterLab on notebooks/
#   make test       set up, then run every test: unit, end-to-end, every notebook executed once
#                   (in JupyterLab in Chromium, on the trn1 double of tests/trn1_double/) and its
#                   outputs compared; budget 150 units of one
#                   fresh `python -c "import torch_xla"` (about 12.5 min on 2 cores), printed at its end
#   make test-quick the unit tests only (no notebooks, browser, training or multi-process runs);
#                   budget 25 units (about 1.5 min on 2 cores)
#   make book       the workbook as a website in build/book/html (README, notebooks with their
#                   committed outputs, docs/; nothing executed); open build/book/html/README.html
#   make lint       ruff over the code, the tests and the notebooks (both test targets run it too)
#   make bench      the loader / device-loop benchmark, ratios against the targets
#   make mutants    mutation testing of the modules that decide (not part of make test): the
#                   score per module, each to reach 90 % (docs/mutation-testing.md)
#   make data       download (or build offline) and verify MNIST
#   make notebooks  re-execute the notebooks in place on this machine, committing-ready, and
#                   record the graphs they compile (notebooks/classroom_graphs.json)
#   make browser    Chromium and the emoji font for the browser test, when missing (make test runs it)
#   make scanner    checkov, the IaC security scanner of the workshop template, in build/scanner-venv
#   make slurm      Slurm and munge for the Slurm test's local cluster, when missing (make test runs it)
#   make reset      notebooks back to their committed state, checkpoints/results removed (data kept)
#   make classroom-cache                  run every notebook into one compile cache, one archive
#   make classroom-check                  a student's pass: does it compile a graph the cache lacks?
#   make classroom-import ARCHIVE=<file>  load that archive into this machine's compile cache
#   make class-cost SEATS=20 HOURS=3      a class on the workshop stack priced over docs/instructor.md's
#                                         run-sheet (optionally SPARES=N ZONES=K IDLE=M: spares, zones, IdleMinutes)
#   make class-bundle [COMMIT=<rev>]      one file for labs with no way out: the commit, MNIST, the
#                                         wheels, the classroom cache (docs/workshop-stack.md)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-stamp
# On a Trainium host (a Neuron device node exists) also install torch-neuronx and neuronx-cc
# from the Neuron pip repository; elsewhere they are not installable and not needed.
REQUIREMENTS := requirements.txt $(if $(wildcard /dev/neuron0),requirements-neuron.txt)
# The Neuron 2.31 "Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04)" keeps its PyTorch here
# (Neuron DLAMI User Guide, v2.31.0). When it exists the venv is layered on it instead of
# downloading a second torch; make venv DLAMI_VENV= ignores it. helpers/setup/venv_plan.py decides.
DLAMI_VENV ?= /opt/aws_neuronx_venv_pytorch_2_9
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
SOLUTIONS := $(sort $(wildcard notebooks/solutions/[0-9][0-9]_*.py))
# make lab LAB_IP=0.0.0.0 LAB_PORT=8890: where JupyterLab listens. The default, the loopback
# address, is what an SSH tunnel reaches (docs/trn1.md: "JupyterLab on a remote trn1").
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888
# make lab LAB_ARGS=--no-browser: more jupyter lab options (the workshop stack's service passes that one).
LAB_ARGS ?=
# Jupyter refuses to start as root unless told: root is normal in containers and on instances.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# make test PYTEST_ARGS="-k notebook": more pytest options. Two xdist workers: the notebooks
# (the browser run on the trn1 double, the output comparison, the double's judgments) on one,
# everything else on the other.
PYTEST_ARGS ?=
CLASSROOM_ARCHIVE ?= build/classroom-cache.tar.gz
# make class-bundle: the tested commit (default HEAD), the DLAMI venv's Python for the wheels.
CLASS_BUNDLE ?= build/class-bundle.tar.gz
COMMIT ?= HEAD
PYTHON_VERSION ?= 3.12
# checkov's own venv (requirements-scanner.txt says why not .venv); tests find it there.
SCANNER_VENV ?= build/scanner-venv
# The site builder's own venv (make book; requirements-book.txt); tests/browser/test_book.py finds it there.
BOOK_VENV ?= build/book-venv

.PHONY: lab test test-quick lint bench mutants data notebooks venv clean-venv browser scanner slurm reset classroom-cache classroom-check classroom-import class-cost class-bundle book book-venv

venv: $(STAMP)

# Re-install only when the requirements change; re-create the venv when its python is gone
# (e.g. the system python was upgraded under it). Where torch comes from (helpers/setup/venv_plan.py,
# which says so first; `python3 -m helpers.setup.venv_plan --dry-run` shows it without installing):
#   the Neuron 2.31 DLAMI: its PyTorch venv is the base, only the notebook packages are installed;
#     refused, saying what to do, when its torch/torch-xla/torchvision/torch-neuronx/neuronx-cc
#     are not the pinned ones
#   another Trainium host (plain Ubuntu 24.04): torch from PyTorch's CPU wheel index
#     (download.pytorch.org/whl/cpu), no CUDA libraries; torch-neuronx from the Neuron repository
#   anywhere else: everything from PyPI (about 4.4 GB the first time, 3.2 GB of it CUDA libraries)
$(STAMP): $(REQUIREMENTS) pyproject.toml
	$(PYTHON) -m helpers.setup.venv_plan --venv $(VENV) --python $(PYTHON) --dlami-venv "$(DLAMI_VENV)"
	@touch $@

data: $(STAMP)
	$(PY) -m mnist_mlp.common.download

# The venv's bin/ first on PATH: kernels and what they start find its torchrun, neuronx-cc,
# neuron_parallel_compile and tensorboard (`%tensorboard`) by name without activating the venv.
# jupyter-server-proxy, a server extension the venv enables when it installs, serves
# /proxy/<port>/: notebook 06 shows its TensorBoard there, so the one SSH tunnel to the lab is enough.
# JupyterLab's defaults for the learner's lab, as an overrides.d file in the venv's app settings
# (a choice the learner makes in Settings still wins): no "get notified about Jupyter news?"
# pop-up, no fetching news or updates.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/workbook.json
$(LAB_OVERRIDES): helpers/setup/jupyterlab_overrides.json
	install -D -m 644 $< $@

lab: data $(LAB_OVERRIDES)
	@$(PY) -c 'import jupyter_server_proxy' 2>/dev/null || \
	    { echo "jupyter-server-proxy is missing from $(VENV): run make venv" >&2; exit 1; }
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/jupyter lab --notebook-dir=notebooks \
	    --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) $(LAB_ROOT_FLAG) $(LAB_ARGS)

test: data browser scanner slurm book-venv
	$(PY) -m pytest -n 2 --dist loadgroup --durations=15 --budget-units=150 $(PYTEST_ARGS) tests

test-quick: data scanner
	$(PY) -m pytest -m "not e2e" -n 2 -q --durations=5 --budget-units=25 $(PYTEST_ARGS) tests

# ruff over the code, the tests and the notebooks (tests/test_lint.py runs it in both suites).
lint: venv
	$(PY) -m ruff check .

bench: data
	$(PY) benchmarks/bench.py

# mutmut mutates the modules pyproject.toml's [tool.mutmut] names, in a fresh mutants/ copy, and
# runs the unit tests that reach each change (one worker; docs/mutation-testing.md says how long);
# then the hand-made mutants of train_bf16.main(), which mutmut skips (decorated), and the score per
# module. `$(VENV)/bin/mutmut show <name>` shows one mutant's change. The tests'
# temporary trees go to memory (/dev/shm) where there is one: on a disk, writing the fake compile
# caches is most of a cache mutant's time. MNIST is read where `make data` put it (mutants/ has none).
mutants: data
	rm -rf mutants
	tmp=$$(mktemp -d -p $(if $(wildcard /dev/shm/.),/dev/shm,$${TMPDIR:-/tmp}) mutants.XXXXXX) && \
	  trap 'rm -rf "$$tmp"' EXIT && TMPDIR=$$tmp MNIST_DATA_DIR=$${MNIST_DATA_DIR:-$(CURDIR)/data} \
	  $(VENV)/bin/mutmut run --max-children 1
	$(PY) -m tests.hand_mutants
	$(PY) -m tests.mutation_scores

# Executes the notebooks in place, in order (later ones read results earlier ones wrote), then
# every exercise solution, and writes the graphs they compiled (fingerprints of their HLO) into
# notebooks/classroom_graphs.json: make test fails on a graph outside it. A part of the workbook:
# make notebooks NOTEBOOKS=notebooks/02_single_core_xla.ipynb SOLUTIONS= (the rest stays recorded).
notebooks: data
	$(PY) -m helpers.classroom notebooks --notebooks $(NOTEBOOKS) --solutions $(SOLUTIONS)
	$(if $(filter %06_inside_a_run.ipynb,$(NOTEBOOKS)),$(PY) -m tests.browser.trace_viewer_png)
	$(PY) -m helpers.classroom.time_budget --counts  # the outputs moved: restate the clock's figures

# Chromium (Debian's package, or Ubuntu's snap) and fonts-noto-color-emoji, each when missing;
# Playwright drives that Chromium and downloads no browser of its own.
browser:
	@bash tests/browser/install_browser.sh

# The site builder (requirements-book.txt) in a venv of its own, installed again only when that file
# changes: the site executes nothing, so it needs none of .venv's packages (in CI it is built without
# them), and .venv keeps none of Sphinx's. make test installs it too (tests/browser/test_book.py
# builds the site and reads it in Chromium). -W: a link to a page or heading that does not exist
# fails the build. .github/workflows/book.yml publishes build/book/html on GitHub Pages.
book-venv: $(BOOK_VENV)/.requirements-stamp

$(BOOK_VENV)/.requirements-stamp: requirements-book.txt
	rm -rf $(BOOK_VENV)
	$(PYTHON) -m venv $(BOOK_VENV)
	$(BOOK_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-book.txt
	@touch $@

book: book-venv
	rm -rf build/book/html build/book/doctrees
	$(BOOK_VENV)/bin/python -m sphinx -q -W --keep-going -b html -c book -d build/book/doctrees . build/book/html
	@echo "the site: build/book/html/README.html"

# checkov pinned in requirements-scanner.txt, in a venv of its own; again only when that file changes.
scanner: $(SCANNER_VENV)/.requirements-stamp

$(SCANNER_VENV)/.requirements-stamp: requirements-scanner.txt
	rm -rf $(SCANNER_VENV)
	$(PYTHON) -m venv $(SCANNER_VENV)
	$(SCANNER_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-scanner.txt
	@touch $@

# Debian's slurm-wlm and munge, when missing: tests/test_slurm.py starts a controller and two
# nodes of its own on the loopback address (deploy/slurm/train_torchrun.sbatch on a real Slurm).
slurm:
	@bash tests/install_slurm.sh

# Shows what it restores and removes first; keeps data/, .venv/ and notebooks you created.
reset:
	$(PY) -m helpers.classroom reset $(if $(filter 1,$(YES)),--yes)

# Runs every notebook and exercise solution as a student would (about as long as the whole
# workbook), compiling each graph once into one fresh cache; prints how many graphs it holds and
# writes this backend's part of notebooks/classroom_graphs.json.
classroom-cache: data
	$(PY) -m helpers.classroom cache --archive $(CLASSROOM_ARCHIVE)

# The same pass again, checked against notebooks/classroom_graphs.json (on Trainium also against
# the compile cache: the graphs it compiled into it): 0 graphs outside it.
classroom-check: data
	$(PY) -m helpers.classroom check

classroom-import: venv
	@if [ -z "$(ARCHIVE)" ]; then \
	    echo "usage: make classroom-import ARCHIVE=path/to/classroom-cache.tar.gz" >&2; exit 2; fi
	$(PY) -m helpers.cache import "$(ARCHIVE)"

# The whole bill of a class (deploy/class_cost.py): the run-sheet's steps at cited, dated rates,
# with a NAT gateway made for the class and with the class bundle instead. Reads the template
# and the workbook's clock; installs nothing.
SEATS ?= 20
HOURS ?= 3
SPARES ?= 0
ZONES ?= 2
class-cost:
	$(PY) -m deploy.class_cost --seats $(SEATS) --hours $(HOURS) --spares $(SPARES) --zones $(ZONES) \
	    $(if $(IDLE),--idle-minutes $(IDLE))
# The class bundle (deploy/bundle.py): COMMIT as a git bundle, MNIST, the wheels a lab's pip needs
# beyond the DLAMI venv (pip download for Python PYTHON_VERSION on x86-64 Linux: needs PyPI here,
# once), and CLASSROOM_ARCHIVE when it exists; every member's sha256 in its manifest.
class-bundle: data
	$(PY) -m deploy.bundle make $(CLASS_BUNDLE) --commit $(COMMIT) --python-version $(PYTHON_VERSION) \
	    $(if $(wildcard $(CLASSROOM_ARCHIVE)),--cache $(CLASSROOM_ARCHIVE))

clean-venv:
	rm -rf $(VENV)
