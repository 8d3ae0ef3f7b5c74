#!/bin/bash
# haar as an FDB5 store, checked with FDB5's own clients: the fdb5lib 5.25 wheel's tools
# (fdb-write, fdb-list, fdb-axes, fdb-read, fdb-hammer, fdb-lock, fdb-unlock, fdb-purge,
# fdb-wipe), pyfdb 5.25 and earthkit-data 1.3's fdb source run one scenario twice on the same
# GRIB, once on FDB5's own TOC backend and once through the haar plugin (`store: haar`, set up by
# scripts/fdb5-plugin-env.sh); every output must be the same
# on both, the bytes read back must be the bytes written, and haar's own CLI must see (list,
# retrieve) the fields FDB5 wrote and lose them when FDB5 wipes them.
#
#   fdb5-plugin/test.sh          (after `make fdb5-plugin`; `make fdb5-plugin-test` does both)
#
# Skipped with a message when the wheel is absent, unless HAAR_REQUIRE_FDB5_WHEEL=1.
set -u

here=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$here/target}
haar=${HAAR_BIN:-$target/release/haar}

if ! python3 -c 'import fdb5lib, pyfdb' 2>/dev/null; then
    if [ "${HAAR_REQUIRE_FDB5_WHEEL:-0}" = 1 ]; then
        echo "fdb5-plugin test: the fdb5lib/pyfdb 5.25 wheels are missing (pip install pyfdb==5.25.0.33)" >&2
        exit 1
    fi
    echo "fdb5-plugin test: SKIPPED, no fdb5lib/pyfdb 5.25 wheel (pip install pyfdb==5.25.0.33)"
    exit 0
fi
sample=/usr/share/eccodes/samples/sh_pl_grib1.tmpl
for need in grib_set "$sample" "$haar"; do
    if ! command -v "$need" >/dev/null 2>&1 && [ ! -e "$need" ]; then
        echo "fdb5-plugin test: $need is missing (scripts/setup.sh installs it; make builds haar)" >&2
        exit 1
    fi
done

work=$(mktemp -d /tmp/haar-fdb5-plugin.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
cd "$work" || exit 1

# The GRIB fields both tests check FDB5 against (fdb5-plugin/fields.sh: sets DB and FULL).
. "$here/fdb5-plugin/fields.sh"
make_fields "$sample" || exit 1
# fdb-hammer's template: one small GRIB2 field of an ensemble forecast (stream=enfo, type=pf),
# which fdb-hammer stamps into members x steps x levels x params fields.
python3 - <<'EOF' || exit 1
import eccodes, numpy as np
h = eccodes.codes_grib_new_from_samples("regular_ll_pl_grib2")
for k, v in (("Ni", 64), ("Nj", 64), ("iDirectionIncrement", 1000), ("jDirectionIncrement", 1000),
             ("bitsPerValue", 16)):
    eccodes.codes_set(h, k, v)
eccodes.codes_set_values(h, np.arange(64 * 64, dtype=float))
for k, v in (("centre", 98), ("setLocalDefinition", 1), ("localDefinitionNumber", 1),
             ("productDefinitionTemplateNumber", 1), ("class", "rd"), ("expver", "xxxx"),
             ("stream", "enfo"), ("type", "pf"), ("number", 1), ("dataDate", 20191110),
             ("dataTime", 0), ("level", 1), ("step", 0), ("paramId", 130)):
    eccodes.codes_set(h, k, v)
open("hammer.grib", "wb").write(eccodes.codes_get_message(h))
EOF
# The wheel's fdb-hammer 5.25 only starts with this LD_AUDIT shim (docs/benchmarks.md, "Why
# the wheel's `fdb-hammer` 5.25 crashes").
cc -O2 -shared -fPIC -o hammer-audit.so "$here/crates/haar-bench/src/table8/fdb-hammer-audit.c" || exit 1
HAMMER="--class=rd --expver=xxxx --nensembles=2 --nsteps=2 --nlevels=2 --nparams=2 --full-check"
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
        echo "FAILED [$backend] $name"
        sed 's/^/    /' "$work/check.out" | head -20
    fi
}
same() { cmp "$1" "$2"; }
has_lines() { [ "$(grep -c . "$1")" = "$2" ] || { echo "$1: $(grep -c . "$1") lines, expected $2"; cat "$1"; false; }; }

