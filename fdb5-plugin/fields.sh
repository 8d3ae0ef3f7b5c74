# Sourced by fdb5-plugin/test.sh and engine-test.sh: the GRIB both check FDB5 against, made
# with ecCodes in the current directory. Six fields (vo and d on three pressure levels) and one
# surface field, whose key has the optional levelist empty (levelist=), which requests to haar
# must leave out (found by bench/fdb5_plugin_bench.py); each is also kept alone in msgs/ for
# byte checks, and all.grib holds the seven. Sets DB (their database) and FULL (their index).
DB=class=rd,expver=xxxx,stream=oper,date=20191110,time=0000,domain=g
FULL=$DB,type=an,levtype=pl,step=0

make_fields() { # SAMPLE: the pressure-level GRIB sample to stamp
    mkdir msgs || return 1
    for p in 138 155; do
        for l in 300 400 500; do
            grib_set -s "class=rd,stream=oper,type=an,expver=xxxx,date=20191110,time=0000,step=0,paramId=$p,levtype=pl,level=$l" \
                "$1" "msgs/$l-$p.grib" || return 1
            cat "msgs/$l-$p.grib" >>all.grib
        done
    done
    grib_set -s "class=rd,stream=oper,type=an,expver=xxxx,date=20191110,time=0000,step=0,paramId=167,levtype=sfc" \
        /usr/share/eccodes/samples/sh_sfc_grib1.tmpl msgs/sfc-167.grib || return 1
    cat msgs/sfc-167.grib >>all.grib
}
