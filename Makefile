# haar: one entry point for newcomers and CI. `make run` and `make test` are the README's two
# commands; everything else is a building block.
CARGO ?= cargo
HAAR  := target/release/haar

.PHONY: setup build peer run test lint unit crash fuzz bench clean

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace --bins

peer: setup
	@bench/build-peer.sh || echo "make: FDB5 peer not built; haar bench runs without it"

# haar's main job on an embedded default: the forecast workflow (producers + product
# generation) on a shared POSIX directory, on local haar servers it starts over temporary pmem
# pools, and on the real FDB5; prints the SC'19 Table 9-shaped comparison, then cleans up.
run: build
	$(HAAR) workflow --json target/workflow.json --plot target/workflow.png

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The Python GRIB readers are installed by setup, so their checks must run, not skip.
unit:
	HAAR_REQUIRE_PYTHON_GRIB=1 $(CARGO) test --workspace --release

fuzz:
	@if [ -x scripts/fuzz-smoke.sh ]; then scripts/fuzz-smoke.sh 20; fi

test: setup lint unit fuzz

# The full benchmark, writing docs/benchmarks.md.
bench: build peer
	$(HAAR) bench --json docs/benchmarks.json --markdown docs/benchmarks.md

clean:
	$(CARGO) clean
