# haar: one entry point for newcomers and CI. `make run` and `make test` are the README's two
# commands; everything else is a building block.
CARGO ?= cargo
HAAR  := $(or $(CARGO_TARGET_DIR),target)/release/haar
# Where `make install` and install-docs put things (DESTDIR for staged installs); the layout is
# in scripts/install.sh.
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
MANDIR ?= $(PREFIX)/share/man
INSTALL_VARS = PREFIX="$(PREFIX)" LIBDIR="$(LIBDIR)" MANDIR="$(MANDIR)" DESTDIR="$(DESTDIR)"

.PHONY: setup build peer run test lint unit crash fuzz bench install install-docs install-test uninstall clean c python pytest slurm-stage cluster-test fdb5-suites fdb5-plugin fdb5-plugin-test fdb5-engine-test

setup:
	@scripts/setup.sh

# The binaries, and the library `haar run --heap` preloads (next to the haar binary).
build: setup
	$(CARGO) build --release --workspace --bins
	$(CARGO) build --release -p haar-heap-preload

peer: setup
	@bench/build-peer.sh || echo "make: FDB5 peer not built; haar bench runs without it"

# haar's main job on an embedded default: the forecast workflow (producers + product
# generation) on a shared POSIX directory, on local haar servers it starts over temporary pmem
# pools, and on the real FDB5; prints the SC'19 Table 9-shaped comparison, then cleans up.
run: build
	$(HAAR) workflow --json target/workflow.json --plot target/workflow.png

lint:
	$(CARGO) fmt --all -- --check
	scripts/feature-check.sh
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

# The Python GRIB readers and FDB5 5.25's wheel are installed by setup, so their checks must
# run, not skip. The FDB5 5.10 variant of libfdb5.so (a cargo feature) is tested after the
# workspace, then the default library is built back.
unit:
	HAAR_REQUIRE_PYTHON_GRIB=1 HAAR_REQUIRE_FDB5_WHEEL=1 HAAR_REQUIRE_ROOT_TESTS=1 $(CARGO) test --workspace --release
	HAAR_REQUIRE_FDB5_WHEEL=1 $(CARGO) test --release -p haar-c --features fdb5-5_10 --test fdb_v5_10
	$(CARGO) build --release -p haar-c

# The C faces under target/c: lib/libhaar.{so,a} with include/haar.h (haar's own C ABI), and
# lib/libfdb5.so, the same library under FDB5's name, for programs written for FDB5's C API.
C_OUT := target/c
C_LIB := $(or $(CARGO_TARGET_DIR),target)/release
c: setup
	$(CARGO) build --release -p haar-c
	mkdir -p $(C_OUT)/lib $(C_OUT)/include
	cp $(C_LIB)/libhaar_c.so $(C_OUT)/lib/libhaar.so
	cp $(C_LIB)/libhaar_c.a $(C_OUT)/lib/libhaar.a
	cp $(C_LIB)/libhaar_c.so $(C_OUT)/lib/libfdb5.so
	cp crates/haar-c/include/haar.h fortran/haar.f90 $(C_OUT)/include/

fuzz:
	@if [ -x scripts/fuzz-smoke.sh ]; then scripts/fuzz-smoke.sh 20; fi

# The Python package: `pip install ./python` builds its abi3 wheel with maturin, in the
# workspace's target directory (so it reuses what cargo built before; see
# crates/haar-workspace-hack); pytest runs
# from outside python/ so that the installed package (with its compiled part) is imported,
# with the haar binary for the tests against a real server.
python: setup
	export CARGO_TARGET_DIR=$(abspath $(or $(CARGO_TARGET_DIR),target)); \
	python3 -m pip install --quiet ./python 2>/dev/null \
	  || python3 -m pip install --quiet --break-system-packages ./python

# pytest installs the package built with haar-py's `testing` feature (test-only entry points,
# such as the deliberate panic test_package.py checks never crosses into Python); `make python`
# installs it without, as shipped.
pytest: setup
	MATURIN_PEP517_ARGS="--features testing" $(MAKE) --no-print-directory python
	$(CARGO) build --release -p haar-cli
	cd /tmp && HAAR_BIN=$(abspath $(HAAR)) python3 -m pytest -q $(CURDIR)/python/tests

