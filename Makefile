# Switchboard - the two commands of the README, and a few helpers.
#   make run    install what is missing, build, create the home on first run, run the gateway
#   make test   install what the tests need, build with ASan+UBSan and -Werror, run every test
#   make bench  build optimised and print the benchmark figures
#   make bench-openclaw  the same start-up, memory and pipeline figures beside OpenClaw
#   make soak   1,000,000 webhooks through the pipeline (fails on RSS growth >= 2%), then kill -9 runs
#   make fuzz   every libFuzzer harness for FUZZ_SECONDS each (CI smoke: FUZZ_SECONDS=10)
#   make tsan   the tests whose work crosses threads (store writer, thread pool) under ThreadSanitizer
#               (part of make test)
#   make install    build, then install the binary, man page, bash completion and systemd unit
#                   under $(DESTDIR)$(PREFIX) (PREFIX=/usr/local by default); make uninstall

JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
RELEASE   := build/release
TESTBUILD := build/test
TSANBUILD := build/tsan
# The unit tests whose work crosses threads: the store's writer thread and
# the libuv thread pool (transcripts, tools, workspaces, run preparation).
TSAN_TESTS := test_store test_pairing test_outbox test_transcript test_tools test_turn \
              test_executor test_workspace test_xsync
SWITCHBOARD_HOME ?= $(HOME)/.switchboard
export SWITCHBOARD_HOME

.PHONY: run build deps test test-deps check bench fuzz clean format bench-openclaw soak tsan \
        install uninstall

# make install: where things go. DESTDIR is prepended to every path (for
# packaging); the unit's ExecStart names $(BINDIR) without it. BINARY=path
# installs that binary instead of building build/release/switchboard.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
INSTALL     ?= install
BINARY      ?=

run: build
	@test -f "$(SWITCHBOARD_HOME)/switchboard.yaml" || $(RELEASE)/switchboard init
	exec $(RELEASE)/switchboard gateway

deps:
	@scripts/deps.sh run

build: deps
	@cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=Release -DSB_TESTS=OFF -DSB_CRASH_POINTS=OFF >/dev/null
	@cmake --build $(RELEASE) -j$(JOBS) --target switchboard -- --no-print-directory

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

install: $(if $(BINARY),,build)
	$(INSTALL) -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(MANDIR)/man1" "$(DESTDIR)$(BASHCOMPDIR)" \
		"$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(SYSUSERSDIR)"
	$(INSTALL) -m 0755 "$(or $(BINARY),$(RELEASE)/switchboard)" "$(DESTDIR)$(BINDIR)/switchboard"
	$(INSTALL) -m 0644 docs/switchboard.1 "$(DESTDIR)$(MANDIR)/man1/switchboard.1"
	$(INSTALL) -m 0644 scripts/switchboard.bash-completion "$(DESTDIR)$(BASHCOMPDIR)/switchboard"
	sed 's|@BINDIR@|$(BINDIR)|g' packaging/switchboard.service.in >"$(DESTDIR)$(UNITDIR)/switchboard.service.tmp"
	$(INSTALL) -m 0644 "$(DESTDIR)$(UNITDIR)/switchboard.service.tmp" "$(DESTDIR)$(UNITDIR)/switchboard.service"
	rm -f "$(DESTDIR)$(UNITDIR)/switchboard.service.tmp"
	$(INSTALL) -m 0644 packaging/switchboard.sysusers "$(DESTDIR)$(SYSUSERSDIR)/switchboard.conf"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/switchboard" "$(DESTDIR)$(MANDIR)/man1/switchboard.1" \
		"$(DESTDIR)$(BASHCOMPDIR)/switchboard" "$(DESTDIR)$(UNITDIR)/switchboard.service" \
		"$(DESTDIR)$(SYSUSERSDIR)/switchboard.conf"

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
