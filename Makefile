# Switchboard - the two commands of the README, and a few helpers.
#   make run    install what is missing, build, create the home on first run, run the gateway
#   make test   install what the tests need, build with ASan+UBSan and -Werror, run every test
#   make bench  build optimised and print the benchmark figures
#   make bench-openclaw  the same start-up, memory and pipeline figures beside OpenClaw
#   make soak   1,000,000 webhooks through the pipeline (fails on RSS growth >= 2%), then kill -9 runs
#   make fuzz   every libFuzzer harness for FUZZ_SECONDS each (CI smoke: FUZZ_SECONDS=10)
#   make tsan   the tests whose work crosses threads (store writer, thread pool) under ThreadSanitizer
#               (part of make test)

JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
RELEASE   := build/release
TESTBUILD := build/test
TSANBUILD := build/tsan
# The unit tests whose work crosses threads: the store's writer thread and
# the libuv thread pool (transcripts, tools, workspaces, run preparation).
TSAN_TESTS := test_store test_pairing test_outbox test_transcript test_tools test_turn \
              test_executor test_workspace
SWITCHBOARD_HOME ?= $(HOME)/.switchboard
export SWITCHBOARD_HOME

.PHONY: run build deps test test-deps check bench fuzz clean format bench-openclaw soak tsan

run: build
	@test -f "$(SWITCHBOARD_HOME)/switchboard.yaml" || $(RELEASE)/switchboard init
	exec $(RELEASE)/switchboard gateway

deps:
	@scripts/deps.sh run

build: deps
	@cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=Release -DSB_TESTS=OFF -DSB_CRASH_POINTS=OFF >/dev/null
	@cmake --build $(RELEASE) -j$(JOBS) --target switchboard

test-deps:
	@scripts/deps.sh test
	@cd tests/fakes && npm ci --no-audit --no-fund --loglevel=error

check:
	@scripts/check-source.sh

test: test-deps check
	cmake -S . -B $(TESTBUILD) -DCMAKE_BUILD_TYPE=Debug -DSB_SANITIZE=ON -DSB_WERROR=ON -DSB_CRASH_POINTS=ON
	cmake --build $(TESTBUILD) -j$(JOBS)
	scripts/check-source.sh $(TESTBUILD)
	cd $(TESTBUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure --no-tests=error -j$(JOBS)
	@$(MAKE) --no-print-directory tsan

tsan:
	@scripts/deps.sh test
	cmake -S . -B $(TSANBUILD) -DCMAKE_BUILD_TYPE=Debug -DSB_TSAN=ON -DSB_WERROR=ON >/dev/null
	cmake --build $(TSANBUILD) -j$(JOBS) --target $(TSAN_TESTS)
	@cd $(TSANBUILD) && for t in $(TSAN_TESTS); do \
		TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./$$t >$$t.log 2>&1 \
		  && echo "tsan: $$t ok" || { echo "tsan: $$t FAILED"; tail -60 $$t.log; exit 1; }; \
	done

bench: deps
	@cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DSB_TESTS=OFF -DSB_CRASH_POINTS=OFF >/dev/null
	@cmake --build build/bench -j$(JOBS)
	@tests/bench/run.sh build/bench

bench-openclaw: deps test-deps
	@cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DSB_TESTS=OFF -DSB_CRASH_POINTS=OFF >/dev/null
	@cmake --build build/bench -j$(JOBS)
	@tests/bench/openclaw.sh build/bench

soak: deps test-deps
	@cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DSB_TESTS=OFF -DSB_CRASH_POINTS=OFF >/dev/null
	@cmake --build build/bench -j$(JOBS) --target switchboard
	@cmake -S . -B $(TESTBUILD) -DCMAKE_BUILD_TYPE=Debug -DSB_SANITIZE=ON -DSB_WERROR=ON >/dev/null
	@cmake --build $(TESTBUILD) -j$(JOBS) --target test_crash_webhooks
	@tests/soak/run.sh build/bench $(TESTBUILD)

FUZZ_SECONDS ?= 60
fuzz: test-deps
	@CC=clang cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSB_FUZZ=ON -DSB_TESTS=OFF >/dev/null
	@cmake --build build/fuzz -j$(JOBS)
	@tests/fuzz/run.sh build/fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
