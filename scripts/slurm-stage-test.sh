#!/usr/bin/env bash
# Runs haar's Slurm burst-buffer integration (slurm/burst_buffer.lua, `haar stage`) under a
# real, private, single-node Slurm (Debian slurm-wlm 22.05 + munge) started here as root
# without systemd, with BurstBufferType=burst_buffer/lua; everything lives under a temporary
# directory and is stopped at the end. Jobs are submitted by an unprivileged user (burst
# buffers refuse root), created with useradd if missing. Installs nothing; checks its tools.
#
# Checks:
#   1. a job with `#HAAR stage_in` of a file and `#HAAR stage_out` of its output: the job sees
#      the staged bytes, the output reaches the shared directory byte for byte, teardown
#      removes what was staged in;
#   2. a bad directive is rejected at sbatch with a message naming its line;
#   3. a stage-in of a missing source ends the job (CANCELLED, never run) with the reason
#      naming the source in `scontrol show job`, and cancels the job depending on it;
#   4. `#HAAR persist store` keeps node-local output after teardown, owner-only; another user
#      cannot read it until `persist share`;
#   5. kill -9 of `haar stage` during a stage-in: the job is held with the reason, nothing
#      half-copied is left under its name; released, it stages again and runs;
#   6. a producer -> consumer workflow on native dependencies: a file and the fields of a
#      request (from a haar store on the shared directory) staged in, a persisted node-local
#      haar store between the jobs (its record names the node), the consumer submitted by
#      `haar stage submit --after` onto the producer's node, the product staged out
#      byte-identical; a failed producer cancels its consumer;
#   7. the node's stage service (`haar stage daemon`, `socket` in burst_buffer_haar.conf): a
#      stage-in is the service's task, run under the job owner's uid; kill -9 of the service
#      and its runner mid-task holds the job; the service restarted resumes the task, the job
#      released runs on every byte, and its teardown removes what it staged.
#
# Usage (root): scripts/slurm-stage-test.sh [PATH/TO/haar]
set -euo pipefail
haar_src=$(readlink -f "${1:-target/release/haar}")
here=$(cd "$(dirname "$0")" && pwd)
lua=$here/../slurm/burst_buffer.lua
plugin=/usr/lib/x86_64-linux-gnu/slurm-wlm/burst_buffer_lua.so
say() { echo "slurm-stage-test.sh: $*"; }
[ "$(id -u)" = 0 ] || { say "needs root (slurmd, munged, useradd)" >&2; exit 1; }
for t in slurmctld slurmd munged sbatch scontrol scancel setpriv useradd cmp; do
    command -v $t >/dev/null || { say "$t missing: apt-get install slurm-wlm munge" >&2; exit 1; }
done
[ -f "$plugin" ] || { say "$plugin missing: apt-get install slurm-wlm-basic-plugins" >&2; exit 1; }
[ -x "$haar_src" ] || { say "$haar_src is not an executable haar" >&2; exit 1; }
[ -f "$lua" ] || { say "$lua missing" >&2; exit 1; }

user=haarstage other=haarother
for u in $user $other; do
    id -u $u >/dev/null 2>&1 || useradd --no-create-home --shell /bin/bash $u
done

S=$(mktemp -d /tmp/haar-bb.XXXXXX)
H=$(hostname -s)
. "$here/slurm-ports.sh"
port=$(slurm_ports)
mkdir -p "$S/munge" "$S/state" "$S/spool" "$S/log" "$S/etc" "$S/bb" "$S/shared" "$S/node" "$S/jobs"
chmod 755 "$S" "$S/munge" "$S/etc"
chmod 755 "$S/bb"
chown $user "$S/shared" "$S/jobs"
chmod 1777 "$S/node"
cp "$haar_src" "$S/haar"; chmod 755 "$S/haar"
head -c 1024 /dev/urandom > "$S/munge/munge.key"; chmod 400 "$S/munge/munge.key"
passed=0
cleanup() {
    local pids
    pids=$(cat "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munge/munged.pid" "$S/svc.pid" 2>/dev/null || true)
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    sleep 2
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    if [ "$passed" = 1 ]; then rm -rf "$S"; else say "logs and files kept in $S" >&2; fi
}
trap cleanup EXIT
munged --socket="$S/munge/munge.socket.2" --key-file="$S/munge/munge.key" \
    --pid-file="$S/munge/munged.pid" --log-file="$S/log/munged.log" --seed-file="$S/munge/seed" --force

cat > "$S/etc/haar.yaml" <<CONF
backend: posix
roots: [$S/store]
dataspaces:
  shared: {kind: shared, path: $S/shared}
  local: {kind: posix, path: $S/node}
  pfsstore: {kind: store, root: $S/shared/store}
