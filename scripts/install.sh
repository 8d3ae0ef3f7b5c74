#!/usr/bin/env bash
# Installs haar from artifacts already built in the cargo target directory (`make install`
# builds them first, then runs this): the `haar` binary, libhaar (shared and static) with
# haar.h, pkg-config files, the Fortran module's source, haar's libfdb5 (FDB5's C API), the
# heap preload library, man pages, shell completions, and the FDB5 store plugin with its eckit
# manifest when `make fdb5-plugin` has built it.
#
#   scripts/install.sh [--prefix DIR] [--destdir DIR] [--docs-only | --uninstall]
#
# PREFIX, DESTDIR, LIBDIR and MANDIR may also come from the environment (as `make install`
# passes them). DESTDIR stages the tree for a package: files land under $DESTDIR$PREFIX and
# every path written into them (pkg-config files) names $PREFIX only. Every file and link it
# installs is listed in share/haar/install-manifest; --uninstall (`make uninstall`) removes
# exactly those, then the directories left empty below PREFIX, LIBDIR and MANDIR (which stay),
# and nothing else.
#
# Layout (no RPATH anywhere but the plugin's $ORIGIN, so a program finds libhaar through the
# loader's own search: ldconfig or LD_LIBRARY_PATH):
#   bin/haar
#   lib/libhaar.so.V.P.Q, libhaar.so.V.P -> it (SONAME), libhaar.so -> it (for -lhaar), libhaar.a
#   lib/pkgconfig/haar.pc, lib/pkgconfig/haar-libfdb5.pc
#   lib/haar/libfdb5.so               FDB5's C API by haar: in its own directory, so that
#                                     installing haar never shadows a real FDB5's libfdb5 for
#                                     programs that did not ask for it (as Debian keeps BLAS
#                                     alternatives in subdirectories)
#   lib/haar/libhaar_heap_preload.so  `haar run --heap` finds it there (crates/haar-heap)
#   lib/libhaar-fdb5.so, share/plugins/haar-fdb5.yml   the FDB5 store plugin, if built
#   lib/debug/PREFIX/...*.debug and lib/debug/.build-id/xx/*.debug   split debug info
#   include/haar.h, include/haar.f90
#   share/man/man1/haar*.1, bash/zsh/fish completions
#
# Debug info: the release profile keeps line tables (backtraces name file:line), which made
# up most of each artifact. Installed executables and shared libraries keep their symbol table
# and lose their DWARF, which goes to a .debug file beside a .gnu_debuglink naming it; gdb
# finds it by build id or by path with `set debug-file-directory PREFIX/lib/debug` (nothing to
# set when PREFIX is /usr). The static library is stripped of DWARF only.
set -euo pipefail

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

prefix=${PREFIX:-/usr/local}
destdir=${DESTDIR:-}
what=all
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#*=}; shift ;;
        --destdir) destdir=$2; shift 2 ;;
        --destdir=*) destdir=${1#*=}; shift ;;
        --docs-only) what=docs; shift ;;
        --uninstall) what=uninstall; shift ;;
        -h|--help) usage 0 ;;
        *) echo "install.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
    esac
