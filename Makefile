# ternmq — `make run` starts a node, `make test` runs the suite. Both install into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROTOS := $(wildcard proto/services/pb/*.proto)

.PHONY: run test test-fast lint format typecheck proto proto-check install clean bench system-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The listener's hot modules (pyproject.toml [tool.ternmq.compile]) are compiled in place
# with mypyc once the environment is installed, and again whenever one of them changes
# (the extension would otherwise shadow the edited source). TERNMQ_COMPILE=0: pure Python.
COMPILED = $(shell $(PY) -c 'import glob, tomllib; \
  pats = tomllib.load(open("pyproject.toml", "rb"))["tool"]["ternmq"]["compile"]["modules"]; \
  print(" ".join(sorted({p for pat in pats for p in glob.glob(pat)})))')
NATIVE := $(VENV)/.compiled

$(STAMP): $(BIN)/python pyproject.toml setup.py
	TERNMQ_COMPILE=0 $(BIN)/pip install -q -e '.[dev,etl]'
	rm -f $(NATIVE)
	touch $(STAMP)

# The extensions and the stamp get the time the build began, not the time it ended: a
# source edited while it ran is newer than both, so the next make (and the test suite's
# check) sees that extension as stale.
$(NATIVE): $(STAMP) $(COMPILED)
	touch $(NATIVE).began
	find services -name '*.so' -delete
	$(BIN)/python setup.py -q build_ext --inplace -j 2
	find services -name '*.so' -exec touch -r $(NATIVE).began {} +  # copied with old mtimes
	touch -r $(NATIVE).began $(NATIVE)
	rm -f $(NATIVE).began

install: $(NATIVE)

run: $(NATIVE)
	$(BIN)/ternmq start --config deploy/ternmq.conf

## Regenerate services/pb/ from proto/ (the only way those files change).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. \
	  --grpc_python_out=. $(PROTOS)

lint: $(STAMP)
	$(BIN)/ruff check services spark_pipeline tests bench
	$(BIN)/ruff format --check services spark_pipeline tests bench

format: $(STAMP)
	$(BIN)/ruff format services spark_pipeline tests bench
	$(BIN)/ruff check --fix services spark_pipeline tests bench

typecheck: $(STAMP)
	$(BIN)/mypy services spark_pipeline

JS_DEPS := tests/js/node_modules/.package-lock.json

$(JS_DEPS): tests/js/package.json tests/js/package-lock.json
	npm ci --prefix tests/js --silent --no-audit --no-fund

test: system-deps $(NATIVE) $(JS_DEPS)
	$(MAKE) lint typecheck
	ulimit -n 65536 2>/dev/null || true; \
	TERNMQ_ARTIFACTS=$(CURDIR)/test-artifacts $(BIN)/python -m pytest tests -q

# Debian packages the suite needs (mosquitto clients, Java, Node, Chromium, HAProxy, Redis,
# iproute2, a C compiler), installed when missing.
system-deps:
	bash scripts/system-deps.sh

test-fast: $(NATIVE)
	$(BIN)/python -m pytest tests/unit -q

bench: $(NATIVE)
	bash bench/run.sh

clean:
	rm -rf $(VENV) build *.egg-info data
	find services -name '*.so' -delete
