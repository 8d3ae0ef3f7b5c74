#!/bin/bash
# The haar engine (issue 26, the reverse direction): fields archived by haar's own faces are
# listed, given axes and read by FDB5's own clients configured with `engine: haar`,
# `store: haar` (docs/design.md §17, "A haar engine"). The GRIB is archived by `haar archive`
# only: FDB5 never sees it written. What FDB5 shows through the engine must be what FDB5's
# own TOC backend shows for the same GRIB written by `fdb-write` (listing, depth-1/2
# listings, axes, pyfdb 5.25 list/axes), the same keys as `haar list`, and the bytes read
# must be the bytes archived. The operations the engine refuses must fail, naming it. Fields
# that Python's haar.FDB and fdb-write through the Store plugin (engine: toc) add to the same
# haar store are read through the engine too. Then the
# writer: fdb-write through the engine into an empty haar store gives haar the keys `haar
# archive` gives, and FDB5 shows the same again.
#
#   fdb5-plugin/engine-test.sh     (after `make fdb5-plugin`; CARGO_TARGET_DIR as for it)
#   HAAR_ENGINE_BACKEND=pmem fdb5-plugin/engine-test.sh    (the haar stores' backend; posix)
#
# Skipped with a message when the wheel is absent, unless HAAR_REQUIRE_FDB5_WHEEL=1.
set -u
export LC_ALL=C  # sort and diff of listings byte by byte

here=$(cd "$(dirname "$0")/.." && pwd)
backend=${HAAR_ENGINE_BACKEND:-posix}
target=${CARGO_TARGET_DIR:-$here/target}
haar=${HAAR_BIN:-$target/release/haar}
plugin=$target/release/fdb5-plugin

if ! python3 -c 'import fdb5lib, pyfdb' 2>/dev/null; then
    if [ "${HAAR_REQUIRE_FDB5_WHEEL:-0}" = 1 ]; then
        echo "haar engine test: the fdb5lib/pyfdb 5.25 wheels are missing (pip install pyfdb==5.25.0.33)" >&2
        exit 1
    fi
    echo "haar engine test: SKIPPED, no fdb5lib/pyfdb 5.25 wheel (pip install pyfdb==5.25.0.33)"
    exit 0
fi
sample=/usr/share/eccodes/samples/sh_pl_grib1.tmpl
for need in grib_set grib_count "$sample" "$haar" "$plugin/lib/libhaar-fdb5.so"; do
    if ! command -v "$need" >/dev/null 2>&1 && [ ! -e "$need" ]; then
        echo "haar engine test: $need is missing (make fdb5-plugin builds the plugin; make builds haar)" >&2
        exit 1
    fi
done

