# sm-llm-exporter: `make test` sets up everything it needs on a fresh machine, then tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BASE   := $(VENV)/.base
# Debian packages the tests start for real (chromium: the status page and the HTML report in a
# headless browser; iproute2: a network namespace per uploading host for journal-remote), and the
# C compiler for exporter/compiled/_speedups.c; apt-installed when missing and run as root.
DEB_PACKAGES ?= systemd libsystemd-dev pkg-config systemd-journal-remote openssh-server prometheus mtail gcc libc6-dev python3-dev python3-venv chromium faketime systemd-container man-db groff iproute2 victoria-metrics

.PHONY: all venv deps test unit lint typecheck pytest run bench man screenshots clean

all: test

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "apt-get install:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "missing Debian packages:$$missing (run make as root to install them)"; \
	  fi; \
	fi

# The compiled fast paths are built here when a C compiler is present (pure Python otherwise).
$(BASE): pyproject.toml setup.py exporter/compiled/_speedups.c exporter/compiled/_accounting.c \
	$(wildcard exporter/compiled/speedups/*.c) $(wildcard exporter/compiled/accounting/*.c)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(BASE)

# The test extras include systemd-python, which builds against libsystemd-dev (deps).
$(STAMP): $(BASE) | deps
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

lint: venv
	$(BIN)/ruff check exporter tests bench tools
	$(BIN)/ruff format --check exporter tests bench tools

typecheck: venv
	$(BIN)/mypy exporter tests bench tools

# The suite, then the parser, line-layer and reader tests once more
# on the pure-Python references (the one switch, SMLLM_PURE_PYTHON=1), so they are proven too.
PURE_UNIT ?= tests/unit/parse tests/unit/sources tests/unit/accounting tests/unit/checkpoint \
	tests/unit/ingest tests/unit/exposition/test_golden.py
PURE_OTHER ?= tests/integration/test_lines.py tests/integration/test_file_source.py \
	tests/integration/test_daemon.py tests/hostile/test_parse_fuzz.py \
	tests/hostile/test_file_source_hostile.py

# The unit tests run on both cores (no process, no port: nothing they could share), their
# coverage of the package measured and printed. The integration and end-to-end tests run on both
# cores too, a file to a worker (a file's processes and fixtures stay together; every port is
# the OS's pick): each waits on conditions with deadlines, so sharing the CPU only slows it.
# The hostile tests run one at a time: some hold the daemon's listener to its time bounds under
# thousands of connections, which a second busy core would blur. None of these is traced
# (tracing them would take the suite past ten minutes). The pure-Python reruns share both cores:
# none of them measures a latency.
pytest: venv
	$(BIN)/pytest -q -m unit -n 2 --cov=exporter --cov-report=term:skip-covered
	$(BIN)/pytest -m "not unit and not hostile" -n 2 --dist loadfile
	$(BIN)/pytest -m hostile
	SMLLM_PURE_PYTHON=1 $(BIN)/pytest -q -n 2 $(PURE_UNIT) $(PURE_OTHER)

# The unit tests alone (no process, no network), fewer random cases each: under a minute.
unit: venv
	SMLLM_QUICK=1 $(BIN)/pytest -q -m unit -n 2

test: lint typecheck pytest

# The daemon on the embedded demo (three nodes, no sm-llm unit or SSH needed), on this host
# only (127.0.0.1); its temporary journals are removed when it stops (Ctrl-C).
run: $(BASE)
	$(BIN)/sm-llm-exporter demo --listen 127.0.0.1:10027

# The benchmarks, each printing ratios to a baseline measured in the same run; AGAINST=REV also
# times commit REV's ingest on the same dumps (built in a git worktree with its own venv);
# WRITE_README=1 has the ingest benchmark rewrite its table in bench/README.md.
AGAINST ?=
WRITE_README ?=

# Every benchmark in turn, to the end: those that fail (a goal missed, counts that disagree)
# are named at the end, and the target fails then.
BENCHES = report.py \
  "$(strip ingest.py $(if $(AGAINST),--against $(AGAINST)) $(if $(WRITE_README),--write-readme))" \
  journal.py ssh.py pages.py soak.py backfill.py scale.py
bench: venv deps
	@failed=; for b in $(BENCHES); do \
	  echo "== bench/$$b"; $(BIN)/python bench/$$b || failed="$$failed $$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed"; exit 1; fi

# The screenshots README.md and docs/ show, made anew by the browser tests that check those pages.
screenshots: venv
	SMLLM_SCREENSHOTS=$(CURDIR)/docs/screenshots $(BIN)/pytest -q tests/e2e/test_browser.py \
	  tests/e2e/test_status_page.py tests/e2e/test_status_glance.py

# The man pages in man/, written from the command line and the config reference (argparse-manpage,
# in the test extras); committed, and a test holds them to what this writes.
man: venv
	$(BIN)/python tools/manpages.py

clean:
	rm -rf .demo $(VENV) .mypy_cache .ruff_cache .pytest_cache
