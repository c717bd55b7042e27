# `make demo` and `make test` do all set-up themselves on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test docs bench bench-gpu clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[all]'
	$(PY) -c 'from remat_core.solvers.auto import warm_kernels; warm_kernels()'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m remat_core.cli demo --out demo_out

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --doctest-modules tests remat_core

docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

# On a machine with a CUDA device: the `cuda` tests, then the model benchmark on the device (its table goes to
# benchmarks/README.md under its own section, with the device's name). Refuses to run where torch sees no device.
BENCH_GPU_ARGS ?= --device cuda
bench-gpu: $(STAMP)
	$(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'bench-gpu: torch ' + torch.__version__ + ' sees no CUDA device')"
	$(PY) -c "import torch; print('bench-gpu on', torch.cuda.get_device_name(), '/ torch', torch.__version__, '/ CUDA', torch.version.cuda)"
	$(PY) -m pytest -m cuda -p no:cacheprovider tests
	$(PY) benchmarks/bench_torch_models.py $(BENCH_GPU_ARGS)

clean:
	rm -rf $(VENV) docs/_build demo_out .pytest_cache