work=$(mktemp -d /tmp/haar-fdb5-engine.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
cd "$work" || exit 1

# The GRIB fields both tests check FDB5 against (fdb5-plugin/fields.sh: sets DB and FULL).
. "$here/fdb5-plugin/fields.sh"
make_fields "$sample" || exit 1
# A field of a second database (another date), archived by haar only as well.
grib_set -s "class=rd,stream=oper,type=an,expver=xxxx,date=20191111,time=1200,step=0,paramId=130,levtype=pl,level=850" \
    "$sample" msgs/other-130.grib || exit 1
cat msgs/other-130.grib >>all.grib
printf 'retrieve,%s,levelist=300/400/500,param=138/155\n' "$FULL" >all.req
printf 'retrieve,%s,levtype=sfc,param=167\n' "${FULL/levtype=pl,/}" >sfc.req

passed=0
failed=0
check() { # NAME COMMAND...: one check, counted
    local name=$1
    shift
    if "$@" >"$work/check.out" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED $name"
        sed 's/^/    /' "$work/check.out" | head -20
    fi
}

bin=$(python3 -c 'import fdb5lib,os;print(os.path.join(os.path.dirname(fdb5lib.__file__),"bin"))')
export PATH=$bin:$PATH
: >empty-dbnames
export FDB_DBNAMES_FILE=$work/empty-dbnames

# The haar store, written by `haar archive` only.
printf 'backend: %s\nroots: [%s/haar-root]\n' "$backend" "$work" >haar.yaml
"$haar" --config haar.yaml schema --fdb5 >schema || exit 1
check "haar archive of 8 fields" "$haar" --config haar.yaml archive all.grib
"$haar" --config haar.yaml list class=rd | sort >haar.list

# FDB5's own TOC backend, written by fdb-write: what FDB5 shows for these fields.
mkdir -p toc-root
cat >toc.yaml <<EOF
---
type: local
engine: toc
schema: $work/schema
spaces: [{handler: Default, roots: [{path: $work/toc-root}]}]
EOF
cat >engine.yaml <<EOF
---
type: local
engine: haar
store: haar
haarConfig: $work/haar.yaml
schema: $work/schema
EOF

# pyfdb 5.25: list and axes (compared across backends), and each field retrieved byte for byte.
cat >pyfdb_check.py <<'EOF'
import sys, pyfdb
out = sys.argv[1]
sel = {"class": "rd", "expver": "xxxx", "stream": "oper", "date": "20191110", "time": "0000",
       "domain": "g", "type": "an", "levtype": "pl", "step": "0"}
bad = 0
with pyfdb.FDB() as fdb:
    # The key part of each element ({db}{index}{datum}), without the backend's location.
    keys = sorted("}".join(str(el).split("}")[:3]) + "}" for el in
                  fdb.list({**sel, "levelist": ["300", "400", "500"], "param": ["138", "155"]}))
    axes = fdb.axes({k: sel[k] for k in ("class", "expver", "stream", "date", "time", "domain")})
    for l in ("300", "400", "500"):
        for p in ("138", "155"):
            with fdb.retrieve({**sel, "levelist": l, "param": p}) as dh:
                got = dh.read()
            if got != open(f"msgs/{l}-{p}.grib", "rb").read():
                bad += 1
                print(f"levelist={l} param={p}: {len(got)} bytes differ from the archived")
    with fdb.retrieve({**sel, "levtype": "sfc", "param": "167"}) as dh:
        if dh.read() != open("msgs/sfc-167.grib", "rb").read():
            bad += 1
            print("levtype=sfc param=167 differs from the archived")
with open(out, "w") as f:
    f.write("\n".join(keys) + "\n")
    f.write(f"axes {sorted((k, sorted(v)) for k, v in dict(axes).items())}\n")
sys.exit(1 if bad else 0)
EOF

# earthkit-data 1.3's `fdb` source (over pyfdb 5.25), where it is installed.
cat >earthkit_check.py <<'EOF'
import sys
import earthkit.data as ekd
req = {"class": "rd", "expver": "xxxx", "stream": "oper", "date": "20191110", "time": "0000",
       "domain": "g", "type": "an", "levtype": "pl", "step": "0",
       "levelist": ["300", "400", "500"], "param": ["138", "155"]}
fl = ekd.from_source("fdb", req, stream=False).to_fieldlist()
got = sorted(set((f.metadata("param"), f.metadata("level")) for f in fl))
open(sys.argv[1], "w").write(f"{got}\n")
sys.exit(0 if len(got) == 6 else 1)
EOF
if python3 -c 'import earthkit.data' 2>/dev/null; then earthkit=1; else earthkit=0; fi

views() { # OUT: what FDB5 shows, with FDB5_CONFIG_FILE already set
    local out=$work/$1
    mkdir -p "$out"
    check "[$1] fdb-list" sh -c "fdb-list --porcelain class=rd,expver=xxxx >'$out/list' && grep -c . '$out/list' | grep -qx 8"
    check "[$1] fdb-list --depth 1" sh -c "fdb-list --porcelain --depth 1 class=rd,expver=xxxx >'$out/list1'"
    check "[$1] fdb-list --depth 2" sh -c "fdb-list --porcelain --depth 2 class=rd,expver=xxxx >'$out/list2'"
    check "[$1] fdb-list of one level" sh -c "fdb-list --porcelain $FULL,levelist=400 >'$out/list400' && grep -c . '$out/list400' | grep -qx 2"
    check "[$1] fdb-list param=vo (a name metkit expands)" sh -c "fdb-list --porcelain class=rd,expver=xxxx,param=vo >'$out/list-vo'"
    check "[$1] fdb-list of a date range" sh -c "fdb-list --porcelain class=rd,expver=xxxx,date=20191109/to/20191111 >'$out/list-range'"
    check "[$1] fdb-list of nothing" sh -c "fdb-list --porcelain class=rd,expver=yyyy >'$out/list-none' && ! grep -q '{' '$out/list-none'"
    check "[$1] fdb-axes" sh -c "fdb-axes $DB | grep IndexAxis >'$out/axes'"
    check "[$1] fdb-read of 6 fields" sh -c "fdb-read all.req '$out/read.grib' >/dev/null && grib_count '$out/read.grib' | grep -qx 6"
    check "[$1] fdb-read of a surface field is the GRIB archived" sh -c "fdb-read sfc.req '$out/sfc.grib' >/dev/null && cmp '$out/sfc.grib' msgs/sfc-167.grib"
    for l in 300 400 500; do
        for p in 138 155; do
            check "[$1] fdb-read levelist=$l param=$p is the GRIB archived" sh -c \
                "printf 'retrieve,$FULL,levelist=$l,param=$p\n' >'$out/one.req' && fdb-read '$out/one.req' '$out/$l-$p.grib' >/dev/null && cmp '$out/$l-$p.grib' msgs/$l-$p.grib"
        done
    done
    check "[$1] fdb-read of the other database's field" sh -c \
        "printf 'retrieve,class=rd,expver=xxxx,stream=oper,date=20191111,time=1200,domain=g,type=an,levtype=pl,step=0,levelist=850,param=130\n' >'$out/o.req' && fdb-read '$out/o.req' '$out/other.grib' >/dev/null && cmp '$out/other.grib' msgs/other-130.grib"
    check "[$1] fdb-read of a field that is not there gives nothing" sh -c \
        "printf 'retrieve,$FULL,levelist=925,param=138\n' >'$out/none.req' && fdb-read '$out/none.req' '$out/none.grib' >/dev/null 2>&1; [ ! -s '$out/none.grib' ]"
    check "[$1] pyfdb 5.25 list/axes/retrieve" python3 pyfdb_check.py "$out/pyfdb"
    if [ "$earthkit" = 1 ]; then  # it insists on FDB5_CONFIG (text) or FDB_HOME
        check "[$1] earthkit-data fdb source reads the 6 fields" sh -c \
            "FDB5_CONFIG=\"\$(cat \"\$FDB5_CONFIG_FILE\")\" python3 earthkit_check.py '$out/earthkit'"
    else
        echo "earthkit-data not installed: its check skipped" >"$out/earthkit"
    fi
}

(
    export FDB5_CONFIG_FILE=$work/toc.yaml
    unset LOAD_PLUGINS HAAR_CONFIG
    check "[toc] fdb-write of the 8 fields" fdb-write all.grib
    views toc
    echo "$passed $failed" >"$work/counts"
)
read -r passed failed <"$work/counts"

engine_env() { # HAAR_YAML FDB5_YAML: FDB5 with the haar engine on that haar store
    export PLUGINS_MANIFEST_PATH=$plugin/share/plugins DYNAMIC_LIBRARY_PATH=$plugin/lib
    export LOAD_PLUGINS=int.haar.haar-fdb5 FDB5_CONFIG_FILE=$work/$2 HAAR_CONFIG=$work/$1
}

(
    engine_env haar.yaml engine.yaml
    views engine
    # Refused, naming the engine, and changing nothing in haar.
    check "[engine] fdb-wipe is refused" sh -c "! fdb-wipe --doit $DB >'$work/wipe.log' 2>&1 && grep -q 'haar engine: wipe' '$work/wipe.log'"
    check "[engine] fdb-purge is refused" sh -c "! fdb-purge --doit $DB >'$work/purge.log' 2>&1 && grep -q 'haar engine: purge' '$work/purge.log'"
    check "[engine] fdb-lock is refused" sh -c "! fdb-lock --archive $DB >'$work/lock.log' 2>&1 && grep -q 'haar engine: control' '$work/lock.log'"
    check "[engine] haar still holds the 8 fields after the refused calls" sh -c \
        "'$haar' --config haar.yaml list class=rd | sort | diff - haar.list"
    echo "$passed $failed" >"$work/counts"
)
read -r passed failed <"$work/counts"

# scripts/fdb5-plugin-env.sh with HAAR_FDB5_ENGINE=haar sets FDB5 up the same way (its text
# FDB5_CONFIG too: earthkit-data's fdb source needs it).
check "fdb5-plugin-env.sh HAAR_FDB5_ENGINE=haar: fdb-list and pyfdb (FDB5_CONFIG) see the 8 fields" sh -c '
    eval "$(HAAR_FDB5_ENGINE=haar HAAR_FDB5_DIR="$1/env.fdb5" HAAR_BIN="$2" "$3/scripts/fdb5-plugin-env.sh" "$1/haar.yaml")" &&
    grep -q "engine: haar" "$FDB5_CONFIG_FILE" && fdb-list --porcelain class=rd,expver=xxxx | grep -c . | grep -qx 8 &&
    FDB5_CONFIG_FILE= python3 -c "import pyfdb; n = len(list(pyfdb.FDB().list({\"class\": \"rd\", \"expver\": \"xxxx\"}))); assert n == 8, n"' \
    _ "$work" "$haar" "$here"

# haar's other faces write into the same store after the views above: Python's haar.FDB, and
# FDB5 itself through the Store plugin with its TOC catalogue (engine: toc, store: haar). The
# engine sees both, bytes as written.
grib_set -s "class=rd,stream=oper,type=an,expver=xxxx,date=20191111,time=1200,step=0,paramId=130,levtype=pl,level=700" \
    "$sample" msgs/py-130.grib || exit 1
grib_set -s "class=rd,stream=oper,type=an,expver=xxxx,date=20191111,time=1200,step=0,paramId=131,levtype=pl,level=850" \
    "$sample" msgs/store-131.grib || exit 1
OTHER=class=rd,expver=xxxx,stream=oper,date=20191111,time=1200,domain=g,type=an,levtype=pl,step=0
if python3 -c 'import haar' 2>/dev/null; then
    check "Python haar.FDB archive of a field" python3 -c \
        "import haar; f = haar.FDB('$work/haar.yaml'); f.archive(open('msgs/py-130.grib', 'rb').read()); f.flush()"
    pyfaces=1
else
    echo "haar engine test: Python haar not installed: its face is not checked"
    pyfaces=0
fi
check "fdb-write through the Store plugin (engine: toc) into the same haar store" sh -c '
    eval "$(HAAR_FDB5_DIR="$1/store.fdb5" HAAR_BIN="$2" "$3/scripts/fdb5-plugin-env.sh" "$1/haar.yaml")" && fdb-write msgs/store-131.grib' \
    _ "$work" "$haar" "$here"
(
    engine_env haar.yaml engine.yaml
    if [ "$pyfaces" = 1 ]; then
        check "[engine] fdb-read of the field Python haar.FDB archived" sh -c \
            "printf 'retrieve,$OTHER,levelist=700,param=130\n' >py.req && fdb-read py.req py.grib >/dev/null && cmp py.grib msgs/py-130.grib"
    fi
    check "[engine] fdb-read of the field fdb-write archived through the Store plugin" sh -c \
        "printf 'retrieve,$OTHER,levelist=850,param=131\n' >st.req && fdb-read st.req st.grib >/dev/null && cmp st.grib msgs/store-131.grib"
    check "[engine] fdb-list shows every face's fields, as haar list does" sh -c \
        "fdb-list --porcelain class=rd,expver=xxxx | sed 's/}{/,/g; s/[{}]//g' | sort >faces.list && '$haar' --config haar.yaml list class=rd | sort | diff - faces.list && grep -c . faces.list | grep -qx \$((9 + $pyfaces))"
    echo "$passed $failed" >"$work/counts"
)
read -r passed failed <"$work/counts"

# The writer: fdb-write through the engine into a second haar store archives each field into
# haar once, under FDB5's key (not keyed again by haar): haar lists the keys `haar archive`
# gave, and FDB5 shows the same as above.
printf 'backend: %s\nroots: [%s/haar-root-w]\n' "$backend" "$work" >haar-w.yaml
sed "s|$work/haar.yaml|$work/haar-w.yaml|" engine.yaml >engine-w.yaml
(
    engine_env haar-w.yaml engine-w.yaml
    check "[engine-w] fdb-write of the 8 fields through the engine" fdb-write all.grib
    check "[engine-w] haar list gives the keys haar archive gave" sh -c \
        "'$haar' --config haar-w.yaml list class=rd | sort | diff - haar.list"
    views engine-w
    check "[engine-w] a re-archive through the engine is listed once" sh -c \
        "fdb-write msgs/300-138.grib && fdb-list --porcelain class=rd,expver=xxxx | grep -c . | grep -qx 8 && '$haar' --config haar-w.yaml list class=rd | sort | diff - haar.list"
    check "[engine-w] haar retrieve of the re-archived field is the GRIB written" sh -c \
        "'$haar' --config haar-w.yaml retrieve $FULL,levelist=300,param=138 -o h.grib && cmp h.grib msgs/300-138.grib"
    check "[engine-w] pyfdb 5.25 archive through the engine (a re-archive of the surface field)" python3 -c \
        "import pyfdb; f = pyfdb.FDB(); f.archive(open('msgs/sfc-167.grib', 'rb').read()); f.flush()"
    check "[engine-w] haar still lists each key once, and reads the surface field back" sh -c \
        "'$haar' --config haar-w.yaml list class=rd | sort | diff - haar.list && '$haar' --config haar-w.yaml retrieve ${FULL/levtype=pl,/levtype=sfc,},param=167 -o s.grib && cmp s.grib msgs/sfc-167.grib"
    echo "$passed $failed" >"$work/counts"
)
read -r passed failed <"$work/counts"

# FDB5 through the engine shows what FDB5 on TOC shows, and what haar lists.
# Listing order is each backend's own: TOC visits a database's indexes newest first, the
# engine in key order (haar's); so listings are compared as sets of lines, the rest as bytes.
for e in engine engine-w; do
    for f in list list1 list2 list400 list-vo list-range list-none; do
        check "$f: the same lines through the haar engine ($e) as on TOC" sh -c "sort toc/$f | diff - $e/$f"
        check "$f: through the haar engine ($e), in key order" sh -c "sort $e/$f | diff - $e/$f"
    done
    for f in axes read.grib pyfdb earthkit; do
        check "$f: the same through the haar engine ($e) as on TOC" cmp toc/$f $e/$f
    done
done
check "fdb-list through the engine gives haar list's keys" sh -c \
    "sed 's/}{/,/g; s/[{}]//g' engine/list | sort | diff - haar.list"

echo "haar engine test ($backend): $passed passed, $failed failed"
[ "$failed" = 0 ]
