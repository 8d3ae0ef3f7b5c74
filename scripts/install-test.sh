#!/usr/bin/env bash
# Installs haar from the artifacts already built (scripts/install.sh, as `make install` does)
# into a temporary tree and uses it the way a user of the installed library would:
#   - staged with DESTDIR, then moved to the PREFIX it names (as a package manager unpacks):
#     no staging path may leak into an installed file;
#   - installed ELF files carry no DWARF, have a .gnu_debuglink whose file holds it, and no
#     RPATH/RUNPATH (the FDB5 plugin's $ORIGIN excepted); gdb finds libhaar's lines through
#     `set debug-file-directory PREFIX/lib/debug`; libhaar has its SONAME and links;
#   - a C program built with `pkg-config --cflags --libs haar` archives and retrieves a field
#     through the installed libhaar, found by LD_LIBRARY_PATH only; a Fortran program built on
#     the installed module source does the same; an FDB5 C-API call links through
#     `pkg-config haar-libfdb5`;
#   - `man -M PREFIX/share/man haar` and `MANPATH=... man haar-retrieve` format the pages;
#     the installed haar runs, and finds its heap preload library for `haar run --heap`.
#   - when `make fdb5-plugin` built the plugin: FDB5 5.25's fdb-write loads the installed one
#     through its manifest, and the installed haar lists the field it stored;
#   - `scripts/install.sh --uninstall` (`make uninstall`) removes every file and link it
#     installed and the directories left empty, and leaves a file it did not install.
# Takes seconds; `make test` runs it (target install-test).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/haar-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/opt/haar
stage=$tmp/stage
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}

"$here/scripts/install.sh" --prefix "$prefix" --destdir "$stage"
mkdir -p "$(dirname "$prefix")"
mv "$stage$prefix" "$prefix"
check "DESTDIR staged everything under PREFIX" test -z "$(find "$stage" -type f)"
check "no installed file names the DESTDIR" \
    test -z "$(grep -rlF "$stage" "$prefix" 2>/dev/null || true)"

# Debug info split off, no RPATH.
elfs=("$prefix/bin/haar" "$prefix/lib/libhaar.so.0."*.* "$prefix/lib/haar/libfdb5.so"
      "$prefix/lib/haar/libhaar_heap_preload.so")
