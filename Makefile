# The two commands: `make demo` and `make test`. Each sets up what it needs (Debian packages,
# Python packages, the build) and is quick when that is already done.
PYTHON ?= python3
JOBS ?= 2
BUILD := build/py
ASAN_BUILD := build/asan
APT_PACKAGES := build-essential libdnnl-dev zlib1g-dev libxxhash-dev libgtest-dev libgmock-dev libopenblas-openmp-dev nlohmann-json3-dev graphviz clang libfuzzer-14-dev libomp-14-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SOURCES := $(shell find src include python tools tests/cpp examples cmake -type f) CMakeLists.txt pyproject.toml
export CMAKE_BUILD_PARALLEL_LEVEL := $(JOBS)

.PHONY: demo test test-full setup build test-cpp test-python test-asan test-fuzz bench bench-micro clean

# The C++ builder demo (a ResNet block, a transformer layer), then real models through
# torch.compile(backend="kiln").
demo: build
	$(BUILD)/kiln_demo
	$(PYTHON) -m kiln.demo

test: test-cpp test-python test-asan test-fuzz

# make test, then every float32 OpInfo sample of every op Kiln claims through
# torch.compile(backend="kiln") against eager (tests/python/opinfo_sweep.py; make test runs a subset).
test-full: test
	$(PYTHON) tests/python/opinfo_sweep.py --json build/opinfo.json

setup: build/.system-deps build/.python-deps

build/.system-deps: Makefile
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@mkdir -p build && touch $@

build/.python-deps: requirements.txt
	$(PYTHON) -m pip install -q -r requirements.txt
	@mkdir -p build && touch $@

# The Python package and the C++ tests come from one CMake build folder (pyproject.toml).
build: setup build/.installed
build/.installed: $(SOURCES)
	$(PYTHON) -m pip install -q --no-build-isolation --no-deps .
	@touch $@

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# Test files run in JOBS processes (pytest-xdist): most of their time is dynamo's tracing, one
# core each (853 tests: 4.1 against 7.5 minutes serially on 2 cores).
test-python: build
	$(PYTHON) -m pytest -q -n $(JOBS) tests/python

# The C++ tests once more under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: setup
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DKILN_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS)

# The .kiln loader under libFuzzer with ASan+UBSan for FUZZ_SECONDS (docs/file-format.md): only
# the parsing code is rebuilt with clang, the rest is the build's libkiln.so. Seeds from
# tests/fuzz/corpus, new inputs kept in build/fuzz/corpus; a finding is saved as build/fuzz/crash-*
# and fails the target. (ODR check off: the instrumented copies of src/ir and src/model_file
# override the library's on purpose.)
FUZZ_BUILD := build/fuzz
FUZZ_SECONDS ?= 30
test-fuzz: build
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF \
	  -DKILN_FUZZ_LIBRARY=$(CURDIR)/$(BUILD)/libkiln.so >/dev/null
	cmake --build $(FUZZ_BUILD) --target kiln_fuzz_loader
	mkdir -p $(FUZZ_BUILD)/corpus
	ASAN_OPTIONS=detect_odr_violation=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(FUZZ_BUILD)/kiln_fuzz_loader -max_total_time=$(FUZZ_SECONDS) -timeout=20 \
	  -rss_limit_mb=4096 -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus tests/fuzz/corpus

# Kiln against eager and Inductor on the five models (docs/benchmarks.md); BENCH_FLAGS adds to or
# overrides the options, e.g. make bench BENCH_FLAGS="--threads 2,1 --backends eager,kiln".
bench: build
	$(PYTHON) -m kiln.bench --backends eager,inductor,kiln --batch 1 --threads 2 \
	  --json build/bench/results.json --markdown build/bench/results.md \
	  --plot build/bench/results.png $(BENCH_FLAGS)

# Kernels against the machine's FMA peak and memcpy bandwidth, per-call overhead
# (docs/benchmarks.md, micro-benchmarks); MICRO_FLAGS adds options, e.g. MICRO_FLAGS="--sections gemm".
bench-micro: build
	$(PYTHON) -m kiln.bench.micro --binary $(BUILD)/kiln_microbench --json build/bench/micro.json \
	  --markdown build/bench/micro.md $(MICRO_FLAGS)

clean:
	rm -rf build
