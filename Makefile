# Two commands on a fresh machine: `make run` and `make test`. Both create .venv on first use and install the
# pinned dependency set (constraints.txt) with uv, which takes seconds where pip takes about a minute.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install sysdeps run test bench lint format constraints clean airflow

install: $(STAMP) sysdeps

# System packages: bubblewrap isolates agent code in the sandbox. Installed only when missing.
sysdeps:
	@command -v bwrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || { $(BIN)/python -m ensurepip --upgrade >/dev/null 2>&1; $(BIN)/python -m pip install --quiet --disable-pip-version-check uv; }
	$(BIN)/uv pip install --quiet --python $(BIN)/python -c constraints.txt -e '.[dev]'
	touch $(STAMP)

run: install
	$(BIN)/dareforge run

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python -m bench

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Airflow on this machine: UI at http://localhost:8080, user admin (password printed on first start, kept in
# data/airflow/simple_auth_manager_passwords.json.generated). Metadata: SQLite in data/airflow/ (git-ignored).
# One JWT secret shared by every Airflow component (a hand-written airflow.cfg has none).
AIRFLOW_ENV = AIRFLOW_HOME=$(CURDIR) AIRFLOW_CONFIG=$(CURDIR)/airflow.cfg PATH=$(CURDIR)/$(BIN):$$PATH

airflow: install
	mkdir -p data/airflow
	test -s data/airflow/jwt_secret || (umask 077; $(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(64))' > data/airflow/jwt_secret)
	$(AIRFLOW_ENV) $(BIN)/airflow db migrate
	$(AIRFLOW_ENV) $(BIN)/python -m dareforge.orchestration pools
	$(AIRFLOW_ENV) AIRFLOW__API_AUTH__JWT_SECRET=$$(cat data/airflow/jwt_secret) $(BIN)/airflow standalone

# Re-pin after changing dependencies in pyproject.toml.
constraints: install
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o constraints.txt

clean:
	rm -rf $(VENV) data/ .pytest_cache .ruff_cache