done
case $prefix in
    /*) ;;
    *) echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
prefix=${prefix%/}
libdir=${LIBDIR:-$prefix/lib}
mandir=${MANDIR:-$prefix/share/man}
bindir=$prefix/bin
includedir=$prefix/include
datadir=$prefix/share
D=$destdir

# The list of what is installed, each path as installed (without DESTDIR), one per line.
manifest=$datadir/haar/install-manifest
installed=()
note() { installed+=("$@"); }
write_manifest() {
    install -d "$D$datadir/haar"
    { [ -f "$D$manifest" ] && cat "$D$manifest"; printf '%s\n' "${installed[@]}" "$manifest"; } |
        sort -u >"$D$manifest.install-tmp"
    mv -f "$D$manifest.install-tmp" "$D$manifest"
}

if [ "$what" = uninstall ]; then
    if [ ! -f "$D$manifest" ]; then
        echo "install.sh: no haar installed under $D$prefix ($D$manifest is missing): nothing removed" >&2
        exit 1
    fi
    n=0
    dirs=()
    while IFS= read -r path; do
        case $path in "$prefix"/* | "$libdir"/* | "$mandir"/*) ;; *)
            echo "install.sh: $D$manifest names $path, outside $prefix, $libdir and $mandir: left alone" >&2
            continue ;;
        esac
        if [ -e "$D$path" ] || [ -L "$D$path" ]; then
            rm -f -- "$D$path"
            n=$((n + 1))
        fi
        dirs+=("$(dirname "$path")")
    done <"$D$manifest"
    # Directories emptied by the removal, deepest first, up to (not including) the prefix.
    while IFS= read -r dir; do
        while [ "$dir" != "$prefix" ] && [ "$dir" != "$libdir" ] && [ "$dir" != "$mandir" ] &&
            [ "$dir" != / ] && rmdir -- "$D$dir" 2>/dev/null; do
            dir=$(dirname "$dir")
        done
    done < <(printf '%s\n' "${dirs[@]}" | sort -ru)
    echo "removed $n files and links of haar from $D$prefix"
    exit 0
fi

here=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$here/target}
case $target in /*) ;; *) target=$here/$target ;; esac
rel=$target/release
haar=$rel/haar

missing=()
for f in "$haar" "$rel/libhaar_c.so" "$rel/libhaar_c.a" "$rel/libhaar_heap_preload.so"; do
    [ -f "$f" ] || missing+=("$f")
done
if [ "$what" = docs ]; then missing=(); [ -x "$haar" ] || missing=("$haar"); fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "install.sh: not built: ${missing[*]}" >&2
    echo "install.sh: run \`make install\` (it builds them), or \`make build\` and \`cargo build --release -p haar-c\`" >&2
    exit 1
fi

version=$("$haar" --version | awk '{print $2}')
# The SONAME changes exactly when Cargo's semver says the API may break: 0.1.x -> .so.0.1,
# 1.x.y -> .so.1.
case $version in
    0.*) abi=$(echo "$version" | cut -d. -f1,2) ;;
    *) abi=${version%%.*} ;;
esac

size() { stat -c %s "$1"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
report=()

# install_elf SRC DIR NAME MODE [patchelf args...]: SRC as DIR/NAME, its DWARF split off into
# lib/debug. Written under a temporary name and renamed into place, so a running haar or a
# process with the library mapped is never handed a half-written file.
install_elf() {
    local src=$1 dir=$2 name=$3 mode=$4
    shift 4
    local dest=$D$dir/$name
    local dbgdir=$D$libdir/debug$dir
    local tmp=$dest.install-tmp
    install -d "$D$dir" "$dbgdir"
    install -m "$mode" "$src" "$tmp"
    if [ $# -gt 0 ]; then patchelf "$@" "$tmp"; fi
    objcopy --only-keep-debug "$tmp" "$dbgdir/$name.debug"
    chmod 644 "$dbgdir/$name.debug"
    objcopy --strip-debug --add-gnu-debuglink="$dbgdir/$name.debug" "$tmp"
    mv -f "$tmp" "$dest"
    note "$dir/$name" "$libdir/debug$dir/$name.debug"
    local id
    id=$(readelf -n "$dest" | awk '/Build ID/ { print $3 }')
    if [ -n "$id" ]; then
        install -d "$D$libdir/debug/.build-id/${id:0:2}"
        ln -sfn "../..$dir/$name.debug" "$D$libdir/debug/.build-id/${id:0:2}/${id:2}.debug"
        note "$libdir/debug/.build-id/${id:0:2}/${id:2}.debug"
    fi
    report+=("$dir/$name: $(mb "$(size "$src")") -> $(mb "$(size "$dest")") (+ $(mb "$(size "$dbgdir/$name.debug")") in lib/debug)")
}

install_docs() {
    # Generated whole in a scratch directory first: a failed step installs nothing half-written.
    local docs
    docs=$(mktemp -d "${TMPDIR:-/tmp}/haar-docs.XXXXXX")
    trap 'rm -rf "$docs"' RETURN
    mkdir -p "$docs/man1"
    "$haar" generate man "$docs/man1"
    "$haar" generate completions bash >"$docs/haar.bash"
    "$haar" generate completions zsh >"$docs/_haar"
    "$haar" generate completions fish >"$docs/haar.fish"
    install -d "$D$mandir/man1" "$D$datadir/bash-completion/completions" \
        "$D$datadir/zsh/site-functions" "$D$datadir/fish/vendor_completions.d"
    install -m 644 "$docs"/man1/*.1 "$D$mandir/man1/"
    install -m 644 "$docs/haar.bash" "$D$datadir/bash-completion/completions/haar"
    install -m 644 "$docs/_haar" "$D$datadir/zsh/site-functions/_haar"
    install -m 644 "$docs/haar.fish" "$D$datadir/fish/vendor_completions.d/haar.fish"
    local page
    for page in "$docs"/man1/*.1; do note "$mandir/man1/${page##*/}"; done
    note "$datadir/bash-completion/completions/haar" "$datadir/zsh/site-functions/_haar" \
        "$datadir/fish/vendor_completions.d/haar.fish"
}

install_docs
if [ "$what" = docs ]; then
    write_manifest
    echo "installed man pages and completions under $D$prefix"
    exit 0
fi

for tool in objcopy patchelf install; do
    command -v "$tool" >/dev/null || { echo "install.sh: $tool is needed (scripts/setup.sh installs it)" >&2; exit 1; }
done

lib=libhaar.so.$version
soname=libhaar.so.$abi
install_elf "$haar" "$bindir" haar 755
install_elf "$rel/libhaar_c.so" "$libdir" "$lib" 755 --set-soname "$soname"
ln -sfn "$lib" "$D$libdir/$soname"
ln -sfn "$soname" "$D$libdir/libhaar.so"
note "$libdir/$soname" "$libdir/libhaar.so"
# FDB5 5.25's own library is called libfdb5.so with that SONAME; programs built against it
# load this one unchanged.
install_elf "$rel/libhaar_c.so" "$libdir/haar" libfdb5.so 755 --set-soname libfdb5.so
install_elf "$rel/libhaar_heap_preload.so" "$libdir/haar" libhaar_heap_preload.so 755

before=$(size "$rel/libhaar_c.a")
install -m 644 "$rel/libhaar_c.a" "$D$libdir/libhaar.a.install-tmp"
strip --strip-debug --enable-deterministic-archives "$D$libdir/libhaar.a.install-tmp"
mv -f "$D$libdir/libhaar.a.install-tmp" "$D$libdir/libhaar.a"
note "$libdir/libhaar.a"
report+=("$libdir/libhaar.a: $(mb "$before") -> $(mb "$(size "$D$libdir/libhaar.a")") (DWARF stripped)")

install -d "$D$includedir" "$D$libdir/pkgconfig"
install -m 644 "$here/crates/haar-c/include/haar.h" "$here/fortran/haar.f90" "$D$includedir/"
note "$includedir/haar.h" "$includedir/haar.f90"

# Paths under the prefix are written through ${prefix}, so `pkg-config --define-prefix` can
# relocate the tree.
# shellcheck disable=SC2016 # pkg-config's own variable, written as is
pc_prefix='${prefix}'
pc_libdir=$libdir pc_includedir=$includedir
case $libdir in "$prefix"/*) pc_libdir=$pc_prefix${libdir#"$prefix"} ;; esac
case $includedir in "$prefix"/*) pc_includedir=$pc_prefix${includedir#"$prefix"} ;; esac

# Libs.private: what a static link of libhaar.a needs besides it (rustc's
# --print native-static-libs for the crate, plus ecCodes).
cat >"$D$libdir/pkgconfig/haar.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=$pc_libdir
includedir=$pc_includedir

Name: haar
Description: haar's C API (haar.h): a crash-safe field store for weather data, FDB5-compatible
URL: https://github.com/haar/haar
Version: $version
Libs: -L\${libdir} -lhaar
Libs.private: -leccodes -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
Cflags: -I\${includedir}
EOF
cat >"$D$libdir/pkgconfig/haar-libfdb5.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=$pc_libdir/haar

Name: haar-libfdb5
Description: FDB5 5.25's C API (FDB5's own fdb5/api/fdb_c.h) implemented by haar; run with LD_LIBRARY_PATH=\${libdir}
URL: https://github.com/haar/haar
Version: $version
Libs: -L\${libdir} -lfdb5
Cflags:
EOF
chmod 644 "$D$libdir/pkgconfig/haar.pc" "$D$libdir/pkgconfig/haar-libfdb5.pc"
note "$libdir/pkgconfig/haar.pc" "$libdir/pkgconfig/haar-libfdb5.pc"

plugin=$rel/fdb5-plugin
if [ -f "$plugin/lib/libhaar-fdb5.so" ]; then
    # Built against target's unversioned libhaar.so; here it needs the SONAME, found beside it
    # through its RUNPATH $ORIGIN (eckit dlopens the plugin by path from DYNAMIC_LIBRARY_PATH,
    # so LD_LIBRARY_PATH cannot be assumed).
    install_elf "$plugin/lib/libhaar-fdb5.so" "$libdir" libhaar-fdb5.so 755 \
        --replace-needed libhaar.so "$soname"
    install -d "$D$datadir/plugins"
    install -m 644 "$plugin/share/plugins/haar-fdb5.yml" "$D$datadir/plugins/"
    note "$datadir/plugins/haar-fdb5.yml"
else
    echo "install.sh: FDB5 store plugin not built (make fdb5-plugin): not installed" >&2
fi

write_manifest
echo "installed haar $version under $D$prefix; sizes (as built -> installed):"
printf '  %s\n' "${report[@]}"
