# crossrail: `make demo` installs and runs the main job; `make test` installs and passes the tests; `make check` is
# the quick loop (lint, types, contracts and the tests not marked slow).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.crossrail-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.DEFAULT_GOAL := help
.PHONY: help install demo check test lint bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

# The stamp records the inputs of the environment, so an unchanged one is not reinstalled.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,sim,reports,postgres,torch,jax,ray,k8s,api,mlflow,browser]'
	touch $@

install: $(STAMP) ## create .venv with crossrail and its dev tools

demo: $(STAMP) ## install, then validate, submit and report the example experiments in a temporary workspace
	$(PY) -m crossrail.cli.demo

lint: $(STAMP) ## ruff, mypy and the import-layer contracts
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

check: $(STAMP) lint ## lint, types, contracts and the tests not marked slow: the quick loop (a few minutes)
	$(VENV)/bin/pytest -n 2 -q -m "not slow" $(ARGS)

test: $(STAMP) lint ## install, lint and run the whole test suite (slow tests and benchmarks' reduced runs too)
	$(VENV)/bin/pytest -n 2 -q --durations=15 $(ARGS)

bench: $(STAMP) ## run the benchmarks (each prints one summary line last)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean: ## remove the environment and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
