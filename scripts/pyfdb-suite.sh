#!/usr/bin/env bash
# pyfdb 0.1.3's own test suite (PyPI's cffi binding over FDB5's C API, `fdb_c.h`) run twice on
# this machine: once on FDB5 5.25's libfdb5.so (the `fdb5lib` wheel `scripts/setup.sh`
# installs) and once on haar's (`make c`'s target/c/lib/libfdb5.so), printing both counts.
# Exits non-zero unless every test passes on FDB5 and every test but the known ones below
# passes on haar.
#
# The suite is fetched at test time (`pip download --no-binary :all: pyfdb==0.1.3`); nothing of
# it is kept in this repository. Its sdist ships the tests but not what they read: the GRIB
# files are made here with ecCodes from its own sample (the fields pyfdb's tests name: vo,
# class=rd, levels 300 and 400, expver xxxx and xxxy), the schema is FDB5's default schema
# (Debian's fdb5 package's /etc/fdb/schema, which pyfdb's own copy equals; not haar's
# built-in, whose extra fallback rule makes FDB5 return a class=rd field twice), and the
# two fixtures
# (conftest.py's `setup_fdb_tmp_dir`, tests/util.py) are haar's equivalents, written below:
# a local TOC configuration over a fresh root per call, as pyfdb's own.
#
# Which library pyfdb loads is chosen the way its `findlibs` looks: the `fdb5lib` package first
# (FDB5 5.25), or, with that source and python's prefix disabled, `$FDB5_HOME/lib` (haar).
#
# No test is known to fail on haar: `known_haar_failures` below lists those that do, so that
# `make test` fails on any other failure and on a listed one passing. (test_archival_read, which
# asserts that a listed path contains "rd:xxxx:oper:20191110:0000:g/an:pl.", passes since haar's
# posix backend names its data files per index as FDB5 does, design §4.1.)
#
# Usage: scripts/pyfdb-suite.sh [HAAR_LIB_DIR]   (default target/c/lib)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
haar_lib=${1:-$here/target/c/lib}
work=${PYFDB_SUITE_DIR:-$here/target/pyfdb-suite}
sample=/usr/share/eccodes/samples/sh_pl_grib1.tmpl
schema=/etc/fdb/schema

[ -f "$haar_lib/libfdb5.so" ] || { echo "pyfdb-suite: $haar_lib/libfdb5.so missing: run make c" >&2; exit 1; }
[ -f "$schema" ] || { echo "pyfdb-suite: $schema missing: install Debian's fdb5 package" >&2; exit 1; }
[ -f "$sample" ] || { echo "pyfdb-suite: $sample missing: install libeccodes-data" >&2; exit 1; }
command -v grib_set >/dev/null || { echo "pyfdb-suite: grib_set missing: install libeccodes-tools" >&2; exit 1; }
python3 -c 'import fdb5lib, cffi, findlibs, eccodes, numpy, pytest, packaging' 2>/dev/null || {
    echo "pyfdb-suite: python3 lacks fdb5lib/cffi/findlibs/eccodes/numpy/pytest: run scripts/setup.sh" >&2
    exit 1
}

rm -rf "$work"
mkdir -p "$work/dl" "$work/haar/lib"
python3 -m pip download --quiet --no-deps --no-binary :all: pyfdb==0.1.3 -d "$work/dl"
tar xzf "$work/dl/pyfdb-0.1.3.tar.gz" -C "$work"
suite=$work/pyfdb-0.1.3
[ -d "$suite/tests/unit" ] && [ -d "$suite/tests/integration" ] || {
    echo "pyfdb-suite: the sdist has no tests/unit and tests/integration" >&2
    exit 1
}
cp "$haar_lib/libfdb5.so" "$work/haar/lib/libfdb5.so"

# The data the tests read.
data=$suite/tests/data
mkdir -p "$data"
cp "$schema" "$data/default_fdb_schema"
grib() { # NAME EXPVER LEVEL
    grib_set -s "class=rd,stream=oper,type=an,expver=$2,date=20191110,time=0000,step=0,paramId=138,levtype=pl,level=$3" \
        "$sample" "$data/$1.grib"
}
grib x138-300 xxxx 300
grib x138-400 xxxx 400
grib y138-400 xxxy 400

# The fixtures the tests import (haar's, not pyfdb's): the suite's root is found from this
# file instead of through git.
touch "$suite/tests/__init__.py"
cat >"$suite/tests/util.py" <<'EOF'
from pathlib import Path

import numpy as np
from eccodes import StreamReader


def find_git_root() -> Path:
    return Path(__file__).resolve().parent.parent


def get_test_data_root() -> Path:
    return find_git_root() / "tests" / "data"


def check_numpy_array_equal(a, b):
    return np.array_equal(a, b)


def check_grib_files_for_same_content(file1: Path, file2: Path):
    with file1.open("rb") as f1, file2.open("rb") as f2:
        return check_numpy_array_equal(next(StreamReader(f1)).data, next(StreamReader(f2)).data)
EOF
cat >"$suite/conftest.py" <<'EOF'
import pytest

import pyfdb
import tests.util as util


@pytest.fixture
def setup_fdb_tmp_dir(tmp_path_factory):
    """A function returning (root, FDB) on a new root each call: a local TOC configuration."""

    def make():
        root = tmp_path_factory.mktemp("root")
        config = dict(
            type="local",
            engine="toc",
            schema=str(util.get_test_data_root() / "default_fdb_schema"),
            spaces=[dict(handler="Default", roots=[{"path": str(root)}])],
        )
        return str(root), pyfdb.FDB(config)

    return make
EOF

known_haar_failures=""

# One run of the suite on the library the environment selects; prints pytest's summary and
# succeeds when the tests that failed are exactly KNOWN (space-separated node ids).
run() { # LABEL KNOWN ENV...
    local label=$1 known=$2
    shift 2
    local log=$work/$label.log
    (
        cd "$suite"
        env -u HAAR_CONFIG -u FDB5_CONFIG -u FDB5_CONFIG_FILE -u FDB_HOME -u FDB5_HOME \
            FDB_DBNAMES_FILE="$work/empty-dbnames" PYTHONPATH="$suite/src:$suite" "$@" \
            python3 -m pytest -q -rf -p no:cacheprovider -o addopts= tests \
            -W ignore::DeprecationWarning
    ) >"$log" 2>&1 || true
    summary=$(grep -E '^=* ?[0-9]+ (passed|failed)' "$log" | tail -1 | tr -d '=' | xargs)
    failed=$(grep -E '^FAILED ' "$log" | awk '{print $2}' | sort | xargs)
    loaded=$(cd "$suite" && env FDB_DBNAMES_FILE="$work/empty-dbnames" PYTHONPATH="$suite/src" "$@" \
        python3 -c 'from pyfdb.pyfdb import lib; print(lib.path, lib.version)' 2>/dev/null || echo '?')
    echo "pyfdb 0.1.3 suite on $label ($loaded): ${summary:-no result, see $log}${known:+ (known to fail: $known)}"
    if [ -z "$summary" ] || [ "$failed" != "$(echo "$known" | xargs -n1 | sort | xargs)" ]; then
        tail -60 "$log"
        echo "pyfdb-suite: on $label, failed [${failed}], expected [${known}]" >&2
        return 1
    fi
}
: >"$work/empty-dbnames"
status=0
run fdb5-5.25 "" || status=1
run haar "$known_haar_failures" \
    FINDLIBS_DISABLE_PACKAGE=yes FINDLIBS_DISABLE_PYTHON=yes FDB5_HOME="$work/haar" || status=1
exit $status
