# Two commands on a fresh machine: `make run` and `make test`. Both create .venv on first use and install the
# pinned dependency set (constraints.txt) with uv, which takes seconds where pip takes about a minute.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test bench lint format constraints clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
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

# Re-pin after changing dependencies in pyproject.toml.
constraints: install
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o constraints.txt

clean:
	rm -rf $(VENV) data/ .pytest_cache .ruff_cache