# The pyfdb 5.25 part: archive, list, axes, retrieve of each field compared with its bytes.
cat >pyfdb_check.py <<'EOF'
import sys, pyfdb
out = sys.argv[1]
sel = {"class": "rd", "expver": "xxxx", "stream": "oper", "date": "20191110", "time": "0000",
       "domain": "g", "type": "an", "levtype": "pl", "step": "0"}
with pyfdb.FDB() as fdb:
    fdb.archive(open("msgs/300-138.grib", "rb").read())  # a re-archive: masks the first copy
    fdb.flush()
    keys = sorted(str(el.key()) if hasattr(el, "key") else str(el).split(",TocFieldLocation")[0]
                  for el in fdb.list({**sel, "levelist": ["300", "400", "500"], "param": ["138", "155"]}))
    axes = fdb.axes({k: sel[k] for k in ("class", "expver", "stream", "date", "time", "domain")})
    bad = 0

    def check(got, want, what):
        global bad
        if got != want:
            bad += 1
            print(f"{what}: {len(got)} bytes differ from the {len(want)} archived")

    for l in ("300", "400", "500"):
        for p in ("138", "155"):
            dh = fdb.retrieve({**sel, "levelist": l, "param": p})
            with dh:
                got = dh.read()
            want = open(f"msgs/{l}-{p}.grib", "rb").read()
            check(got, want, f"levelist={l} param={p}")
    dh = fdb.retrieve({**sel, "levtype": "sfc", "param": "167"})
    with dh:
        check(dh.read(), open("msgs/sfc-167.grib", "rb").read(), "levtype=sfc param=167")
with open(out, "w") as f:
    f.write("\n".join(keys) + "\n")
    f.write(f"axes {sorted((k, sorted(v)) for k, v in dict(axes).items())}\n")
sys.exit(1 if bad else 0)
EOF

# pyfdb 5.25's administration calls: masked listing, control and status, purge, wipe. What
# each gives that does not name a path is written out and compared across backends.
cat >pyfdb_admin.py <<'EOF'
import sys, pyfdb
from pyfdb.pyfdb_type import ControlAction, ControlIdentifier
out, phase = sys.argv[1], sys.argv[2]
db = {"class": "rd", "expver": "xxxx", "stream": "oper", "date": "20191110", "time": "0000",
      "domain": "g"}
lines = []
with pyfdb.FDB() as fdb:
    def keys(masked):
        return sorted(str(el.combined_key()) for el in fdb.list(db, include_masked=masked))
    if phase == "control":
        lines.append(f"list {len(keys(False))} include_masked {len(keys(True))}")
        for el in fdb.control(db, ControlAction.DISABLE, [ControlIdentifier.ARCHIVE]):
            lines.append(f"control {el.key()} {sorted(str(i) for i in el.controlIdentifiers())}")
        for el in fdb.status(db):
            lines.append(f"status {el.key()} {sorted(str(i) for i in el.controlIdentifiers())}")
        try:
            fdb.archive(open("msgs/400-155.grib", "rb").read())
            fdb.flush()
            lines.append("archive into a database disabled for archiving: accepted")
        except Exception:
            lines.append("archive into a database disabled for archiving: refused")
        list(fdb.control(db, ControlAction.ENABLE, [ControlIdentifier.ARCHIVE]))
        fdb.archive(open("msgs/400-155.grib", "rb").read())
        fdb.flush()
        lines.append(f"after enable: include_masked {len(keys(True))}")
        # The report's lines name data files: TOC's own, which the plugin has none of (its
        # bytes are haar's, design §17), so only the report's effect is compared.
        print(f"purge dry run: {sum(1 for _ in fdb.purge(db, doit=False))} report lines")
        lines.append(f"after the dry run: include_masked {len(keys(True))}")
        ok = any(line.endswith("refused") for line in lines)
    else:
        lines.append(f"before wipe: {len(keys(False))} fields")
        lines.append(f"wipe: {sum(1 for _ in fdb.wipe(db, doit=True))} elements")
        lines.append(f"after wipe: {len(keys(False))} fields")
        ok = lines[-1] == "after wipe: 0 fields" and lines[0] != "before wipe: 0 fields"
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if ok else 1)
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

