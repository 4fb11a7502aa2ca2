# gpsl: two commands on a fresh machine (python3, pip, apt):
#   make run    build .venv, install the requirements, serve the app on the sample project
#   make setup  the first lead account of the app's store (before serving it to a team)
#   make test   build .venv, install the dev requirements and the benchmarks' peers
#               (+ Debian Chromium and PostgreSQL), ruff + pytest (the store tests run on
#               SQLite and on a temporary PostgreSQL)
# Requirements are re-installed only when a requirements file or pyproject.toml changes. The
# dev install contains the runtime one, so `make run` after `make test` installs nothing.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8501
CHROMIUM := /usr/bin/chromium

.PHONY: run setup test lint chromium postgresql labelstudio install install-dev clean

# single-user local mode on the loopback (no sign-in) until the store has an account
run: $(VENV)/.installed-run
	$(BIN)/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) \
		--server.headless true --browser.gatherUsageStats false

# asks for the lead's name and password on the terminal (store: $$GPSL_DB or data/gpsl.sqlite3)
setup: $(VENV)/.installed-run
	$(BIN)/python -m gpsl.annotation.setup

test: $(VENV)/.installed-dev chromium postgresql labelstudio
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .

install: $(VENV)/.installed-run
install-dev: $(VENV)/.installed-dev

# Debian's python3 needs the python3-venv package for `python3 -m venv`; install it if missing.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
		echo "python3 -m venv failed; installing python3-venv with apt-get ..."; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
		$$SUDO apt-get update && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv && \
		$(PYTHON) -m venv $(VENV); }

$(VENV)/.installed-run: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	touch $@

# requirements-bench.txt without dependencies: crowd-kit declares transformers (and nltk,
# pyarrow) unpinned; its aggregators need only what that file and requirements.txt pin.
# The dev install implies the runtime one: both stamps are touched.
$(VENV)/.installed-dev: requirements.txt requirements-dev.txt requirements-bench.txt pyproject.toml \
		| $(BIN)/python
	$(BIN)/python -m pip install -r requirements-dev.txt
	$(BIN)/python -m pip install --no-deps -r requirements-bench.txt
	$(BIN)/python -m pip install --no-deps -e .
	touch $(VENV)/.installed-run $@

# The browser test drives Debian's Chromium (Playwright's own browser download is never used).
chromium:
	@if [ -x $(CHROMIUM) ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "NOTE: $(CHROMIUM) is missing and apt-get needs root (no password-less sudo);" \
		"install it with: sudo apt-get install chromium chromium-driver." \
		"The browser test will be skipped."; exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "NOTE: $(CHROMIUM) is missing and there is no apt-get; the browser test will be skipped."; \
		exit 0; fi; \
	echo "Installing Debian Chromium for the browser test ..."; \
	$$SUDO apt-get update && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver \
	|| echo "NOTE: could not install chromium with apt-get; the browser test will be skipped."

# The store tests also run on a real PostgreSQL server (Debian's postgresql, started by the
# tests as the postgres user in a temporary directory). Without it that half is skipped,
# with a note in the summary; under CI=true it fails instead.
postgresql:
	@if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "NOTE: PostgreSQL is missing and apt-get needs root (no password-less sudo);" \
		"install it with: sudo apt-get install postgresql." \
		"The PostgreSQL half of the tests will be skipped."; exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "NOTE: PostgreSQL is missing and there is no apt-get; its tests will be skipped."; \
		exit 0; fi; \
	echo "Installing Debian PostgreSQL for the store tests ..."; \
	$$SUDO apt-get update && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql \
	|| echo "NOTE: could not install postgresql with apt-get; its tests will be skipped."

# Label Studio for the gpsl serve integration test, in its own virtual environment outside
# the checkout ($$GPSL_LS_VENV or ~/.cache/gpsl-ls-venv; pins in tests/support/requirements-labelstudio.txt),
# installed once and kept; if the install fails the test says why and is skipped (fails on CI).
labelstudio: $(VENV)/.installed-dev
	@$(BIN)/python -m tests.support.labelstudio install \
	|| echo "NOTE: Label Studio could not be installed; its integration test will be skipped."

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
