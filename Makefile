# Front door. `make up` and `make test` are the README's quick start.
#   make          build the release tree (binaries in build/bin)
#   make up       install what is missing, build, start a one-node Lode
#   make down     stop what `make up` started
#   make test     install what is missing, build with ASan+UBSan, run the suite
#   make bench    build and run the engine benchmark
#   make bench-net build and run the data plane's table (bench/net/run.sh)
#   make bench-fs  build and run the POSIX layer's table (bench/fs/run.sh)
#   make eval     build and run the evaluation (bench/eval/run.sh): device
#                 ceilings, transport heatmaps, end to end; writes
#                 docs/evaluation.md, docs/eval/*.png and docs/eval/raw/*.json.
#                 Quick mode (10-15 min on 2 cores) unless MODE=full or
#                 FULL=1; EVAL_OUT=DIR writes elsewhere; SECTIONS="net report"
#                 runs only those parts (device, net, e2e, report)
MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc)
BUILD := build
ASAN := build/asan

.PHONY: all deps build up down test bench bench-net bench-fs eval clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

up: build
	@scripts/up.sh

down:
	@scripts/down.sh

test: deps build
	@CC=clang cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DLODE_SANITIZE=ON -DLODE_FUZZ=ON >/dev/null
	@cmake --build $(ASAN) -j $(JOBS)
	@cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp \
	ctest --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD)/bin/lode-engine-bench

bench-net: build
	@bench/net/run.sh $(BUILD)

bench-fs: build
	@bench/fs/run.sh $(BUILD)

eval: build
	@MODE=$(if $(FULL),full,$(or $(MODE),quick)) EVAL_COMMAND="make eval$(if $(FULL), FULL=1)$(if $(MODE), MODE=$(MODE))" \
		BUILD=$(CURDIR)/$(BUILD) bench/eval/run.sh $(SECTIONS)

clean:
	rm -rf $(BUILD)