scenario() { # BACKEND: runs every step with FDB5's environment already set; outputs in $work/$1
    local out=$work/$1
    mkdir -p "$out"
    check "fdb-write of 7 fields" fdb-write all.grib
    check "fdb-list lists 7 fields" sh -c "fdb-list --porcelain $DB >'$out/list' && grep -c . '$out/list' | grep -qx 7"
    check "fdb-axes" sh -c "fdb-axes $DB | grep IndexAxis >'$out/axes'"
    check "fdb-read" sh -c "fdb-read all.req '$out/read.grib' >/dev/null && test -s '$out/read.grib'"
    check "fdb-read of a surface field" sh -c "fdb-read sfc.req '$out/sfc.grib' >/dev/null && cmp '$out/sfc.grib' msgs/sfc-167.grib"
    check "pyfdb 5.25 archive/list/axes/retrieve" python3 pyfdb_check.py "$out/pyfdb"
    # fdb-hammer with --full-check: a checksum of each field's key and data written into it,
    # recomputed on --read from the key asked and the bytes returned.
    check "fdb-hammer --full-check writes 16 fields" sh -c "LD_AUDIT='$work/hammer-audit.so' fdb-hammer $HAMMER hammer.grib >'$out/hammer-w.log' 2>&1 && grep -E '^(Fields|Bytes) written' '$out/hammer-w.log' >'$out/hammer' && grep -qx 'Fields written: 16' '$out/hammer'"
    check "fdb-hammer --read --full-check reads and verifies 16 fields" sh -c "LD_AUDIT='$work/hammer-audit.so' fdb-hammer --read $HAMMER hammer.grib >'$out/hammer-r.log' 2>&1 && grep -E '^(Fields|Bytes) read' '$out/hammer-r.log' >>'$out/hammer' && grep -qx 'Fields read: 16' '$out/hammer'"
    check "fdb-hammer --list lists 16 fields" sh -c "LD_AUDIT='$work/hammer-audit.so' fdb-hammer --list $HAMMER hammer.grib 2>&1 | grep -o 'Fields listed: .*' >>'$out/hammer' && grep -qx 'Fields listed: 16' '$out/hammer'"
    if [ "$earthkit" = 1 ]; then
        check "earthkit-data fdb source reads the 6 fields" python3 earthkit_check.py "$out/earthkit"
    else
        echo "earthkit-data not installed: its check skipped" >"$out/earthkit"
    fi
    check "fdb-list after a re-archive" sh -c "fdb-list --porcelain $DB >'$out/list2'"
    # FDB5's control (fdb-lock/fdb-unlock, pyfdb's control()) acts on FDB5's catalogue, which
    # is TOC under the plugin too: a database locked against archiving refuses fdb-write
    # before any byte reaches the store, and takes it again once unlocked.
    check "fdb-lock --archive" sh -c "fdb-lock --archive $DB >'$out/lock.log' 2>&1 && grep -q 'archive: LOCKED' '$out/lock.log'"
    check "fdb-write into a locked database fails" sh -c "! fdb-write msgs/300-155.grib >'$out/locked.log' 2>&1 && grep -q 'LOCKED against archiving' '$out/locked.log'"
    check "fdb-unlock --archive, then fdb-write" sh -c "fdb-unlock --archive $DB >/dev/null 2>&1 && fdb-write msgs/300-155.grib >/dev/null 2>&1"
    check "pyfdb 5.25 include_masked, control, status, purge dry run" python3 pyfdb_admin.py "$out/pyfdb-control" control
    check "fdb-purge --doit" sh -c "fdb-purge --doit $DB >'$out/purge.log' 2>&1"
    check "fdb-read after the purge" sh -c "fdb-read all.req '$out/read2.grib' >/dev/null"
    check "fdb-wipe --doit" sh -c "fdb-wipe --doit $DB >'$out/wipe.log' 2>&1"
    check "fdb-list after the wipe" sh -c "fdb-list --porcelain $DB 2>/dev/null | grep -c '{' >'$out/list3'; true"
    check "pyfdb 5.25 wipe" sh -c "fdb-write all.grib >/dev/null 2>&1 && python3 pyfdb_admin.py '$out/pyfdb-wipe' wipe"
}

