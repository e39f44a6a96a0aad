# Two commands work on a fresh machine with nothing but Python: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint typecheck format bench bench-deps clean

# torch is pinned exactly: any other spelling (plain `torch`, a range) makes pip fetch the newest
# CUDA build, several GB. With torch==2.13.0 installed first, nothing below pulls another one.
# pip runs quietly, so each step says what it is doing: the first run downloads for minutes.
$(STAMP): pyproject.toml
	@echo "make: creating the virtualenv $(VENV) with $(PYTHON)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "make: installing torch 2.13.0 into $(VENV) (the largest download: minutes on a first run)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
	@echo "make: installing chute and its dev tools (ruff, mypy, pytest, ...) into $(VENV)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)
	@echo "make: $(VENV) is ready: run chute as $(BIN)/chute, or 'source $(BIN)/activate' first"

venv: $(STAMP)

demo: $(STAMP)
	@echo "make: running $(BIN)/chute demo (about a minute and a half; each step says what it proves)"
	$(BIN)/chute demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

# `make lint` runs ruff and mypy (strict; settings in pyproject.toml).
# pytest exits 5 when it collects no tests; that is not a failure of the suite.
# PYTEST_WORKERS=0 runs it in one process (pytest-xdist's -n 0), e.g. to debug a failure.
PYTEST_WORKERS ?= 2
test: lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS); rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

# mosaicml-streaming and litdata declare torch/torchvision as dependencies: pip would replace
# torch 2.13.0 with a multi-GB CUDA build of the newest torch (and streaming pins numpy < 2.2).
# So they are installed without dependencies, then the runtime modules they import, which pull
# no torch (docs/benchmarks.md explains it, and the torchvision stand-in streaming needs).
BENCH_NODEPS := mosaicml-streaming==0.13.0 litdata==0.2.76
BENCH_RUNTIME := brotli python-snappy zstd catalogue lightning-utilities boto3
BENCH_ARGS ?=

bench-deps: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $(BENCH_NODEPS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(BENCH_RUNTIME)
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"

# `make bench BENCH_ARGS="--quick --only loaders"` for a smoke run of one comparison.
bench: bench-deps
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .mypy_cache src/*.egg-info
