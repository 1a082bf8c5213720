PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test run install bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || (command -v $(PYTHON) >/dev/null && $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV))
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

run: $(STAMP)
	$(PY) -m sweep.runner_cli

bench: $(STAMP)
	$(PY) workflows/benchmarks/bench_solver.py

clean:
	rm -rf $(VENV) .pytest_cache