CONF
cat > "$S/etc/slurm.conf" <<CONF
ClusterName=haarstagetest
SlurmctldHost=$H
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket.2
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
BurstBufferType=burst_buffer/lua
SlurmctldPort=$((port + 1))
SlurmdPort=$((port + 2))
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
SlurmctldDebug=info
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
NodeName=$H CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
cat > "$S/etc/burst_buffer.conf" <<CONF
Directive=HAAR
Flags=TeardownFailure
StageInTimeout=120
StageOutTimeout=120
OtherTimeout=120
CONF
printf 'CgroupPlugin=cgroup/v1\n' > "$S/etc/cgroup.conf"
cp "$lua" "$S/etc/burst_buffer.lua"
cat > "$S/etc/burst_buffer_haar.conf" <<CONF
haar = $S/haar
config = $S/etc/haar.yaml
state = $S/bb
setpriv = $(command -v setpriv)
scancel = $(command -v scancel)
CONF
export SLURM_CONF=$S/etc/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 50); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.2; done
sinfo -h -o %T 2>/dev/null | grep -q idle || {
    echo "$(basename "$0"): the private Slurm did not come up (node not idle after 10 s); slurmctld log:" >&2
    tail -20 "$S/log/slurmctld.log" >&2; exit 1; }

as_user() { setpriv --reuid=$user --regid="$(id -g $user)" --clear-groups env SLURM_CONF="$SLURM_CONF" "$@"; }
state_of() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_gone_or_final() {
    # Until the job has ended and its burst buffer is torn down (or 120 s).
    local jid=$1
    for _ in $(seq 600); do
        local st; st=$(state_of "$jid")
        case "$st" in
            COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|"")
                [ -d "$S/bb/$jid" ] || return 0 ;;
        esac
        sleep 0.2
    done
    return 1
}
fail() { say "FAILED: $*" >&2; tail -30 "$S/log/slurmctld.log" >&2; exit 1; }

printf '#!/bin/bash\n#SBATCH -t 1\nexit 1\n' > "$S/jobs/fails.sh"; chown $user "$S/jobs/fails.sh"

# 1. stage_in + stage_out, every byte checked.
head -c 20000000 /dev/urandom > "$S/shared/input.bin"; chown $user "$S/shared/input.bin"
cat > "$S/jobs/ok.sh" <<JOB
#!/bin/bash
#SBATCH -t 5
#HAAR stage_in shared:input.bin local:job%j/input.bin
#HAAR stage_out local:job%j/output.bin shared:output-%j.bin
set -euo pipefail
d=$S/node/job\$SLURM_JOB_ID
cmp $S/shared/input.bin \$d/input.bin
# The output: the input twice, so a copy of the input would not pass.
cat \$d/input.bin \$d/input.bin > \$d/output.bin
echo "journal \$HAAR_STAGE_JOURNAL"
echo JOB-OK
JOB
chown $user "$S/jobs/ok.sh"
cd "$S/jobs"
jid=$(as_user sbatch --parsable ok.sh) || fail "sbatch of the stage job"
say "job $jid submitted (stage_in + stage_out)"
wait_gone_or_final "$jid" || fail "job $jid did not finish: $(scontrol show job "$jid")"
grep -q JOB-OK "slurm-$jid.out" || fail "job $jid: $(cat "slurm-$jid.out")"
cat "$S/shared/input.bin" "$S/shared/input.bin" > "$S/expected.bin"
cmp "$S/expected.bin" "$S/shared/output-$jid.bin" || fail "staged-out output differs"
[ ! -e "$S/node/job$jid/input.bin" ] || fail "teardown left the staged-in input"
[ ! -e "$S/node/job$jid/output.bin" ] || fail "teardown left the staged-out source"
say "1 ok: stage_in and stage_out of job $jid, every byte checked, teardown cleaned up"

# 2. A bad directive is rejected at submission, naming its line.
cat > "$S/jobs/bad.sh" <<JOB
#!/bin/bash
#SBATCH -t 1
#HAAR stage_in shared:input.bin
true
JOB
chown $user "$S/jobs/bad.sh"
if out=$(as_user sbatch --parsable bad.sh 2>&1); then fail "a bad directive was accepted (job $out)"; fi
echo "$out" | grep -q "line 3" || fail "the rejection does not name line 3: $out"
say "2 ok: bad directive rejected at sbatch: $out"

