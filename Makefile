# pheap: thin wrapper over CMake. Every target builds what it needs first.
#   make            build (Release with assertions off, -Werror)
#   make test       build, then run every test (ctest)
#   make demo       build, then run the demo on a heap file under /tmp
#   make install PREFIX=dir
#   make test-asan  ASan+UBSan build and test     make test-tsan  TSan build and test
#   make bench      benchmarks (never part of make test)   make torture  long soak runs
#   make fuzz       libFuzzer (clang, ASan+UBSan) on hostile heap files for FUZZ_TIME
#                   seconds (default 600) on FUZZ_JOBS jobs (2): docs/FUZZING.md

BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE   ?= cmake
GEN     := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CTEST_ARGS ?= --output-on-failure -j $(JOBS)

FUZZ_TIME ?= 600
FUZZ_JOBS ?= 2
FUZZ_BUILD ?= build-fuzz

.PHONY: all build test demo install test-asan test-tsan bench torture clean deps test-deps fuzz fuzz-deps

all: build

deps:
	@command -v $(CMAKE) >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 && \
	  command -v pkg-config >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && apt-get install -y cmake build-essential pkg-config; \
	  else \
	    echo "pheap needs cmake, a C compiler (cc) and pkg-config to build."; \
	    echo "Install them, e.g. on Debian or Ubuntu: sudo apt-get install cmake build-essential pkg-config"; \
	    exit 1; \
	  fi

# The C++ tests want the Boost headers (Boost.Container) and clang++ (the
# header is compiled by both compilers): installed when missing and we may;
# otherwise the tests that need them report themselves skipped.
test-deps:
	@missing=""; \
	  [ -f /usr/include/boost/container/map.hpp ] || missing="$$missing libboost-dev"; \
	  command -v clang++ >/dev/null 2>&1 || missing="$$missing clang"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      apt-get update && apt-get install -y $$missing; \
	    else \
	      echo "make test: missing$$missing (not root): the tests that need them are skipped"; \
	    fi; \
	  fi

build: | deps
	@test -f $(BUILD)/CMakeCache.txt || $(CMAKE) -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	$(CMAKE) --build $(BUILD) -j $(JOBS)

test: test-deps
	@# a build configured before Boost was installed looks for it again
	@! grep -q '^PHEAP_BOOST_DIR:PATH=.*NOTFOUND' $(BUILD)/CMakeCache.txt 2>/dev/null || $(CMAKE) $(BUILD) >/dev/null
	$(MAKE) build
	cd $(BUILD) && ctest $(CTEST_ARGS) -LE torture

demo: build
	sh examples/demo.sh $(BUILD)

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

test-asan: | deps
	@test -f build-asan/CMakeCache.txt || $(CMAKE) -S . -B build-asan $(GEN) -DCMAKE_BUILD_TYPE=Debug -DPHEAP_SANITIZE=address
	$(CMAKE) --build build-asan -j $(JOBS)
	cd build-asan && ctest $(CTEST_ARGS) -LE torture

test-tsan: | deps
	@test -f build-tsan/CMakeCache.txt || $(CMAKE) -S . -B build-tsan $(GEN) -DCMAKE_BUILD_TYPE=Debug -DPHEAP_SANITIZE=thread
	$(CMAKE) --build build-tsan -j $(JOBS)
	cd build-tsan && ctest $(CTEST_ARGS) -LE torture

torture: build
	rm -f $(BUILD)/crash-table.txt
	cd $(BUILD) && PHEAP_CRASH_TABLE=$(CURDIR)/$(BUILD)/crash-table.txt \
	  ctest --output-on-failure -j $(JOBS) -L torture; status=$$?; \
	  echo; echo "crash images per workload (PHEAP_CRASH=full)"; sort crash-table.txt; \
	  awk '{ n += $$7; v += $$13 } END { printf "%d crash images, %d violations\n", n, v }' crash-table.txt; \
	  exit $$status
	sh tests/torture/faults.sh $(CURDIR) $(CURDIR)/build-faults

bench: build
	sh bench/run.sh $(BUILD) $(if $(QUICK),--quick)

# clang with libFuzzer's runtime; installed like deps when missing.
fuzz-deps: | deps
	@printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' > /tmp/pheap-fuzz-probe.c; \
	if ! clang -fsanitize=fuzzer,address,undefined /tmp/pheap-fuzz-probe.c -o /tmp/pheap-fuzz-probe >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && apt-get install -y clang && \
	    { clang -fsanitize=fuzzer /tmp/pheap-fuzz-probe.c -o /tmp/pheap-fuzz-probe >/dev/null 2>&1 || \
	      apt-get install -y libclang-rt-$$(clang -dumpversion | cut -d. -f1)-dev; }; \
	  else \
	    echo "make fuzz needs clang with libFuzzer (Debian: sudo apt-get install clang)"; exit 1; \
	  fi; \
	fi; rm -f /tmp/pheap-fuzz-probe.c /tmp/pheap-fuzz-probe

fuzz: | fuzz-deps
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || CC=clang $(CMAKE) -S . -B $(FUZZ_BUILD) $(GEN) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHEAP_SANITIZE=address -DPHEAP_FUZZ=ON -DPHEAP_BUILD_BENCH=OFF
	$(CMAKE) --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_heap fuzz_replay
	sh tests/fuzz/run.sh $(CURDIR)/$(FUZZ_BUILD) $(FUZZ_TIME) $(FUZZ_JOBS)

clean:
	rm -rf $(BUILD) build-asan build-tsan build-faults $(FUZZ_BUILD)