# haar under a real, private single-node Slurm (root: each script starts its own munged,
# slurmctld and slurmd on free ports): the servers and per-node mount launched through srun,
# then haar stage with burst_buffer/lua, submitting as an unprivileged user it creates.
slurm-stage: setup
	$(CARGO) build --release -p haar-cli
	scripts/slurm-selftest.sh $(HAAR)
	scripts/slurm-stage-test.sh $(HAAR)

# haar across nodes (issue 25): a 4-node virtual cluster from namespaces (scripts/vcluster.sh:
# GlusterFS at /shared, a real multi-node Slurm) running the multi-node suite; torn down also
# on failure (root).
cluster-test: setup
	$(CARGO) build --release -p haar-cli
	scripts/cluster-test.sh --haar $(HAAR)

# pyfdb 0.1.3's own test suite (fetched from PyPI at test time) on FDB5 5.25's libfdb5.so and
# on haar's, printing both counts.
fdb5-suites: c
	scripts/pyfdb-suite.sh $(abspath $(C_OUT))/lib

# haar as an FDB5 store: target/release/fdb5-plugin/lib/libhaar-fdb5.so (with libhaar.so beside
# it) and its eckit plugin manifest, loaded by FDB5 5.25 (the fdb5lib wheel) itself;
# scripts/fdb5-plugin-env.sh prints the settings. The test runs FDB5's tools and pyfdb on
# FDB5's TOC backend and through the plugin, and compares.
fdb5-plugin: setup
	$(CARGO) build --release -p haar-c -p haar-cli
	$(MAKE) -C fdb5-plugin

fdb5-plugin-test: fdb5-plugin
	HAAR_REQUIRE_FDB5_WHEEL=1 fdb5-plugin/test.sh

# The haar engine (engine: haar, same libhaar-fdb5.so): FDB5's tools, pyfdb and earthkit-data
# list and read what haar's own faces archived, the same as TOC shows for the same GRIB; posix
# and pmem (docs/design.md §17, "A haar engine").
fdb5-engine-test: fdb5-plugin
	HAAR_REQUIRE_FDB5_WHEEL=1 fdb5-plugin/engine-test.sh
	HAAR_REQUIRE_FDB5_WHEEL=1 HAAR_ENGINE_BACKEND=pmem fdb5-plugin/engine-test.sh

test: setup lint unit pytest fuzz slurm-stage cluster-test fdb5-suites fdb5-plugin-test fdb5-engine-test install-test

# The full benchmark, writing docs/benchmarks.md.
bench: build peer
	$(HAAR) bench --json bench/results/benchmarks.json --markdown docs/benchmarks.md

# haar as a library and a tool: bin/haar, lib/libhaar.{so,a} (SONAME libhaar.so.0.1) with
# haar.pc, lib/haar/libfdb5.so with haar-libfdb5.pc, include/haar.{h,f90}, man pages,
# completions, and the FDB5 store plugin with its manifest if `make fdb5-plugin` built it; no
# RPATH, DWARF split into lib/debug. `make fdb5-plugin install` to include the plugin.
install: build
	$(CARGO) build --release -p haar-c
	$(INSTALL_VARS) scripts/install.sh

# Man pages (haar.1 and haar-SUBCOMMAND.1) and bash/zsh/fish completions only, generated by the
# built binary from the same clap definitions that parse its command line, so they never drift.
install-docs: build
	$(INSTALL_VARS) scripts/install.sh --docs-only

# Removes what `make install` (or install-docs) installed under the same PREFIX/DESTDIR, as
# listed in PREFIX/share/haar/install-manifest, and the directories left empty below PREFIX,
# LIBDIR and MANDIR.
uninstall:
	$(INSTALL_VARS) scripts/install.sh --uninstall

# `make install` into a temporary tree, used as its users would (pkg-config, C, Fortran, man,
# FDB5 through the plugin); from what the targets before it built, so it takes seconds (the
# cargo lines are those of fdb5-plugin and build: no-ops after them).
install-test: setup
	$(CARGO) build --release -p haar-c -p haar-cli
	$(CARGO) build --release -p haar-heap-preload
	scripts/install-test.sh

clean:
	$(CARGO) clean
