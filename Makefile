# Everything runs inside a virtualenv, created on first use with only python3:
# .venv for the tests, lint, docs and benchmarks (every extra they use), and
# .venv-demo for the demo, which needs SQLAlchemy alone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_VENV  := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

.PHONY: demo test lint typecheck docs bench clean

EXTRAS := tests,tests-integrations,docs,bench

# uv when the machine has it (much faster), pip otherwise.
$(STAMP): pyproject.toml
	if command -v uv >/dev/null 2>&1; then \
		[ -x $(BIN)/python ] || uv venv --quiet -p $(PYTHON) $(VENV); \
		uv pip install --quiet --compile-bytecode -p $(BIN)/python -e '.[$(EXTRAS)]'; \
	else \
		$(PYTHON) -m venv $(VENV) && \
		$(BIN)/python -m pip install --quiet --upgrade pip && \
		$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'; \
	fi
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/python examples/quickstart.py

# The whole suite on TEST_WORKERS pytest-xdist workers, each in databases of its
# own (tests/conftest.py); TEST_WORKERS=0 runs it in one process. Measured on
# the 2-core machine: the tests wait on locks, sleeps and subprocesses more
# than they compute, so more workers than cores is faster. Bytecode is written
# even where PYTHONDONTWRITEBYTECODE is set: without it every worker compiles
# every module it imports, and pytest rewrites every test module, each run.
TEST_WORKERS ?= 4

test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks migrations_example .ci clusters conftest.py
	$(BIN)/ruff format --check src clusters
	$(BIN)/mypy --strict src
	$(BIN)/mypy --strict clusters

docs: $(STAMP)
	$(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_generation.py

clean:
	rm -rf $(VENV) $(DEMO_VENV) site build dist .pytest_cache .mypy_cache .ruff_cache

# A 3-node MariaDB Galera cluster on 127.0.0.1 (ports 3311-3313), 3 writers and
# 1 tailing reader, then the cluster is torn down (see docs/distributed.md).
.PHONY: cluster-demo
cluster-demo: $(STAMP)
	$(BIN)/python -m clusters demo
