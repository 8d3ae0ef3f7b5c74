#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and benchmark haar.
# Idempotent: quick when everything is present. Needs root (or sudo) for apt-get.
set -euo pipefail

need_apt=()
dpkg -s libeccodes-dev >/dev/null 2>&1 || need_apt+=(libeccodes-dev)
dpkg -s libeccodes-tools >/dev/null 2>&1 || need_apt+=(libeccodes-tools)
dpkg -s fdb5 >/dev/null 2>&1 || need_apt+=(fdb5)
dpkg -s libfdb5-dev >/dev/null 2>&1 || need_apt+=(libfdb5-dev)
dpkg -s pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need_apt+=(fonts-dejavu-core)  # plot text (haar_mem::plot)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)  # the FDB5 store plugin (fdb5-plugin/, C++ against the fdb5lib wheel)
command -v gfortran >/dev/null 2>&1 || need_apt+=(gfortran)  # the Fortran module and its example
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v patchelf >/dev/null 2>&1 || need_apt+=(patchelf)  # make install: SONAME of the installed libhaar
command -v man >/dev/null 2>&1 || need_apt+=(man-db)  # install-test reads the installed man pages
command -v gdb >/dev/null 2>&1 || need_apt+=(gdb)  # install-test finds the split debug info with it
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)  # network-namespace cluster tests
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
# Staging under a real Slurm (issue 15): slurmctld/slurmd with burst_buffer/lua, and munge.
dpkg -s slurm-wlm >/dev/null 2>&1 || need_apt+=(slurm-wlm)
dpkg -s munge >/dev/null 2>&1 || need_apt+=(munge)
# haar mount (issue 16): fusermount3 to unmount (and to mount as a user); fio for bench/mount.sh.
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v fio >/dev/null 2>&1 || need_apt+=(fio)
# The virtual cluster (issue 25, scripts/vcluster.sh): GlusterFS serves its shared file system.
dpkg -s glusterfs-server >/dev/null 2>&1 || need_apt+=(glusterfs-server)
dpkg -s glusterfs-client >/dev/null 2>&1 || need_apt+=(glusterfs-client)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need_apt[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install Rust stable (>= 1.89) with rustup, then re-run" >&2
  exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true

# Python side of the tests: pymetkit (reference MARS request parser); cfgrib, xarray and
# earthkit-data read haar's retrieved GRIB in the end-to-end tests.
pip_install() {
  python3 -m pip install --quiet "$@" 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages "$@"
}
python3 -c 'import pymetkit' >/dev/null 2>&1 || { echo "setup: pip install pymetkit" >&2; pip_install pymetkit; }
python3 -c 'import cfgrib, xarray, earthkit.data' >/dev/null 2>&1 \
  || { echo "setup: pip install cfgrib xarray earthkit-data" >&2; pip_install cfgrib xarray earthkit-data; }
# haar.zarr (issue 29): the Zarr v3 view needs zarr 3 (its Store interface changed in 3.0).
python3 -c 'import sys, zarr; sys.exit(zarr.__version__.split(".")[0] != "3")' >/dev/null 2>&1 \
  || { echo "setup: pip install zarr>=3,<4" >&2; pip_install 'zarr>=3,<4'; }
# haar.zarr_http's tests read the view over HTTP as remote users do: zarr's FsspecStore, which
# reaches http:// URLs through fsspec's HTTP file system on aiohttp.
python3 -c 'import fsspec, aiohttp' >/dev/null 2>&1 \
  || { echo "setup: pip install fsspec aiohttp" >&2; pip_install fsspec aiohttp; }
# The faces of issue 12: FDB5 5.25's C API header and library (the peer of haar's libfdb5.so)
# and pyfdb come with PyPI's pyfdb wheel; maturin builds haar's Python package.
python3 -c 'import pyfdb, fdb5lib' >/dev/null 2>&1 \
  || { echo "setup: pip install pyfdb==5.25.0.33" >&2; pip_install pyfdb==5.25.0.33; }
# The peer of haar's extraction (issue 29, bench/extract_bench.py): gribjump on that FDB5.
python3 -c 'import gribjumplib, pygribjump' >/dev/null 2>&1 \
  || { echo "setup: pip install pygribjump gribjumplib 0.13.1.33" >&2; pip_install pygribjump==0.13.1.33 gribjumplib==0.13.1.33; }
python3 -c 'import maturin' >/dev/null 2>&1 || command -v maturin >/dev/null 2>&1 \
  || { echo "setup: pip install maturin" >&2; pip_install maturin; }
# The Python package's tests: pytest, and mypy for its type-stub check.
python3 -c 'import pytest, mypy' >/dev/null 2>&1 \
  || { echo "setup: pip install pytest mypy" >&2; pip_install pytest mypy; }