# 3. A missing source fails the job, with the reason in scontrol show job: Slurm 22.05 holds
#    a job whose data_in failed; the hook's teardown cancels it, since no retry can help, and
#    its dependent job (--kill-on-invalid-dep) is cancelled with it.
cat > "$S/jobs/missing.sh" <<JOB
#!/bin/bash
#SBATCH -t 1
#HAAR stage_in shared:no-such-input.bin local:job%j/in.bin
echo SHOULD-NOT-RUN
JOB
chown $user "$S/jobs/missing.sh"
jid=$(as_user sbatch --parsable missing.sh) || fail "sbatch of the missing-source job"
dep=$(as_user sbatch --parsable --dependency=afterok:$jid --kill-on-invalid-dep=yes "$S/jobs/fails.sh") \
    || fail "sbatch of the job depending on $jid"
info=""
for _ in $(seq 300); do
    info=$(scontrol show job "$jid" 2>/dev/null || true)
    [ "$(state_of "$jid")" = CANCELLED ] && break
    sleep 0.2
done
reason=$(echo "$info" | grep -o 'Reason=[^ ]*' | head -1 || true)
[ "$(state_of "$jid")" = CANCELLED ] || fail "job $jid with a missing source is $(state_of "$jid"), not ended: $info"
# (Slurm writes the reason with its blanks as underscores.)
echo "$reason" | grep -q "data_in:.#HAAR.stage_in.shared:no-such-input.bin.*does.not.exist" \
    || fail "job $jid: reason does not say the source is missing: $info"
[ ! -e "slurm-$jid.out" ] || ! grep -q SHOULD-NOT-RUN "slurm-$jid.out" || fail "job $jid ran"
for _ in $(seq 100); do [ "$(state_of "$dep")" = CANCELLED ] && break; sleep 0.2; done
[ "$(state_of "$dep")" = CANCELLED ] || fail "job $dep after the failed $jid is $(state_of "$dep")"
[ ! -d "$S/bb/$jid" ] || fail "job $jid: its stage state $S/bb/$jid was not torn down"
say "3 ok: job $jid with a missing source ended CANCELLED, never ran, $reason; dependent $dep cancelled"

# 4. persist: kept after teardown, owner-only, shared on demand.
cat > "$S/jobs/persist.sh" <<JOB
#!/bin/bash
#SBATCH -t 5
#HAAR stage_in shared:input.bin local:keep%j/input.bin
#HAAR persist store local:keep%j
set -e
echo JOB-OK
JOB
chown $user "$S/jobs/persist.sh"
jid=$(as_user sbatch --parsable persist.sh) || fail "sbatch of the persist job"
wait_gone_or_final "$jid" || fail "job $jid did not finish"
grep -q JOB-OK "slurm-$jid.out" || fail "job $jid: $(cat "slurm-$jid.out")"
cmp "$S/shared/input.bin" "$S/node/keep$jid/input.bin" || fail "persisted data was not kept whole"
[ "$(stat -c %a "$S/node/keep$jid")" = 700 ] || fail "persisted directory is not owner-only"
if setpriv --reuid=$other --regid="$(id -g $other)" --clear-groups cat "$S/node/keep$jid/input.bin" >/dev/null 2>&1; then
    fail "$other read data that was not shared with it"
fi
as_user "$S/haar" stage --config "$S/etc/haar.yaml" --journal "$S/jobs/j" persist share "local:keep$jid" $other >/dev/null \
    || fail "persist share"
setpriv --reuid=$other --regid="$(id -g $other)" --clear-groups cmp "$S/shared/input.bin" "$S/node/keep$jid/input.bin" \
    || fail "$other cannot read data shared with it"
as_user "$S/haar" stage --config "$S/etc/haar.yaml" --journal "$S/jobs/j" persist delete "local:keep$jid" >/dev/null \
    || fail "persist delete"
[ ! -e "$S/node/keep$jid" ] || fail "persist delete left the data"
say "4 ok: job $jid persisted its data; $other could not read it until it was shared"

# 5. kill -9 of the stage process during a stage-in: the job is held with the reason, no
#    half-copied file is left under its name, and released it stages again and runs.
head -c 700000000 /dev/urandom > "$S/shared/large.bin"; chown $user "$S/shared/large.bin"
cat > "$S/jobs/kill.sh" <<JOB
#!/bin/bash
#SBATCH -t 5
#HAAR stage_in shared:large.bin local:big%j/large.bin
set -e
cmp $S/shared/large.bin $S/node/big\$SLURM_JOB_ID/large.bin
echo JOB-OK
JOB
chown $user "$S/jobs/kill.sh"
jid=$(as_user sbatch --parsable kill.sh) || fail "sbatch of the kill job"
pid=""
for _ in $(seq 600); do
    rec="$S/bb/$jid/journal/in-1/task"
    if [ -f "$rec" ] && grep -q '"state": "running"' "$rec"; then
        pid=$(grep -o '"pid": [0-9]*' "$rec" | grep -o '[0-9]*$' || true)
        [ -n "$pid" ] && break
    fi
    sleep 0.05
