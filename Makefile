# jaxlab: `make demo` runs the default experiment, `make test` runs the tests.
# Each creates .venv (and installs jaxlab with its test extra) when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WORKDIR ?= workdirs/lm_tiny
# 8 fake CPU devices so sharding code is exercised on any machine.
TEST_ENV := XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu
PYTEST_ARGS ?= -n 2 --durations=30

.PHONY: demo test bench venv clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m jaxlab.main --config=lm_tiny --workdir=$(WORKDIR)

test: $(VENV)/.installed
	$(TEST_ENV) $(PY) -m pytest $(PYTEST_ARGS) tests

bench: $(VENV)/.installed
	$(PY) -m jaxlab.experiments.bench decode
	$(PY) -m jaxlab.experiments.bench train

clean:
	rm -rf $(VENV) workdirs
