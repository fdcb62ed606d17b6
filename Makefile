# One command installs and runs the demo (`make demo`), one installs and runs the tests
# (`make test`). Needs only python3 (>= 3.11) and make.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install bytecode demo up lint test test-long test-unit test-integration bench bench-full soak lock clean contracts

# uv (the tool `make lock` uses) installs the lock in about a quarter of pip's time here (23 s
# against 78 s on a fresh clone, docs/testing.md); where uv cannot be had, pip does the same.
UV_VERSION ?= 0.9.0
$(STAMP):
	$(PY) -m venv $(VENV)
	( $(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION) \
	  && $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements.lock \
	  && $(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e . ) \
	|| ( $(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock \
	  && $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e . )
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# Every muster process imports a few hundred of muster's own modules. Where Python is told not to
# write bytecode (PYTHONDONTWRITEBYTECODE, as on this project's CI machine) each one compiled them
# all again at start; compiled once here (a few seconds, only what changed), they are read instead.
bytecode: install
	$(BIN)/python -m compileall -q -j 0 contracts muster services

demo: bytecode
	$(BIN)/muster demo

up: bytecode
	$(BIN)/muster up

# The gate: lint and types (pyproject.toml [tool.ruff], [tool.mypy]); `make test` runs it too
# (mypy beside pytest, below).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# Debian packages some tests need (deploy/system-packages.txt) are installed first when missing.
# The suite runs on TEST_WORKERS pytest-xdist processes (docs/testing.md: most tests wait on
# fsync, timeouts and other processes, not on the CPU); TEST_WORKERS=0 runs it in one process.
# The gate runs beside the tests, not before them: ruff first (a second), then mypy (about 25 s
# of CPU on a fresh clone, no cache) at a lower priority while pytest runs, in what CPU the
# workers leave idle; its output is printed after pytest's, and `make test` fails if either failed.
TEST_WORKERS ?= 3
PYTEST_ARGS := -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --max-worker-restart 0 --durations=15
test: bytecode
	$(BIN)/ruff check .
	sh deploy/system-deps.sh
	@nice -n 10 $(BIN)/mypy > $(VENV)/gate-mypy.out 2>&1 & types=$$!; \
	echo "$(BIN)/python -m pytest $(PYTEST_ARGS)   (mypy beside it, pid $$types)"; \
	$(BIN)/python -m pytest $(PYTEST_ARGS); tests=$$?; \
	wait $$types; typed=$$?; echo "mypy:"; cat $(VENV)/gate-mypy.out; \
	[ $$typed -eq 0 ] || echo "make test: the gate failed: mypy (above)"; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

# The long scenarios, skipped in `make test`: the fault suite's (docs/faults.md), the real
# clusters' (tests/e2e/test_real.py, docs/plugins.md) and the `muster up`/`muster demo` variants
# moved out of the default run (docs/testing.md, "Long scenarios"): MUSTER_LONG_TESTS=1.
test-long: install
	MUSTER_LONG_TESTS=1 $(BIN)/python -m pytest -q tests/fault tests/e2e tests/integration/provisioner/test_ansible_automator.py tests/integration/bus/test_replicas_cluster.py

test-integration: install
	$(BIN)/python -m pytest -q tests/integration tests/e2e

bench: install
	$(BIN)/python bench/run_all.py

bench-full: install  # the issues' sizes (a 10-million-event log): hours, not minutes
	$(BIN)/python bench/run_all.py --full

# The nemesis soak (docs/faults.md): 10 minutes by default, outside `make test`.
# MUSTER_SOAK_SECONDS / _OPS / _FAULT_EVERY / _SEED / _REPORT change it.
soak: install
	$(BIN)/python -m pytest -q -s -p no:cacheprovider -m soak tests/fault/test_soak.py

# Regenerate the AsyncAPI document from contracts/ and the tracker's OpenAPI document from its
# routes (a test fails when either is stale).
contracts: install
	$(BIN)/python -m contracts.asyncapi > docs/asyncapi.json
	$(BIN)/python -m services.tracker.contract > docs/openapi.json

# Re-pin dependencies after changing pyproject.toml.
lock: install
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) .muster .pytest_cache