done
[ -n "$pid" ] || fail "job $jid: no running stage task seen"
kill -9 "$pid"
for _ in $(seq 300); do
    reason=$(scontrol show job "$jid" | grep -o 'Reason=[^ ]*' || true)
    echo "$reason" | grep -qi "killed" && break
    sleep 0.2
done
echo "$reason" | grep -qi "killed" || fail "job $jid: reason after kill -9: $reason"
[ "$(state_of "$jid")" = PENDING ] || fail "job $jid ran after its stage-in was killed"
for f in "$S/node/big$jid"/*; do
    [ -e "$f" ] || continue
    cmp -s "$f" "$S/shared/large.bin" || fail "kill -9 left a partial file under its name: $f"
done
scontrol release "$jid"
wait_gone_or_final "$jid" || fail "job $jid did not finish after release"
grep -q JOB-OK "slurm-$jid.out" || fail "job $jid after release: $(cat "slurm-$jid.out" 2>/dev/null)"
say "5 ok: stage-in of job $jid killed with SIGKILL (held: $reason); released, staged again, ran"

# 6. A workflow on Slurm's native dependencies (afterok, --kill-on-invalid-dep): a producer
#    stages a file in, archives it into a node-local haar store and persists the store; the
#    dependent consumer retrieves the field from that store and stages the product out; a
#    failed producer cancels its consumer.
key=class=od,expver=1,stream=oper,date=20261124,time=0,domain=g,type=fc,levtype=sfc,step=0,param=167
req=class=od,expver=1,stream=oper,date=20261124,time=0,type=fc,levtype=sfc,step=0,param=167
# Fields in a haar store on the shared file system, staged in by request.
head -c 300000 /dev/urandom > "$S/field6.bin"; head -c 200000 /dev/urandom > "$S/field12.bin"
chown $user "$S/field6.bin" "$S/field12.bin"
for st in 6 12; do
    as_user "$S/haar" archive --root "$S/shared/store" --key "${key/step=0/step=$st}" "$S/field$st.bin" >/dev/null \
        || fail "archive into the shared store"
done
cat "$S/field6.bin" "$S/field12.bin" > "$S/fields-expected.grib"
cat > "$S/jobs/producer.sh" <<JOB
#!/bin/bash
#SBATCH -t 5
#HAAR stage_in shared:input.bin local:wf/input.bin
#HAAR stage_in pfsstore:${req/step=0/step=6/12} local:wf/fields.grib
#HAAR persist store local:wf
set -e
cmp $S/fields-expected.grib $S/node/wf/fields.grib
$S/haar archive --root $S/node/wf/store --key $key $S/node/wf/input.bin
echo PRODUCER-OK
JOB
cat > "$S/jobs/consumer.sh" <<JOB
#!/bin/bash
#SBATCH -t 5
#HAAR stage_out local:wf/product.grib shared:product.grib
set -e
$S/haar retrieve --root $S/node/wf/store $req -o $S/node/wf/product.grib
echo CONSUMER-OK
JOB
chown $user "$S/jobs/producer.sh" "$S/jobs/consumer.sh"
p=$(as_user sbatch --parsable producer.sh) || fail "sbatch producer"
# Placed on the producer's node (where its persisted store is), after it: haar stage submit
# waits for the producer's node and adds afterok, kill-on-invalid-dep and --nodelist.
c=$(as_user "$S/haar" stage submit --after "$p" -- --parsable consumer.sh 2>"$S/submit.err") \
    || fail "haar stage submit of the consumer: $(cat "$S/submit.err")"
grep -q "on its nodes $H" "$S/submit.err" || fail "consumer $c not placed: $(cat "$S/submit.err")"
cinfo=$(scontrol show job "$c")
echo "$cinfo" | grep -q "ReqNodeList=$H " || fail "consumer $c does not ask for the producer's node $H: $cinfo"
wait_gone_or_final "$p" || fail "producer $p did not finish"
wait_gone_or_final "$c" || fail "consumer $c did not finish"
grep -q PRODUCER-OK "slurm-$p.out" || fail "producer $p: $(cat "slurm-$p.out")"
grep -q CONSUMER-OK "slurm-$c.out" || fail "consumer $c: $(cat "slurm-$c.out")"
cmp "$S/shared/input.bin" "$S/shared/product.grib" || fail "the consumer's product differs from the producer's input"
as_user "$S/haar" stage --config "$S/etc/haar.yaml" --journal "$S/jobs/j" persist list --json \
    | grep -q "\"node\": \"$H\"" || fail "persist list does not name the node of local:wf"
f=$(as_user sbatch --parsable fails.sh) || fail "sbatch failing producer"
c2=$(as_user "$S/haar" stage submit --after "$f" -- --parsable consumer.sh 2>>"$S/submit.err") \
    || fail "haar stage submit of the second consumer: $(cat "$S/submit.err")"
for _ in $(seq 300); do [ "$(state_of "$c2")" = CANCELLED ] && break; sleep 0.2; done
[ "$(state_of "$c2")" = CANCELLED ] || fail "consumer $c2 of failed $f is $(state_of "$c2")"
as_user "$S/haar" stage --config "$S/etc/haar.yaml" --journal "$S/jobs/j" persist delete local:wf >/dev/null \
    || fail "persist delete local:wf"
say "6 ok: producer $p (a file and fields by request staged in) -> consumer $c, placed on its node $H by haar stage submit, through a persisted node-local store, product byte-identical; consumer $c2 of failed $f cancelled"

# 7. Through the node's stage service.
svc_state=$S/svc
start_service() {
    "$S/haar" stage daemon --config "$S/etc/haar.yaml" --socket "$S/svc.sock" --state "$svc_state" \
        >>"$S/log/svc.log" 2>&1 &
    echo $! > "$S/svc.pid"
    disown
    for _ in $(seq 100); do
        "$S/haar" stage status --socket "$S/svc.sock" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    fail "the stage service did not start: $(cat "$S/log/svc.log")"
}
start_service
printf 'socket = %s\nservice_state = %s\n' "$S/svc.sock" "$svc_state" >> "$S/etc/burst_buffer_haar.conf"
cat > "$S/jobs/svc.sh" <<JOB
#!/bin/bash
#SBATCH -t 5
#HAAR stage_in shared:large.bin local:svc%j/large.bin
set -e
cmp $S/shared/large.bin $S/node/svc\$SLURM_JOB_ID/large.bin
echo "journal \$HAAR_STAGE_JOURNAL"
echo JOB-OK
JOB
chown $user "$S/jobs/svc.sh"
jid=$(as_user sbatch --parsable svc.sh) || fail "sbatch of the service job"
rec="$svc_state/users/$(id -u $user)/job$jid-in-1/task"
pid=""
for _ in $(seq 600); do
    if [ -f "$rec" ] && grep -q '"state": "running"' "$rec"; then
        pid=$(grep -o '"pid": [0-9]*' "$rec" | grep -o '[0-9]*$' || true)
        [ -n "$pid" ] && break
    fi
    sleep 0.05
done
[ -n "$pid" ] || fail "job $jid: no running service task seen in $rec"
[ "$(stat -c %u /proc/$pid)" = "$(id -u $user)" ] || fail "the service's runner $pid does not run as $user"
kill -9 "$(cat "$S/svc.pid")" "$pid"
reason=""
for _ in $(seq 300); do
    info=$(scontrol show job "$jid")
    reason=$(echo "$info" | grep -o 'Reason=[^ ]*' || true)
    echo "$info" | grep -q "Priority=0" && echo "$reason" | grep -q "data_in" && break
    sleep 0.2
done
[ "$(state_of "$jid")" = PENDING ] && echo "$info" | grep -q "Priority=0" \
    || fail "job $jid is not held after its service was killed: $info"
for f in "$S/node/svc$jid"/*; do
    [ -e "$f" ] || continue
    cmp -s "$f" "$S/shared/large.bin" || fail "kill -9 left a partial file under its name: $f"
done
start_service
grep -q "job$jid-in-1 (uid" "$S/log/svc.log" || fail "the restarted service did not resume job$jid-in-1: $(cat "$S/log/svc.log")"
scontrol release "$jid"
wait_gone_or_final "$jid" || fail "job $jid did not finish after release"
grep -q JOB-OK "slurm-$jid.out" || fail "job $jid after release: $(cat "slurm-$jid.out" 2>/dev/null)"
grep -q "journal $svc_state/users/" "slurm-$jid.out" || fail "job $jid: HAAR_STAGE_JOURNAL is not the service's"
[ ! -e "$S/node/svc$jid/large.bin" ] || fail "teardown left job $jid's service-staged input"
say "7 ok: job $jid staged in by the stage service as $user; service and runner killed with SIGKILL (held: $reason); restarted, it resumed the task; released, the job ran"

passed=1
say "ok (Slurm $(sinfo -V | awk '{print $2}'))"
