#!/usr/bin/env bash
# Build the FDB5 peer benchmarks (C API, Debian's libfdb5-dev 5.10.x).
#   OUT=target/fdb5_peer  VIS_OUT=target/fdb5_visibility  CC=gcc  bench/build-peer.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CC=${CC:-gcc}
OUT=${OUT:-target/fdb5_peer}
VIS_OUT=${VIS_OUT:-target/fdb5_visibility}

# Locate fdb_c.h: Debian ships it under the multiarch include dir.
HDR=""
if command -v dpkg >/dev/null 2>&1 && dpkg -s libfdb5-dev >/dev/null 2>&1; then
    HDR=$(dpkg -L libfdb5-dev | grep '/fdb5/api/fdb_c\.h$' | head -n1 || true)
fi
if [ -z "$HDR" ]; then
    for d in /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu /usr/include /usr/local/include; do
        if [ -f "$d/fdb5/api/fdb_c.h" ]; then HDR="$d/fdb5/api/fdb_c.h"; break; fi
    done
fi
if [ -z "$HDR" ]; then
    echo "build-peer.sh: FDB5 C API header fdb5/api/fdb_c.h not found." >&2
    echo "  Install it with: sudo apt-get install libfdb5-dev fdb5   (Debian 12+)" >&2
    exit 1
fi
INC=${HDR%/fdb5/api/fdb_c.h}
if [ ! -f /etc/fdb/schema ]; then
    echo "build-peer.sh: /etc/fdb/schema missing (the peers copy it); install the fdb5 package." >&2
    exit 1
fi

mkdir -p "$(dirname "$OUT")" "$(dirname "$VIS_OUT")"
CFLAGS="-O2 -std=c11 -Wall -Wextra -I$INC"
set -x
"$CC" $CFLAGS bench/fdb5_peer.c -lfdb5 -o "$OUT"
if [ -f bench/fdb5_visibility.c ]; then
    "$CC" $CFLAGS bench/fdb5_visibility.c -lfdb5 -o "$VIS_OUT"
fi
