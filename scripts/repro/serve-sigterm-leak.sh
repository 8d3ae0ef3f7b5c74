#!/bin/bash
# Reproduces an open defect (docs/reliability.md, "a pmem server stopped by SIGTERM leaks its
# chunk"): ROUNDS times, `haar serve` on a pmem root in a 3 GiB tmpfs takes 60 fields, the
# previous round's database is wiped, then the server gets SIGTERM; prints `haar info` after
# each round. Heap use grows by 16 MiB a round while live bytes stay constant.
#
#   scripts/repro/serve-sigterm-leak.sh HAAR_BINARY [ROUNDS]   (root: mounts a tmpfs)
set -u
H=${1:?usage: $0 HAAR_BINARY [ROUNDS]}
ROUNDS=${2:-30}
W=$(mktemp -d /tmp/serve-leak.XXXXXX)
D=$W/mnt
mkdir -p "$D" && mount -t tmpfs -o size=3g tmpfs "$D" || exit 1
trap 'umount "$D"; rm -rf "$W"' EXIT
head -c 32 /dev/urandom | base64 > "$W/token"
c() { "$H" --servers 127.0.0.1:7391 --token-file "$W/token" "$@"; }
for run in $(seq 1 "$ROUNDS"); do
    "$H" serve --root "$D/store" --backend pmem --listen 127.0.0.1:7391 --token-file "$W/token" >"$W/serve.log" 2>&1 &
    sp=$!
    for _ in $(seq 1 50); do c info >/dev/null 2>&1 && break; sleep 0.1; done
    ev=$(printf %04d "$run"); pev=$(printf %04d $((run - 1)))
    [ "$run" -gt 1 ] && c wipe --doit "class=od,expver=$pev,stream=oper,date=20270101,time=0000,domain=g" >/dev/null
    for s in $(seq 0 59); do
        key=class=od,expver=$ev,stream=oper,time=0,domain=g,type=fc,levtype=sfc,date=20270101,step=$s,param=167
        yes "$key" | head -c $(( (s % 7 + 1) * 9000 )) > "$W/field"
        c archive --key "$key" "$W/field" >/dev/null || { echo "archive failed: round $run step $s"; break; }
    done
    kill -TERM "$sp"; wait "$sp"
    echo "round $run: $("$H" --root "$D/store" --backend pmem info 2>&1 | grep -E 'heap_used_bytes|pool heap' | tr -s ' \n' ' ')"
done