plugin=$prefix/lib/libhaar-fdb5.so
[ -f "$plugin" ] && elfs+=("$plugin")
for f in "${elfs[@]}"; do
    name=${f#"$prefix"/}
    sections=$(readelf -SW "$f")
    check "$name: no DWARF" test -z "$(grep -F .debug_info <<<"$sections" || true)"
    link=$(objcopy --dump-section .gnu_debuglink=/dev/stdout "$f" 2>/dev/null | tr '\0' '\n' | head -n 1 || true)
    dbg=$prefix/lib/debug$(dirname "$f")/$link
    check "$name: .gnu_debuglink -> lib/debug/.../$link with DWARF" \
        grep -qF .debug_info <(readelf -SW "$dbg" 2>/dev/null)
    id=$(readelf -n "$f" | awk '/Build ID/ { print $3 }')
    check "$name: build-id link" test -f "$prefix/lib/debug/.build-id/${id:0:2}/${id:2}.debug"
    if [ "$f" != "$plugin" ]; then
        check "$name: no RPATH/RUNPATH" test -z "$(readelf -d "$f" | grep -E 'RPATH|RUNPATH' || true)"
    fi
done
# gdb finds the split DWARF as docs/install.md says: the file and line of haar_version.
where=$(gdb -batch -iex "set debug-file-directory $prefix/lib/debug" \
    -ex 'info line haar_version' "$prefix/lib/libhaar.so" 2>/dev/null || true)
check "gdb with debug-file-directory PREFIX/lib/debug: libhaar's lines" \
    grep -q 'of "crates/haar-c/src/' <<<"$where"
check "libhaar.a: no DWARF" test -z "$(readelf -SW "$prefix/lib/libhaar.a" | grep -F .debug_info || true)"
soname=$(readelf -d "$prefix/lib/libhaar.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
check "libhaar.so -> SONAME $soname, present" test -n "$soname" -a -e "$prefix/lib/$soname"

# A C program against the installed library, through pkg-config only.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cat >"$tmp/prog.c" <<'EOF'
#include <haar.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    char yaml[4096];
    snprintf(yaml, sizeof yaml, "backend: posix\nroots: [%s]\n", argv[1]);
    const char *key = "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,"
                      "type=fc,levtype=sfc,step=0,param=167";
    const char msg[] = "installed libhaar";
    haar_t *h;
    haar_reader_t *r;
    char buf[64];
    size_t n = 0;
    if (haar_open_yaml(yaml, &h) != HAAR_OK || haar_archive_str(h, key, msg, sizeof msg) != HAAR_OK ||
        haar_flush(h) != HAAR_OK || haar_retrieve(h, key, &r) != HAAR_OK ||
        haar_reader_read(r, buf, sizeof buf, &n) != HAAR_OK) {
        fprintf(stderr, "%s\n", haar_last_error());
        return 1;
    }
    haar_reader_free(r);
    haar_close(h);
    if (argc < 2 || n != sizeof msg || memcmp(buf, msg, n) != 0) return 1;
    printf("libhaar %s: %s\n", haar_version(), buf);
    return 0;
}
EOF
# shellcheck disable=SC2046 # pkg-config's output is a list of words
cc -Wall -Werror -o "$tmp/prog" "$tmp/prog.c" $(pkg-config --cflags --libs haar)
check "C program: no RPATH" test -z "$(readelf -d "$tmp/prog" | grep -E 'RPATH|RUNPATH' || true)"
check "C program: needs $soname" grep -qF "[$soname]" <(readelf -d "$tmp/prog")
check "C program runs on the installed libhaar" \
    env LD_LIBRARY_PATH="$prefix/lib" "$tmp/prog" "$tmp/store-c"
libs=$(pkg-config --static --libs haar)
# shellcheck disable=SC2046,SC2086
cc -o "$tmp/prog-static" "$tmp/prog.c" $(pkg-config --cflags haar) \
    "$(pkg-config --variable=libdir haar)/libhaar.a" ${libs/ -lhaar / }
check "C program linked with libhaar.a and Libs.private runs" "$tmp/prog-static" "$tmp/store-static"

# Fortran: the installed module source compiled with the program.
if command -v gfortran >/dev/null; then
    cat >"$tmp/prog.f90" <<'EOF'
program installed
  use haar
  implicit none
  print '(2a)', 'libhaar from Fortran: ', haar_version()
end program installed
EOF
    # shellcheck disable=SC2046
    (cd "$tmp" && gfortran -o prog-f "$(pkg-config --variable=includedir haar)/haar.f90" prog.f90 \
        $(pkg-config --libs haar))
    check "Fortran program runs on the installed libhaar" env LD_LIBRARY_PATH="$prefix/lib" "$tmp/prog-f"
else
    bad "gfortran missing (scripts/setup.sh installs it)"
fi

# FDB5's C API from haar's libfdb5 (FDB5's own header declares these two).
cat >"$tmp/fdb.c" <<'EOF'
#include <stdio.h>
int fdb_initialise(void);
int fdb_version(const char **version);
int main(void) {
    const char *v = 0;
    if (fdb_initialise() != 0 || fdb_version(&v) != 0) return 1;
    printf("haar's libfdb5: FDB5 API %s\n", v);
    return 0;
}
EOF
# shellcheck disable=SC2046
cc -o "$tmp/fdb" "$tmp/fdb.c" $(pkg-config --cflags --libs haar-libfdb5)
check "FDB5 C-API program runs on haar's libfdb5" \
    env LD_LIBRARY_PATH="$(pkg-config --variable=libdir haar-libfdb5)" "$tmp/fdb"

# Man pages, completions, the binary and its preload library.
export MANPAGER=cat MANWIDTH=80
check "man -M PREFIX/share/man haar" grep -q "crash-safe" <(man -M "$prefix/share/man" haar 2>/dev/null)
check "MANPATH=PREFIX/share/man man haar-retrieve" \
    grep -q "haar-retrieve" <(MANPATH=$prefix/share/man man haar-retrieve 2>/dev/null)
check "bash completion parses" bash -n "$prefix/share/bash-completion/completions/haar"
check "installed haar runs" grep -q "^haar " <("$prefix/bin/haar" --version)
check "haar run --heap finds lib/haar/libhaar_heap_preload.so" \
    env -u HAAR_HEAP_LIB "$prefix/bin/haar" run --heap "$tmp:64M" -- true
if [ -f "$plugin" ]; then
    check "FDB5 plugin finds libhaar beside it" \
        grep -qF "$soname => $prefix/lib/$soname" <(ldd "$plugin" 2>/dev/null)
    check "FDB5 plugin manifest" test -f "$prefix/share/plugins/haar-fdb5.yml"
    # FDB5 5.25's own fdb-write loads the installed plugin (no LD_LIBRARY_PATH) and the
    # installed haar lists the field it stored.
    printf 'backend: posix\nroots: [%s]\n' "$tmp/store-fdb5" >"$tmp/cfg.yaml"
    grib_set -s "class=rd,stream=oper,type=an,expver=xxxx,date=20191110,time=0000,step=0,paramId=130,levtype=pl,level=500" \
        /usr/share/eccodes/samples/sh_pl_grib1.tmpl "$tmp/x.grib"
    listed=$(
        eval "$(HAAR_BIN=$prefix/bin/haar "$here/scripts/fdb5-plugin-env.sh" "$tmp/cfg.yaml")"
        export PLUGINS_MANIFEST_PATH=$prefix/share/plugins DYNAMIC_LIBRARY_PATH=$prefix/lib
        unset LD_LIBRARY_PATH
        fdb-write "$tmp/x.grib" >/dev/null && "$prefix/bin/haar" --config "$tmp/cfg.yaml" list class=rd
    ) || true
    check "fdb-write through the installed plugin, listed by the installed haar" \
        grep -q "levelist=500,param=130" <<<"$listed"
fi

# Uninstall removes what was installed and nothing else.
echo "kept" >"$prefix/share/not-haar"
"$here/scripts/install.sh" --prefix "$prefix" --uninstall
check "uninstall removed every installed file and link" \
    test "$(find "$prefix" ! -type d | sort)" = "$prefix/share/not-haar"
check "uninstall left a file it did not install" grep -qx kept "$prefix/share/not-haar"
check "uninstall removed the directories it emptied below PREFIX, lib and share/man" \
    test "$(find "$prefix" -type d | sort | tr '\n' ' ')" = "$prefix $prefix/lib $prefix/share $prefix/share/man "
check "a second uninstall says nothing is installed" \
    bash -c '! "$1" --prefix "$2" --uninstall 2>/dev/null' _ "$here/scripts/install.sh" "$prefix"

echo "install-test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
