# `make book` and `make test` each do their whole set-up on a fresh machine:
# virtual environment, pinned requirements, the package, the data, and (for tests) headless Chromium.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements.txt requirements-static.txt pyproject.toml | sha256sum | cut -c1-12)
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
FMNIST_RAW := $(addprefix data/FashionMNIST/raw/,train-images-idx3-ubyte train-labels-idx1-ubyte \
              t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
export GRADALIGN_THREADS ?= 2
# Python caches the bytecode of what it imports and setup did not compile (src, tests: pytest's rewritten asserts),
# also where the machine sets PYTHONDONTWRITEBYTECODE: once, not in every process (each worker, kernel, sweep job).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: book test setup data browser lab clean

# The HTML book in _build/html, with the source archive of the commit it was built from (its Get the code page).
book: setup data
	$(BIN)/gradalign book --preset $(or $(PRESET),auto)

# nbval executes every notebook once, cell by cell, at the smoke preset, against a temporary result store and run
# cache (conftest.py); the suite's book build (tests/conftest.py `built`) renders nbval's executed copies. Two
# pytest-xdist workers of one thread each: the notebooks are spread over both first, then one worker runs the tests
# that read the book (the "book" scope, conftest.py) while the other runs the rest of the suite. (Three workers on
# the two cores took 915 s where two took 847: the suite is bound by its computation, not by waiting.)
test: setup data browser
	$(BIN)/ruff check src tests notebooks conftest.py
	$(BIN)/ruff format --check src tests notebooks conftest.py
	GRADALIGN_THREADS=1 $(BIN)/python -m pytest -q -n 2 --nbval-lax --nbval-current-env notebooks tests

# The notebooks in a live JupyterLab, with the project's kernel (.venv); the sliders work there.
lab: setup data
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

setup: $(STAMP)

# uv installs the pinned requirements in 40 s where pip takes about two minutes (most of CI's set-up). uv does not
# read pip's configuration: pip's find-links (where a machine keeps wheels of its own, such as a CPU torch; from
# PIP_FIND_LINKS or `pip config`) are passed on, and where uv cannot install at all (a private index it does not
# know, no uv wheel), pip does it instead. --compile-bytecode, as pip does: 41 of those 44 s, but leaving it to the
# processes that import the modules (PYTHONDONTWRITEBYTECODE unexported above) cost the suite as much (2026-11-29:
# make test 893 s without, 886 s with), and outside make, where a machine sets PYTHONDONTWRITEBYTECODE, every
# process would compile torch from source.
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
INSTALL = $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python \
          $(addprefix --find-links ,$(FIND_LINKS)) $(1) || $(BIN)/pip install --quiet $(1)

$(STAMP): requirements.txt requirements-static.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==0.13.9 || echo "make: uv not installed; pip installs instead"
	$(call INSTALL,-r requirements.txt)
	$(call INSTALL,--no-deps -r requirements-static.txt)  # MathJax for the offline book
	$(call INSTALL,--no-deps -e .)
	rm -f $(VENV)/.installed-* && touch $@

# Fashion-MNIST: the Debian package where we may install it, else the user's copy ($GRADALIGN_DATA). Once its four
# files are unpacked in data/ (and GRADALIGN_DATA is not set), there is nothing to do: `gradalign data` would only
# say so, after importing torch (seconds of every `make book`).
data: setup
	@if [ -z "$${GRADALIGN_DATA+set}" ] && ls $(FMNIST_RAW) >/dev/null 2>&1; then \
	  echo "Fashion-MNIST ready in data/FashionMNIST/raw"; \
	else \
	  test -f $(FMNIST) || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    (apt-get install -y -qq dataset-fashion-mnist >/dev/null || \
	     (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null)); } || \
	    echo "note: Debian package dataset-fashion-mnist not installed; see README (Data)"; \
	  echo "$(BIN)/gradalign data"; $(BIN)/gradalign data || echo "make: [data] error ignored"; \
	fi

# Headless Chromium for the tests that open the built book (playwright drives this system Chromium;
# never `playwright install`).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -qq chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)); } || \
	  echo "note: chromium not installed; tests/test_book_browser.py will fail"

clean:
	rm -rf _build
