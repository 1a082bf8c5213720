PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

PYTEST := $(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder tests

.PHONY: test test-spec test-integration test-xla run install docs bench bench-sweep bench-scale bench-peers bench-compiles clean

$(STAMP): pyproject.toml
	@test -x $(PY) || (command -v $(PYTHON) >/dev/null && $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV))
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

# One pytest worker per core (files kept whole: module fixtures share compiled
# integrators), the longest files first (tests/conftest.py orders them; xdist
# keeps that order); the suite is dominated by compiling, which tests/conftest.py
# makes cheaper by compiling without LLVM's optimisation.
test: $(STAMP)
	$(PYTEST)

# One tier at a time (pyproject.toml's markers): the specification; real services started,
# killed and resumed, and the fuzzers; what XLA compiles (run it when JAX or XLA changes).
test-spec: $(STAMP)
	$(PYTEST) -m spec

test-integration: $(STAMP)
	$(PYTEST) -m integration

test-xla: $(STAMP)
	$(PYTEST) -m xla_internals

# The documentation site from docs/ into site/; any warning (a broken link, a docstring
# mkdocstrings cannot read) fails the build.  The test extra includes what it needs.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

run: $(STAMP)
	$(PY) -m sweep.cli.sweep_command

bench: $(STAMP)
	$(PY) workflows/benchmarks/bench_solver.py --out workflows/benchmarks/results/solver.txt
	$(PY) workflows/benchmarks/bench_cloth.py --out workflows/benchmarks/results/cloth.txt
	$(PY) workflows/benchmarks/bench_linalg.py --out workflows/benchmarks/results/linalg.txt

# What a user waits for before solving starts (issue 43): every shipped model's first simulate from an empty
# cache and from a warm one, and the forward-mode program's compile against the plain one's (about 10 minutes).
bench-compiles: $(STAMP)
	$(PY) workflows/benchmarks/bench_compiles.py --out workflows/benchmarks/results/compiles.txt

# The sweep pipeline on 2,000 RSCR points (a quarter of an hour on 2 cores; run it on a quiet machine).
bench-sweep: $(STAMP)
	$(PY) workflows/benchmarks/bench_sweep.py --out workflows/benchmarks/results/sweep.txt

# The pipeline alone at scale: one driver, N = 1..64 worker processes writing pre-computed RSCR-shaped
# batches (every worker loads JAX, so a worker count whose memory would not fit is skipped, and said so).
# Run it on a quiet machine; `bench_scale.py --quick` is a smoke test.
bench-scale: $(STAMP)
	$(PY) workflows/benchmarks/bench_scale.py --out workflows/benchmarks/results/scale.txt

# mechsweep against diffrax (Dopri8) and heyoka, side by side (issue 11): pendulum, Andrews'
# squeezer, RSCR, Mechanism0, the 90x90 cloth, and a GPU section when one is present.  Mostly
# compiling: run it on a quiet machine.  `bench_peers.py --quick` is a smoke test.
bench-peers: $(STAMP)
	$(PY) -m pip install -q -e ".[peers]"
	$(PY) workflows/benchmarks/bench_peers.py --out workflows/benchmarks/results/peers.txt

clean:
	rm -rf $(VENV) .pytest_cache site