# FDB5's own TOC backend.
backend=toc
mkdir -p toc-root
: >empty-dbnames
printf 'backend: posix\nroots: [%s/haar-root]\n' "$work" >haar.yaml
"$haar" --config haar.yaml schema --fdb5 >schema || exit 1
cat >toc.yaml <<EOF
---
type: local
engine: toc
schema: $work/schema
spaces: [{handler: Default, roots: [{path: $work/toc-root}]}]
EOF
(
    bin=$(python3 -c 'import fdb5lib,os;print(os.path.join(os.path.dirname(fdb5lib.__file__),"bin"))')
    export PATH=$bin:$PATH FDB5_CONFIG_FILE=$work/toc.yaml FDB_DBNAMES_FILE=$work/empty-dbnames
    FDB5_CONFIG=$(cat "$work/toc.yaml")
    export FDB5_CONFIG
    unset LOAD_PLUGINS HAAR_CONFIG
    scenario toc
    echo "$passed $failed" >"$work/toc.counts"
)
read -r toc_passed toc_failed <"$work/toc.counts"

# The same through the plugin, into a haar posix store.
backend=haar
passed=0
failed=0
env_lines=$("$here/scripts/fdb5-plugin-env.sh" haar.yaml) || exit 1
(
    eval "$env_lines"
    scenario haar
    echo "$passed $failed" >"$work/haar.counts"
)
read -r passed failed <"$work/haar.counts"

# The same scenario into a haar pmem pool (its own configuration and FDB5 catalogue).
backend=haar-pmem
printf 'backend: pmem\nroots: [%s/pmem-root]\n' "$work" >pmem.yaml
pmem_env=$("$here/scripts/fdb5-plugin-env.sh" pmem.yaml) || exit 1
(
    eval "$pmem_env"
    scenario haar-pmem
    echo "$passed $failed" >"$work/haar.counts"
)
read -r passed failed <"$work/haar.counts"
backend=haar

# haar's own CLI saw what FDB5 wrote through the plugin (the scenario wiped it at the end, so
# write again and look), and the bytes it retrieves are the ones written.
(
    eval "$env_lines"
    fdb-write all.grib
) >/dev/null 2>&1
check "haar list shows the 7 fields fdb-write archived" sh -c "'$haar' --config haar.yaml list $DB >haar.list && grep -c . haar.list | grep -qx 7"
check "haar retrieve of the surface field is the GRIB written" sh -c \
    "'$haar' --config haar.yaml retrieve ${FULL/levtype=pl,/levtype=sfc,},param=167 -o h-sfc.grib && cmp h-sfc.grib msgs/sfc-167.grib"
for l in 300 400 500; do
    for p in 138 155; do
        check "haar retrieve levelist=$l param=$p is the GRIB written" sh -c \
            "'$haar' --config haar.yaml retrieve $FULL,levelist=$l,param=$p -o h-$l-$p.grib && cmp h-$l-$p.grib msgs/$l-$p.grib"
    done
done
check "haar list shows the 16 fields fdb-hammer archived" sh -c "'$haar' --config haar.yaml list class=rd,expver=xxxx,stream=enfo >hammer.list && grep -c . hammer.list | grep -qx 16"
check "haar list after fdb-wipe is empty" sh -c \
    "(eval \"\$1\"; fdb-wipe --doit $DB) >/dev/null 2>&1; '$haar' --config haar.yaml list $DB >after-wipe 2>&1; ! grep -q 'class=rd' after-wipe" _ "$env_lines"

# Same results on both backends.
backend=toc-vs-haar
for f in list axes read.grib sfc.grib pyfdb hammer earthkit list2 pyfdb-control read2.grib list3 pyfdb-wipe; do
    check "$f: the same on TOC and through haar (posix)" same "toc/$f" "haar/$f"
    check "$f: the same on TOC and through haar (pmem)" same "toc/$f" "haar-pmem/$f"
done
# Each field once: the schema FDB5 is given (`haar schema --fdb5`) has no rule beside each
# field's own that FDB5 5.25 would also read it through.
check "fdb-read returns the 6 fields written, each once" sh -c "grib_count toc/read.grib | grep -qx 6"
check "fdb-read through haar returns the 6 fields written, each once" sh -c "grib_count haar/read.grib | grep -qx 6 && grib_count haar-pmem/read.grib | grep -qx 6"

echo "fdb5-plugin test: FDB5 TOC backend: $toc_passed passed, $toc_failed failed; haar plugin, posix and pmem, with the cross-checks: $passed passed, $failed failed"
[ "$toc_failed" = 0 ] && [ "$failed" = 0 ]
