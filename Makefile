# Two commands on a fresh machine: `make serve` (the main job) and `make test`. Both create .venv
# when missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve demo test docs test-containers bench bench-api bench-scale bench-restart bench-commands bench-ingest bench-sealing bench-rls bench-erasure bench-ingest-quality bench-retrieval bench-peers bench-latest-first bench-aging bench-conversations bench-faults bench-contention soak typecheck clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e './clients/python[langgraph]' -e '.[dev]'
	$(BIN)/python -m infra.pgvector_build
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/palimpsest serve

demo: $(STAMP)
	$(BIN)/palimpsest demo

# The documentation site, built strict (a broken link or anchor fails it), into site/.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy domain services infra projections clients/python/palimpsest_client
	$(BIN)/python -m pytest

# The integration, pipeline and stream suites against the pgvector/pgvector and apache/kafka images
# (testcontainers); every suite skipped, with the reason, where no Docker engine answers.
test-containers: $(STAMP)
	PALIMPSEST_TEST_CONTAINERS=1 $(BIN)/python -m pytest tests/containers -rs

bench: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_pipeline

bench-api: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_api $(ARGS)

bench-scale: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_scale $(ARGS)

bench-restart: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_restart $(ARGS)

bench-commands: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_commands

bench-ingest: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_ingest

bench-sealing: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_sealing $(ARGS)

bench-rls: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_rls $(ARGS)

bench-erasure: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_erasure $(ARGS)

# The scripted model on the dev split; a real one: ARGS="--model http://127.0.0.1:8767/v1 --llm-model qwen15"
bench-ingest-quality: $(STAMP)
	$(BIN)/python -m tests.benchmarks.ingest_quality $(ARGS)

bench-retrieval: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_retrieval $(ARGS)

# Palimpsest's fused search beside mem0's (open source, its pgvector store, our embedder) at 10k cards.
bench-peers: $(STAMP)
	$(BIN)/python -m tests.benchmarks.peers.mem0_peer $(ARGS)

bench-latest-first: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_latest_first

bench-aging: $(STAMP)
	$(BIN)/python -m tests.benchmarks.aging

bench-conversations: $(STAMP)
	$(BIN)/python -m tests.benchmarks.conversations $(ARGS)

bench-faults: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_faults

bench-contention: $(STAMP)
	$(BIN)/python -m tests.benchmarks.bench_contention

soak: $(STAMP)
	$(BIN)/python -m tests.benchmarks.soak

typecheck: $(STAMP)
	$(BIN)/mypy domain services infra projections clients/python/palimpsest_client

clean:
	rm -rf $(VENV) .palimpsest .pytest_cache .ruff_cache .mypy_cache
