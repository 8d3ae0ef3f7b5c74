#!/usr/bin/env bash
# Regenerates the seed corpora of the haar fuzz targets in fuzz/corpus/<target>/ (gitignored).
#
#   fuzz/seed.sh            # from anywhere; uses stable cargo for the seed generator
#
# Text targets (request, schema, key) get seeds written here; binary targets (segment,
# grib_frame, wire) get seeds written by fuzz/seedgen with haar's real encoders, plus the ecCodes
# GRIB samples when installed. Existing corpus files (found by fuzzing) are kept.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
corpus="$here/corpus"
mkdir -p "$corpus"/{request,schema,key,segment,grib_frame,wire}

# --- request: MARS requests in CLI and file form.
r="$corpus/request"
printf '%s' 'retrieve,class=od,expver=1,date=-1,time=1200,step=0/to/12/by/6,levelist=500,param=130.128' >"$r/cli-range"
printf '%s' 'class=od,date=20261120/20261121,time=00/12,type=fc,levtype=sfc,param=2t/msl,step=0/to/24/by/3' >"$r/no-verb"
printf '%s' 'list,class=od,stream=enfo,number=1/to/50,date=all,param="167"' >"$r/list-all-quoted"
printf '%s' "retr,cl=od,exp=0001,stre=oper,da=-2/to/-1,ti=0000,ty=an,levty=ml,levelist=1/to/137/by/10,par=t,grid='1.0/1.0'" >"$r/abbrev"
cat >"$r/file" <<'REQ'
# two requests in a file
retrieve,
    class   = od,
    date    = 2026-11-20/to/2026-11-21,
    time    = 12:00,
    param   = 130/131/132,
    target  = "out.grib"
archive, class=rd, expver=abcd, source='a file.grib'
REQ
printf '%s' 'wipe,class=od,expver=1,stream=oper,date=20261121,time=0,domain=g' >"$r/wipe"
printf '%s' 'retrieve,step=0/to/240/by/1,number=1/to/50,param=all,levelist=1000/925/850/700/500' >"$r/large"

# --- key: k=v lists.
k="$corpus/key"
printf '%s' 'class=od,expver=1,stream=oper,date=20240229,time=12,domain=g,type=fc,levtype=pl,step=6,levelist=500.0,param=130' >"$k/field"
printf '%s' ' Class = od , levelist= , param=130.128 ,, a=b=c' >"$k/spaces"
printf '%s' 'class=od,class=rd' >"$k/duplicate"

# --- schema: the built-in and the system FDB5 schema, plus small rules.
s="$corpus/schema"
cp "$repo/crates/haar-core/schema/default.schema" "$s/default.schema"
grep -v '^[[:space:]]*#' "$repo/crates/haar-core/schema/default.schema" | grep -v '^[[:space:]]*$' >"$s/default-nocomments.schema" || true
if [[ -r /etc/fdb/schema ]]; then
    cp /etc/fdb/schema "$s/fdb5.schema"
fi
cat >"$s/small.schema" <<'SCH'
param: Param;
step: Step;
date: Date;
levelist: Double;
[ class, expver, stream=oper/dcda, date, time, domain?g
    [ type, levtype
        [ step, levelist?, param ]]
    [ type=cl, levtype
        [ date: ClimateMonth, step-, param ]]
]
SCH
printf '%s' '[a[b[c]]]' >"$s/tiny.schema"

# --- binary seeds: segments, db.key, toc, commit records, GRIB frames, wire frames.
cargo run --quiet --manifest-path "$here/Cargo.toml" -p haar-fuzz-seedgen -- "$corpus"
for f in /usr/share/eccodes/samples/GRIB1.tmpl /usr/share/eccodes/samples/GRIB2.tmpl; do
    if [[ -r $f ]]; then
        cp "$f" "$corpus/grib_frame/$(basename "$f")"
    fi
done
if [[ -r /usr/share/eccodes/samples/GRIB1.tmpl && -r /usr/share/eccodes/samples/GRIB2.tmpl ]]; then
    cat /usr/share/eccodes/samples/GRIB2.tmpl /usr/share/eccodes/samples/GRIB1.tmpl >"$corpus/grib_frame/samples-concat"
fi

for t in request schema key segment grib_frame wire; do
    printf 'seed: %-10s %3d files\n' "$t" "$(find "$corpus/$t" -type f | wc -l)"
done
