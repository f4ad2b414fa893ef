# The two commands a new user types (see README): `make run` and `make test`.
# Others: `make soak` (the long runs), `make bench`, `make perf-figures`
# (the instruction counts), `make asan` (tests under ASan+UBSan), `make install`
# (PREFIX=/usr/local), `make deb` (docs/install.md), `make clean`.
JOBS  ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
DEB_BUILD ?= build-deb
PREFIX ?= /usr/local
# The project's own builds (and so CI) fail on any compiler warning;
# `make run WERROR=OFF` for a compiler newer than Debian 12's GCC 12.
WERROR ?= ON
# A new build tree uses Ninja (Debian's ninja-build, which scripts/install-deps
# installs): a clean build takes as long as with CMake's Makefiles, but it
# decides faster what a rebuild needs and prints one line per step. A tree
# already configured keeps its generator.
generator = $(if $(wildcard $(1)/CMakeCache.txt),,-G Ninja)

.PHONY: run test soak bench bench-build perf-figures asan asan-build deps configure build install deb clean

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) $(call generator,$(BUILD)) -DCMAKE_BUILD_TYPE=Release -DDTENSOR_WERROR=$(WERROR) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job needs only the library and the dtensor program, not the tests
# and benchmarks: a first `make run` builds half as much.
run: configure
	@cmake --build $(BUILD) -j $(JOBS) --target dtensor_cli
	$(BUILD)/bin/dtensor train

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The long runs `make test` leaves out (docs/testing.md, "Soaking"): MPI on 8
# processes, VerifyMode on 64 simulated ranks, more fault draws and CLI
# fuzzing, then every property test with 50,000 cases (about an hour and a
# half on 2 cores). SOAK_QUICK=1 skips the last (what CI runs).
soak: build
	cd $(BUILD) && ctest -C soak -L soak --output-on-failure -j $(JOBS) \
	  $(if $(SOAK_QUICK),-E soak.property_tests)

# The benchmarks and bench/instructions.sh's program, outside the default
# build. mpi_bench (built with MPI) runs on 4 processes.
bench-build: configure
	@cmake --build $(BUILD) -j $(JOBS) --target benchmarks

# The instruction counts (docs/testing.md, "The instruction-count gate"):
# counts every case of bench/instructions.cc under callgrind again and
# rewrites bench/instructions.baseline, which `make test` holds every commit
# to, and the table of docs/PERFORMANCE.md made from it. REASON says why the
# counts changed; it goes into the file, and belongs in the commit message.
perf-figures: configure
	@test -n "$(REASON)" || { echo 'make perf-figures REASON="why the counts changed"' >&2; exit 2; }
	@cmake --build $(BUILD) -j $(JOBS) --target instructions
	bench/instructions.sh --bin $(BUILD)/bin/instructions --update "$(REASON)"

MPIRUN ?= OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  mpirun --oversubscribe --allow-run-as-root -np 4
bench: bench-build
	@for b in $(BUILD)/bin/*_bench; do echo "== $$b"; \
	  case $$b in *mpi_bench) $(MPIRUN) $$b || exit 1;; \
	  *) $$b --benchmark_min_time=0.2 || exit 1;; esac; done

# Debug (asserts on) at -Og with line tables only: GCC's optimisation for
# debugging compiles no slower than -O0 -g and runs the sanitized tests
# ~1.7x faster (AutogradEngineTest.SquareOnRandomLayouts 20.9 s -> 12.2 s).
# `make asan-build` builds that tree without running its tests (.ci/run
# builds it beside the Release tests).
# Its library files compile one by one without the precompiled header
# (cmake/dtensorBuildSpeed.cmake): the check that each includes what it uses.
asan-build: deps
	@cmake -S . -B $(ASAN_BUILD) $(call generator,$(ASAN_BUILD)) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1" \
	  -DDTENSOR_SANITIZE=ON -DDTENSOR_BUILD_BENCH=OFF -DDTENSOR_WERROR=$(WERROR) \
	  -DDTENSOR_UNITY_BATCH=0 -DDTENSOR_PCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

asan: asan-build
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS)

# The headers, both libraries, the CMake package, dtensor.pc, the dtensor
# program and the Python package under $(PREFIX); only those are built (not
# the tests).
install: configure
	@cmake --build $(BUILD) -j $(JOBS) --target dtensor_installables
	cmake --install $(BUILD) --prefix $(PREFIX)

# A Debian package of the same files under /usr (multiarch libdir; the
# Python package in Debian's /usr/lib/python3/dist-packages), from its own
# Release build without tests: $(DEB_BUILD)/dtensor_<version>_<arch>.deb.
deb: deps
	@cmake -S . -B $(DEB_BUILD) $(call generator,$(DEB_BUILD)) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
	  -DDTENSOR_BUILD_TESTS=OFF -DDTENSOR_BUILD_BENCH=OFF \
	  -DDTENSOR_PYTHON_INSTALL_DIR=lib/python3/dist-packages >/dev/null
	@cmake --build $(DEB_BUILD) -j $(JOBS) --target dtensor_installables
	cd $(DEB_BUILD) && cpack -G DEB

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(DEB_BUILD)
