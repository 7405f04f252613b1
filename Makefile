# Two commands on a fresh machine: `make run` and `make test`. Each sets itself up on first use.
# `make test`: lint (with the complexity check), format, the import contracts (pyproject's
# [tool.importlinter]), mypy strict over dispatcher/, tests/ and benchmarks/, then the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck check bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,otel,embedded]'
	touch $(STAMP)

# The demo (a workspace, its key printed once) is on here whatever the database: `make run` is
# a developer's first five minutes. DISPATCHER_DEMO=off in the environment still turns it off.
run: $(STAMP)
	DISPATCHER_DEMO=$${DISPATCHER_DEMO:-on} $(BIN)/dispatcher serve

test: $(STAMP)
	$(BIN)/ruff check dispatcher tests benchmarks
	$(BIN)/ruff format --check dispatcher tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy
	@if command -v promtool >/dev/null && [ -f deploy/prometheus/alerts_test.yml ]; then \
	  promtool check rules deploy/prometheus/alerts.yml && \
	  promtool test rules deploy/prometheus/alerts_test.yml; \
	else echo "promtool not installed: alert rule checks skipped (CI installs it)"; fi
	$(BIN)/pytest -q

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,otel,embedded,bench]'
	touch $(BENCH_STAMP)

# The load tests (benchmarks/README.md): embedded Postgres unless DATABASE_URL is set.
bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache
