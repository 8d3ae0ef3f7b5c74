#!/bin/sh
# Prints the `export` lines that make FDB5 5.25 (the fdb5lib wheel's tools, pyfdb 5.25, any
# C++ client of the wheel's libfdb5.so) store its fields in the haar store a haar
# configuration names, through haar's FDB5 store plugin (`make fdb5-plugin` builds it):
#
#   eval "$(scripts/fdb5-plugin-env.sh cfg.yaml)"
#   fdb-write x.grib                       # the wheel's tool: FDB5 TOC catalogue, haar bytes
#   haar --config cfg.yaml list class=rd   # the same fields, seen by haar
#
# It writes, beside the haar configuration in `<cfg>.fdb5/` (or $HAAR_FDB5_DIR): FDB5's
# configuration (`store: haar`, `haarConfig: <cfg>`), the schema of the haar store (so FDB5
# and haar split keys alike), the root of FDB5's TOC catalogue and an empty dbnames file
# (FDB5 5.25 crashes on Debian's /etc/fdb/dbnames). Running it again rewrites them the same.
#
# HAAR_FDB5_ENGINE=haar selects the haar engine instead (`engine: haar`: FDB5's catalogue is
# haar's, so FDB5 also lists and reads what haar's own faces archived; docs/design.md §17,
# "A haar engine"); the default, toc, keeps FDB5's TOC catalogue.
set -eu

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 HAAR_CONFIG_FILE   (a haar YAML configuration that exists)" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
cfg=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir=${HAAR_FDB5_DIR:-$cfg.fdb5}
target=${CARGO_TARGET_DIR:-$here/target}
plugin=$target/release/fdb5-plugin
haar=${HAAR_BIN:-$target/release/haar}

if [ ! -f "$plugin/lib/libhaar-fdb5.so" ]; then
    echo "$0: $plugin/lib/libhaar-fdb5.so is missing: run \`make fdb5-plugin\` first" >&2
    exit 1
fi
if [ ! -x "$haar" ]; then
    haar=$(command -v haar || true)
    [ -n "$haar" ] || { echo "$0: no haar binary: run \`make\` or set HAAR_BIN" >&2; exit 1; }
fi

engine=${HAAR_FDB5_ENGINE:-toc}
case $engine in
    toc | haar) ;;
    *)
        echo "$0: HAAR_FDB5_ENGINE=$engine: toc or haar" >&2
        exit 2
        ;;
esac

mkdir -p "$dir/catalogue"
"$haar" --config "$cfg" schema --fdb5 >"$dir/schema.tmp"
mv "$dir/schema.tmp" "$dir/schema"
: >"$dir/empty-dbnames"
if [ "$engine" = haar ]; then
    cat >"$dir/config.yaml.tmp" <<EOF
---
type: local
engine: haar
store: haar
haarConfig: $cfg
schema: $dir/schema
EOF
    config_text="{type: local, engine: haar, store: haar, haarConfig: \"$cfg\", schema: \"$dir/schema\"}"
else
    cat >"$dir/config.yaml.tmp" <<EOF
---
type: local
engine: toc
store: haar
haarConfig: $cfg
schema: $dir/schema
spaces:
  - handler: Default
    roots:
      - path: $dir/catalogue
EOF
    config_text="{type: local, engine: toc, store: haar, haarConfig: \"$cfg\", schema: \"$dir/schema\", spaces: [{handler: Default, roots: [{path: \"$dir/catalogue\"}]}]}"
fi
mv "$dir/config.yaml.tmp" "$dir/config.yaml"

bin=$(python3 -c 'import fdb5lib,os;print(os.path.join(os.path.dirname(fdb5lib.__file__),"bin"))' 2>/dev/null || true)

echo "export PLUGINS_MANIFEST_PATH='$plugin/share/plugins'"
echo "export DYNAMIC_LIBRARY_PATH='$plugin/lib'"
echo "export LOAD_PLUGINS='int.haar.haar-fdb5'"
echo "export FDB5_CONFIG_FILE='$dir/config.yaml'"
# The same configuration as text: earthkit-data's `fdb` source insists on FDB5_CONFIG or FDB_HOME.
echo "export FDB5_CONFIG='$config_text'"
echo "export FDB_DBNAMES_FILE='$dir/empty-dbnames'"
echo "export HAAR_CONFIG='$cfg'"
if [ -n "$bin" ]; then
    echo "export PATH='$bin':\"\$PATH\""
fi
