# Two entry points (see README): `make demo` runs the scenario, `make test` the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test check lint typecheck pytest bench shim web web-check clean

$(STAMP): pyproject.toml $(wildcard setup.py)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	scripts/demo

# ruff (format + lint), mypy --strict, then every test with a real NATS server and a
# real Docker engine (started privately by scripts/docker-up when none is running).
test: $(STAMP) lint typecheck
	scripts/test

check: test

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

shim:
	$(MAKE) -C gpu_shim

# The web UI's third-party files (xterm.js, its fit add-on), rebuilt from package-lock.json
# into services/api/ui/vendor/ (committed: `make test` and `make demo` need no npm).
web:
	npm ci --no-audit --no-fund
	scripts/web-vendor

# The web UI's seed check against a fresh `fgpu up` (Docker, headless Chromium): one JSON line.
web-check: $(STAMP)
	scripts/web-check

# One JSON line per benchmark (a few minutes in all: three of them fill a 1M-event log).
bench: $(STAMP)
	$(PY) bench/schedule.py
	$(PY) bench/shim.py
	$(PY) bench/fold.py
	$(PY) bench/rebuild.py
	$(PY) bench/projection_lag.py
	$(PY) bench/state_at.py
	$(PY) bench/cli.py
	$(PY) bench/tenancy.py
	$(PY) bench/flood.py
	$(PY) bench/history.py
	$(PY) bench/ended_ids.py
	$(PY) bench/archive.py
	$(PY) bench/failover.py
	$(PY) bench/fragmentation.py
	$(PY) bench/serve.py
	eval "$$(scripts/docker-up)" && $(PY) bench/start.py
	eval "$$(scripts/docker-up)" && $(PY) bench/density.py
	eval "$$(scripts/docker-up)" && $(PY) bench/web.py
	$(PY) bench/queue_scale.py
	$(PY) bench/soak.py
	$(PY) bench/pipeline.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
