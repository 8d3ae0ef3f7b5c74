#!/usr/bin/env bash
# The multi-node suite (issue 25, part 4): brings a 4-node virtual cluster up
# (scripts/vcluster.sh), runs every check under its real Slurm and tears it down, also on
# failure. Checks, each asserting behaviour:
#   slurm    `srun -N 4 hostname` prints n1..n4 (one each); `sbatch -N 4` runs a step on every
#            node; /mnt/pmem0 is node-private (a file written on n1 is absent on n2) and
#            /shared is shared (written on n1, read byte-identical on n3);
#   serve    one `haar serve` per node (scripts/slurm-serve.sh, --replicas 2): fields archived
#            on n2 are held by exactly two servers, retrieve byte-identical on n3 and list on n4;
#   mount    one `haar mount` per node over all servers (scripts/slurm-mount.sh): a file
#            written on n1 reads byte-identical on n3, and every mount is gone after the job;
#   stage    `#HAAR stage_in /shared/... local:...` in a 4-node sbatch job (submitted by an
#            unprivileged user) lands on every node's /mnt/pmem0, byte-identical, and
#            `spread=GLOB` deals the matching files round-robin (each on exactly one node); every
#            task has $HAAR_STAGE_LOCAL; `#HAAR stage_out local:...` gathers from every node into
#            DST/NODE, and the node-local copies are torn down; a stage-in that fails on one node
#            (n3) fails the job before its script runs, naming n3, and is torn down on the others;
#            a workflow: a 2-node producer persists node-local data (`#HAAR persist store`, on
#            every node) and stages a product out; its consumer, submitted by `haar stage
#            submit --after`, runs on the producer's nodes and reads the persisted data there;
#            a second consumer on the other nodes stages the producer's gathered product in;
#   table9   `haar workflow --vcluster 4` (SC'19 Table 9 across nodes), small: members run on
#            n1,n2 and product generation on n3,n4, on the shared POSIX directory (/shared), on
#            haar (one server per node) and on FDB5 where installed; every member field is
#            delivered once and every product checked (the command fails otherwise), and the
#            JSON says nodes = 4 with each backend's figures;
#   kill     K times: a workflow of producers (one per node, replicas 2, a flush per field) runs
#            under sbatch --no-kill; at a random moment one node holding fields (n2..n4: n1 runs
#            the batch script) is killed whole (scripts/vcluster.sh kill: its PID namespace
#            ends). Then: Slurm marks it DOWN (sinfo, scontrol show node); the surviving
#            producers flush at least 2 more fields each (they fail over); every field flushed
#            before or after the kill retrieves byte-identical (0 lost), including those the
#            dead node held; a client reaching the dead node names it in its error; the node
#            revived, the next workflow (the re-run) completes on all 4 nodes.
#
# Usage (root): scripts/cluster-test.sh [--kills K] [--haar PATH] [--only LIST] [--keep]
#   --kills K   node kills (default 10; the long run: --kills 100 --only kill)
#   --only LIST comma-separated subset of slurm,stage,serve,mount,table9,kill
#   --keep      leave the cluster up (and its logs in /run/haar-vcluster) at the end
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
V=$here/vcluster.sh
# The launch scripts as the nodes see them (vcluster.sh up copies them beside haar).
nodebin=${HAAR_VCLUSTER_DIR:-/run/haar-vcluster}/bin
haar=$here/../target/release/haar
kills=10
only=slurm,stage,serve,mount,table9,kill
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --kills) kills=$2; shift 2 ;;
        --haar) haar=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        -h|--help) awk 'NR > 1 && /^set -euo/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "cluster-test.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "cluster-test.sh: needs root (namespaces, Slurm daemons)" >&2; exit 1; }
haar=$(readlink -f "$haar")
[ -x "$haar" ] || { echo "cluster-test.sh: $haar is not an executable haar (cargo build --release -p haar-cli)" >&2; exit 1; }

say() { echo "cluster-test.sh: $*" >&2; }
t_start=$SECONDS
failed=0
finish() {
    local status=$?
    if { [ "$status" != 0 ] || [ "$failed" != 0 ]; } && [ "$keep" != 1 ] && [ -d /run/haar-vcluster/node ]; then
        # Keep what explains a failure before the cluster goes: daemons' logs and the jobs' files.
        local logs
        logs=$(mktemp -d /tmp/haar-cluster-test.XXXXXX)
        cp -r /run/haar-vcluster/node "$logs/" 2>/dev/null || true
        rm -rf "$logs"/node/storage/brick "$logs"/node/storage/glusterd 2>/dev/null || true
        on n1 tar -C /shared -cf - ct 2>/dev/null | tar -C "$logs" -xf - 2>/dev/null || true
        say "logs kept in $logs"
        # And on stderr, for a CI run whose machine is gone: the daemons' last words and the
        # servers' logs of the last job.
        local f last
        for f in "$logs"/node/storage/slurmctld.log "$logs"/node/n*/slurmd.log; do
            [ -e "$f" ] || continue
            say "--- ${f#"$logs"/node/}, last lines:"
            tail -n 15 "$f" | sed 's/^/    /' >&2
        done
        last=$(find "$logs/ct" -maxdepth 1 -name 'haar-serve-*' 2>/dev/null | sort -t- -k3 -n | tail -1)
        for f in "$last"/*.log; do
            [ -e "$f" ] || continue
            say "--- ${f#"$logs"/}, last lines:"
            tail -n 10 "$f" | sed 's/^/    /' >&2
        done
    fi
    if [ "$keep" = 1 ]; then
        say "cluster left up (--keep): scripts/vcluster.sh exec n1 sinfo; scripts/vcluster.sh down"
    else
        "$V" down || true
    fi
    if [ "$status" = 0 ] && [ "$failed" = 0 ]; then
        say "ok ($(( SECONDS - t_start )) s)"
    else
        say "FAILED ($(( SECONDS - t_start )) s)"
        [ "$status" != 0 ] || exit 1
    fi
}
trap finish EXIT
fail() { say "FAILED: $*"; failed=1; exit 1; }
pass() { say "PASS: $*"; }
on() { "$V" exec "$@"; }
want() { [[ ",$only," == *",$1,"* ]]; }

"$V" down
"$V" up 4 --haar "$haar" --pmem-size 1g
W=/shared/ct
on n1 mkdir -p $W
T=$W/token
on n1 bash -c "umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > $T"
KEY=class=od,expver=1,stream=oper,time=0,domain=g,type=fc,levtype=sfc
REQ=class=od,expver=1,stream=oper,time=0,type=fc,levtype=sfc

# Submits a batch script (on n1) and waits for the job to end; prints its id.
run_job() {
    local script=$1 limit=${2:-120} jid
    jid=$(on n1 bash -c "cd $W && sbatch --parsable $script") || fail "sbatch $script"
    for _ in $(seq $((limit * 5))); do
        [ -z "$(on n1 squeue -h -j "$jid" -o %T 2>/dev/null)" ] && { echo "$jid"; return 0; }
        sleep 0.2
    done
    on n1 scancel "$jid" || true
    fail "job $jid ($script) still running after $limit s"
}
job_state() { on n1 scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }

# ---------------------------------------------------------------------------------------------
test_slurm() {
    local got
    got=$(on n1 srun -N 4 hostname | sort | tr '\n' ' ')
    [ "$got" = "n1 n2 n3 n4 " ] || fail "srun -N 4 hostname printed '$got', not one line from each of n1..n4"
    on n1 bash -c "cat > $W/hosts.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 4
#SBATCH -o slurm-%j.out
srun -N 4 --ntasks-per-node=1 bash -c 'echo "step on $(hostname) node $SLURM_NODEID of $SLURM_JOB_NUM_NODES"'
JOB
    local jid out
    jid=$(run_job hosts.sh 60)
    out=$(on n1 cat "$W/slurm-$jid.out")
    [ "$(job_state "$jid")" = COMPLETED ] || fail "sbatch -N 4 job $jid: $(job_state "$jid"): $out"
    got=$(grep -o 'step on n[0-9]' <<<"$out" | awk '{print $3}' | sort | tr '\n' ' ')
    [ "$got" = "n1 n2 n3 n4 " ] || fail "sbatch -N 4: steps ran on '$got': $out"
    pass "srun -N 4 and sbatch -N 4 run one task on each of n1..n4"

    local tag
    tag=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
    on n1 srun -N1 -w n1 bash -c "echo $tag > /mnt/pmem0/private-$tag"
    on n1 srun -N1 -w n2 test ! -e "/mnt/pmem0/private-$tag" \
        || fail "/mnt/pmem0/private-$tag written on n1 is visible on n2 (not node-private)"
    on n1 srun -N1 -w n1 grep -qx "$tag" "/mnt/pmem0/private-$tag" \
        || fail "/mnt/pmem0/private-$tag is gone on n1"
    local wrote read
    wrote=$(on n1 srun -N1 -w n1 bash -c "head -c 3000000 /dev/urandom | tee $W/shared-$tag | md5sum")
    read=$(on n1 srun -N1 -w n3 bash -c "md5sum < $W/shared-$tag")
    [ "$wrote" = "$read" ] || fail "$W/shared-$tag written on n1 ($wrote) reads differently on n3 ($read)"
    pass "/mnt/pmem0 is private to each node; /shared (GlusterFS) written on n1 reads byte-identical on n3"
}

# ---------------------------------------------------------------------------------------------
# Per-node staging (burst_buffer.lua + slurm/haar-node.sh as Prolog, TaskProlog, Epilog), as
# an unprivileged user (Slurm refuses burst buffers to root's jobs).
STAGE_USER=haarstage
as_stage_user() { # NODE CMD...
    local node=$1; shift
    on "$node" setpriv --reuid=$STAGE_USER --regid="$(id -g $STAGE_USER)" --clear-groups "$@"
}
run_job_as_user() { # SCRIPT LIMIT: like run_job, submitted by $STAGE_USER from $W/stage
    local script=$1 limit=$2 jid
    jid=$(as_stage_user n1 bash -c "cd $W/stage && sbatch --parsable $script") || fail "sbatch $script (as $STAGE_USER)"
    for _ in $(seq $((limit * 5))); do
        [ -z "$(on n1 squeue -h -j "$jid" -o %T 2>/dev/null)" ] && { echo "$jid"; return 0; }
        sleep 0.2
    done
    on n1 scancel "$jid" || true
    fail "job $jid ($script) still there after $limit s: $(on n1 scontrol show job "$jid" | grep -o 'JobState=.*Reason=[^ ]*')"
}
test_stage() {
    local S=$W/stage jid out t0=$SECONDS
    id -u $STAGE_USER >/dev/null 2>&1 || useradd --no-create-home --shell /bin/bash $STAGE_USER
    on n1 bash -c "rm -rf $S && mkdir -p $S/in/members && head -c 3000000 /dev/urandom > $S/in/common.bin \
        && for m in 0 1 2 3 4 5 6 7; do head -c \$((50000 + m * 1000)) /dev/urandom > $S/in/members/m\$m.grib; done \
        && echo not a member > $S/in/members/readme.txt && chown -R $STAGE_USER $S"
    local sum
    sum=$(on n1 md5sum "$S/in/common.bin" | cut -c1-32)
    # shellcheck disable=SC2016
    as_stage_user n1 bash -c "cat > $S/stage.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 4
#SBATCH -o stage-%j.out
#HAAR stage_in  shared:ct/stage/in/common.bin local:ct-%j/common.bin
#HAAR stage_in  shared:ct/stage/in/members local:ct-%j/members spread=m*.grib
#HAAR stage_out local:ct-%j/out shared:ct/stage/out/%j
echo "BATCH $(hostname) LOCAL=$HAAR_STAGE_LOCAL"
srun -N 4 --ntasks-per-node=1 bash -c 'echo "NODE $(hostname) LOCAL=$HAAR_STAGE_LOCAL COMMON=$(md5sum < $HAAR_STAGE_LOCAL/common.bin | cut -c1-32) MEMBERS=$(cd $HAAR_STAGE_LOCAL/members && ls | paste -sd,)"
  mkdir -p $HAAR_STAGE_LOCAL/out && hostname > $HAAR_STAGE_LOCAL/out/host && cp $HAAR_STAGE_LOCAL/common.bin $HAAR_STAGE_LOCAL/out/'
JOB
    jid=$(run_job_as_user stage.sh 60)
    out=$(on n1 cat "$S/stage-$jid.out" 2>&1)
    printf '    job: %s\n' "${out//$'\n'/$'\n'    job: }" >&2
    [ "$(job_state "$jid")" = COMPLETED ] || fail "stage job $jid: $(job_state "$jid"): $out"
    grep -qx "BATCH n1 LOCAL=/mnt/pmem0/ct-$jid" <<<"$out" || fail "the batch script's HAAR_STAGE_LOCAL is not /mnt/pmem0/ct-$jid"
    local node members=''
    for node in n1 n2 n3 n4; do
        local line
        line=$(grep "^NODE $node " <<<"$out") || fail "no task ran on $node"
        grep -q " LOCAL=/mnt/pmem0/ct-$jid " <<<"$line" || fail "$node: HAAR_STAGE_LOCAL wrong: $line"
        grep -q " COMMON=$sum " <<<"$line" || fail "$node: common.bin not staged in byte-identical: $line"
        members+=${line##*MEMBERS=},
        [ "$(tr ',' '\n' <<<"${line##*MEMBERS=}" | grep -c .)" = 2 ] || fail "$node: spread gave it not 2 of 8 members: $line"
    done
    [ "$(tr ',' '\n' <<<"$members" | grep . | sort | paste -sd,)" = "m0.grib,m1.grib,m2.grib,m3.grib,m4.grib,m5.grib,m6.grib,m7.grib" ] \
        || fail "spread=m*.grib: members over the nodes are '$members', not m0..m7 each once (readme.txt excluded)"
    pass "stage_in on every node of a 4-node job: byte-identical on each /mnt/pmem0, spread=m*.grib dealt 2 of 8 members to each, HAAR_STAGE_LOCAL=/mnt/pmem0/ct-$jid in every task"
    for node in n1 n2 n3 n4; do
        [ "$(on n1 cat "$S/out/$jid/$node/host" 2>&1)" = "$node" ] || fail "stage_out: $S/out/$jid/$node/host does not say $node"
        [ "$(on n1 md5sum "$S/out/$jid/$node/common.bin" | cut -c1-32)" = "$sum" ] || fail "stage_out: $node's common.bin differs"
    done
    local left
    left=$(on n1 srun -N 4 --ntasks-per-node=1 bash -c "ls -d /mnt/pmem0/ct-$jid 2>/dev/null; true" | sort -u | paste -sd' ')
    [ -z "$left" ] || fail "teardown left on the nodes' /mnt/pmem0/ct-$jid: $left"
    pass "stage_out gathered every node's output into out/$jid/n1..n4, byte-identical; nothing left on the nodes"

    # One node refuses the stage-in: a root-owned 0700 directory where the file must go.
    on n1 srun -N 1 -w n3 bash -c "mkdir -p /mnt/pmem0/ct-fail && chmod 0700 /mnt/pmem0/ct-fail"
    # shellcheck disable=SC2016
    as_stage_user n1 bash -c "cat > $S/fail.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 4
#SBATCH -o fail-%j.out
#HAAR stage_in shared:ct/stage/in/common.bin local:ct-fail/common.bin
echo SCRIPT-RAN
JOB
    jid=$(run_job_as_user fail.sh 60)
    out=$(on n1 cat "$S/fail-$jid.out" 2>&1)
    printf '    job: %s\n' "${out//$'\n'/$'\n'    job: }" >&2
    [ "$(job_state "$jid")" = FAILED ] || fail "job $jid whose stage-in failed on n3 ended $(job_state "$jid"), not FAILED: $out"
    grep -q 'SCRIPT-RAN' <<<"$out" && fail "job $jid ran its script although its stage-in failed on n3"
    grep -q 'stage-in failed on node n3: #HAAR stage_in shared:ct/stage/in/common.bin local:ct-fail/common.bin' <<<"$out" \
        || fail "job $jid's output does not name n3 and the directive: $out"
    left=$(on n1 srun -N 4 --ntasks-per-node=1 bash -c 'ls -A /mnt/pmem0/ct-fail 2>/dev/null; true' | sort -u | paste -sd' ')
    [ -z "$left" ] || fail "the other nodes kept what the failed job staged in: $left"
    on n1 srun -N 1 -w n3 rmdir /mnt/pmem0/ct-fail
    pass "a stage-in refused on n3 failed job $jid (FAILED, script not run) naming n3 and the directive; torn down on n1, n2, n4"

    # One node's stage-out is refused: a root-owned 0700 directory where n2's copy must go.
    # The job has ended (it stays COMPLETED); the Epilog tells it: its output file names the
    # node and the directive, and n2 keeps its copy and journal.
    on n1 bash -c "rm -rf $S/sofail && mkdir -p $S/sofail/n2 && chmod 0700 $S/sofail/n2 && chown $STAGE_USER $S/sofail"
    # shellcheck disable=SC2016
    as_stage_user n1 bash -c "cat > $S/sofail.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 4
#SBATCH -o sofail-%j.out
#HAAR stage_out local:ct-so/out shared:ct/stage/sofail
srun -N 4 --ntasks-per-node=1 bash -c 'mkdir -p /mnt/pmem0/ct-so/out && hostname > /mnt/pmem0/ct-so/out/host'
echo JOB-DONE
JOB
    jid=$(run_job_as_user sofail.sh 60)
    [ "$(job_state "$jid")" = COMPLETED ] || fail "job $jid (stage-out refused on n2) ended $(job_state "$jid"), not COMPLETED"
    local told=""
    for _ in $(seq 1 60); do
        out=$(on n1 cat "$S/sofail-$jid.out" 2>&1)
        grep -q 'haar: stage-out failed on node n2: .*#HAAR stage_out local:ct-so/out shared:ct/stage/sofail' <<<"$out" && { told=1; break; }
        sleep 0.5
    done
    printf '    job: %s\n' "${out//$'\n'/$'\n'    job: }" >&2
    [ -n "$told" ] || fail "job $jid: a stage-out refused on n2 is not told in its output file, naming n2 and the directive"
    for node in n1 n3 n4; do
        [ "$(on n1 cat "$S/sofail/$node/host" 2>&1)" = "$node" ] || fail "stage_out: $S/sofail/$node/host does not say $node"
    done
    [ "$(on n2 cat /mnt/pmem0/ct-so/out/host 2>&1)" = n2 ] || fail "n2 did not keep its copy after its stage-out failed"
    on n1 srun -N 4 --ntasks-per-node=1 bash -c "rm -rf /mnt/pmem0/ct-so /run/haar-stage/$jid"
    on n1 rm -rf "$S/sofail"
    pass "a stage-out refused on n2 is told in job $jid's output (the job stays COMPLETED), naming n2 and the directive; n1, n3, n4 gathered, n2 kept its copy"
    test_workflow
    say "stage checks: $((SECONDS - t0)) s"
}

# Producer -> consumers (docs/staging.md, "Workflows"), with per-node staging.
test_workflow() {
    local S=$W/stage p c1 c2 out
    # shellcheck disable=SC2016
    as_stage_user n1 bash -c "cat > $S/producer.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 2
#SBATCH -o producer-%j.out
#HAAR stage_in  shared:ct/stage/in/common.bin local:wf/common.bin
#HAAR persist   store local:wf
#HAAR stage_out local:wf/product shared:ct/stage/wf-%j
srun -N 2 --ntasks-per-node=1 bash -c 'echo "$(hostname) $(md5sum < $HAAR_STAGE_LOCAL/common.bin | cut -c1-32)" > $HAAR_STAGE_LOCAL/product'
JOB
    # shellcheck disable=SC2016
    as_stage_user n1 bash -c "cat > $S/consumer.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 2
#SBATCH -o consumer-%j.out
srun -N 2 --ntasks-per-node=1 bash -c 'echo "CONSUMER $(hostname) READ $(cat /mnt/pmem0/wf/product)"'
JOB
    p=$(as_stage_user n1 bash -c "cd $S && sbatch --parsable producer.sh") || fail "sbatch producer.sh"
    c1=$(as_stage_user n1 bash -c "cd $S && haar stage submit --after $p -- --parsable consumer.sh" 2>/tmp/submit.err) \
        || fail "haar stage submit --after $p: $(cat /tmp/submit.err)"
    c1=${c1%%;*}
    local pnodes
    pnodes=$(on n1 scontrol show job "$p" | grep -o ' NodeList=[^ ]*' | cut -d= -f2)
    # shellcheck disable=SC2016
    as_stage_user n1 bash -c "cat > $S/consumer2.sh" <<JOB
#!/bin/bash
#SBATCH -N 2
#SBATCH -o consumer2-%j.out
#HAAR stage_in shared:ct/stage/wf-$p local:wf2-%j/in
srun -N 2 --ntasks-per-node=1 bash -c 'echo "CONSUMER2 \$(hostname) READ \$(cat \$HAAR_STAGE_LOCAL/in/* | sort | paste -sd" ")"'
JOB
    c2=$(as_stage_user n1 bash -c "cd $S && sbatch --parsable --dependency=afterok:$p --exclude=$pnodes consumer2.sh") || fail "sbatch consumer2.sh"
    for _ in $(seq 300); do
        [ -z "$(on n1 squeue -h -j "$p,$c1,$c2" -o %T 2>/dev/null)" ] && break
        sleep 0.2
    done
    [ "$(job_state "$p")" = COMPLETED ] || fail "producer $p: $(job_state "$p"): $(on n1 cat "$S/producer-$p.out")"
    out=$(on n1 cat "$S/consumer-$c1.out" 2>&1)
    printf '    consumer: %s\n' "${out//$'\n'/$'\n'    consumer: }" >&2
    [ "$(job_state "$c1")" = COMPLETED ] || fail "consumer $c1: $(job_state "$c1"): $out"
    [ "$(on n1 scontrol show job "$c1" | grep -o ' NodeList=[^ ]*' | cut -d= -f2)" = "$pnodes" ] \
        || fail "consumer $c1 did not run on the producer's nodes $pnodes"
    local sum node
    sum=$(on n1 md5sum "$S/in/common.bin" | cut -c1-32)
    for node in $(on n1 scontrol show hostnames "$pnodes"); do
        grep -qx "CONSUMER $node READ $node $sum" <<<"$out" || fail "consumer on $node did not read what the producer persisted there: $out"
    done
    pass "haar stage submit --after $p placed consumer $c1 on the producer's nodes $pnodes; each read the data the producer persisted on it"
    out=$(on n1 cat "$S/consumer2-$c2.out" 2>&1)
    printf '    consumer2: %s\n' "${out//$'\n'/$'\n'    consumer2: }" >&2
    [ "$(job_state "$c2")" = COMPLETED ] || fail "consumer2 $c2: $(job_state "$c2"): $out"
    local want
    want=$(for node in $(on n1 scontrol show hostnames "$pnodes"); do echo "$node $sum"; done | sort | paste -sd' ')
    [ "$(grep -c "^CONSUMER2 n[0-9] READ $want\$" <<<"$out")" = 2 ] \
        || fail "consumer2 on the other nodes did not stage in the products gathered from $pnodes ($want): $out"
    pass "consumer2 $c2 on the other nodes staged in the producer's products, gathered from each of its nodes"
}

# SC'19 Table 9 across the nodes, small (the figures of the full run: docs/benchmarks.md).
test_table9() {
    local d j log figures
    d=$(mktemp -d /var/tmp/haar-table9.XXXXXX)
    j=$d/table9.json log=$d/table9.log
    (cd "$d" && "$haar" workflow --vcluster 4 --members 4 --levels 2 --params 5 --steps 2 \
        --compute-ms 100 --quiet --json "$j" --plot "$d/table9.png") >"$log" 2>&1 \
        || fail "haar workflow --vcluster 4: $(tail -20 "$log")"
    figures=$(python3 - "$j" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["nodes"] == 4, r["nodes"]
v = r["vcluster"]
assert v["producer_nodes"] == ["n1", "n2"] and v["consumer_nodes"] == ["n3", "n4"], v
names = [b["backend"] for b in r["backends"]]
assert names[:2] == ["shared-posix", "haar"], names
for b in r["backends"]:
    w = b["with_consumers"]
    assert w["delivered"] == 4 * 2 * 10 and w["products_checked"] == 2 * 2 * 10, b
    assert b["producer_slowdown"] is not None and b["step_latency_p50_ms"] > 0, b
print(", ".join(f'{b["backend"]} {100 * b["producer_slowdown"]:+.1f}% p50 {b["step_latency_p50_ms"]:.0f} ms' for b in r["backends"]))
PY
    ) || fail "haar workflow --vcluster 4: the JSON is not as expected (see $j)"
    rm -rf "$d"
    pass "haar workflow --vcluster 4: members on n1,n2, product generation on n3,n4, every field delivered once and every product checked (small run: $figures)"
}

# ---------------------------------------------------------------------------------------------
# One job: per-node servers (replicas 2), then per-node mounts over them.
test_serve_mount() {
    local check_mount=$1
    on n1 bash -c "cat > $W/serve.sh" <<JOB
#!/bin/bash
#SBATCH -N 4
#SBATCH -o serve-%j.out
set -euo pipefail
cd $W
$nodebin/slurm-serve.sh --root /mnt/pmem0/haar-serve --port 7070 --replicas 2 --token-file $T \\
    --store-config /etc/haar/haar.yaml --config $W/cluster.yaml -- bash $W/serve-clients.sh
JOB
    {
        echo "export W=$W T=$T KEY=$KEY REQ=$REQ check_mount=$check_mount here=$nodebin"
        cat <<'CLIENTS'
set -euo pipefail
# 16 fields archived on n2 (one process and flush each), kept on /shared as the reference.
srun --overlap -N1 -n1 -w n2 bash -c '
  set -e; mkdir -p $W/orig
  for s in $(seq 0 15); do
    head -c $((1000 + s * 20000)) /dev/urandom > /tmp/f$s
    haar --config $HAAR_CONFIG --token-file $T archive --key $KEY,date=20261201,step=$s,param=167 /tmp/f$s
    cp /tmp/f$s $W/orig/f$s
  done'
# Retrieved on n3, in request order, against the reference.
srun --overlap -N1 -n1 -w n3 bash -c '
  haar --config $HAAR_CONFIG --token-file $T retrieve $REQ,date=20261201,param=167,step=$(seq -s/ 0 15) -o /tmp/back &&
  for s in $(seq 0 15); do cat $W/orig/f$s; done | cmp - /tmp/back && echo SERVE-RETRIEVE-OK'
# Listed on n4.
n=$(srun --overlap -N1 -n1 -w n4 haar --config "$HAAR_CONFIG" --token-file "$T" list "$REQ,date=20261201" | grep -c 'step=' || true)
echo "SERVE-LIST $n"
# Replicas: exactly two servers hold the database, each all of it.
for node in n1 n2 n3 n4; do
  echo "SERVE-HOLDS $node $(haar --servers "$node:7070" --token-file "$T" list "$REQ,date=20261201" | grep -c 'step=' || true)"
done
if [ "$check_mount" = 1 ]; then
  "$here/slurm-mount.sh" --mountpoint /tmp/haarfs --token-file "$T" -- bash -c '
    srun --overlap -N1 -n1 -w n1 bash -c "head -c 5000000 /dev/urandom > $W/blob && cp $W/blob /tmp/haarfs/blob && sync"
    for i in $(seq 50); do
      srun --overlap -N1 -n1 -w n3 cmp -s $W/blob /tmp/haarfs/blob && { echo MOUNT-READ-ON-N3-OK; break; }
      sleep 0.2
    done'
  left=$(srun --overlap -N4 --ntasks-per-node=1 bash -c 'grep -c " /tmp/haarfs " /proc/mounts || true' | awk '{ n += $1 } END { print n + 0 }')
  echo "MOUNTS-LEFT $left"
fi
CLIENTS
    } | on n1 bash -c "cat > $W/serve-clients.sh"
    local jid out
    jid=$(run_job serve.sh 180)
    out=$(on n1 cat "$W/serve-$jid.out")
    printf '    job: %s\n' "${out//$'\n'/$'\n'    job: }" >&2
    [ "$(job_state "$jid")" = COMPLETED ] || fail "serve job $jid: $(job_state "$jid")"
    grep -q SERVE-RETRIEVE-OK <<<"$out" || fail "fields archived on n2 did not retrieve byte-identical on n3"
    grep -q '^SERVE-LIST 16$' <<<"$out" || fail "list on n4 did not show the 16 fields"
    local holders
    holders=$(grep '^SERVE-HOLDS' <<<"$out" | awk '$3 == 16' | wc -l)
    if [ "$holders" != 2 ] || [ "$(grep '^SERVE-HOLDS' <<<"$out" | awk '$3 != 16 && $3 != 0' | wc -l)" != 0 ]; then
        fail "with --replicas 2 exactly two servers must hold all 16 fields: $(grep '^SERVE-HOLDS' <<<"$out" | tr '\n' ' ')"
    fi
    pass "4 servers via slurm-serve.sh: archived on n2, retrieved byte-identical on n3, listed on n4, held by exactly 2 servers"
    if [ "$check_mount" = 1 ]; then
        grep -q MOUNT-READ-ON-N3-OK <<<"$out" || fail "a file written through haar mount on n1 did not read byte-identical on n3"
        grep -q '^MOUNTS-LEFT 0$' <<<"$out" || fail "mounts left behind after slurm-mount.sh: $(grep MOUNTS-LEFT <<<"$out")"
        pass "4 haar mounts via slurm-mount.sh: written on n1, read byte-identical on n3, all unmounted after"
    fi
}

# ---------------------------------------------------------------------------------------------
# Node failure. The job (run number R, its files in $W/fail-R): servers on every node over
# roots kept from run to run (a re-run restarts them on what they hold), then one producer per
# node until $W/fail-R/stop exists, then the verification on n1.
write_fail_scripts() {
    on n1 bash -c "cat > $W/fail.sh" <<JOB
#!/bin/bash
#SBATCH -N 4
#SBATCH --no-kill
set -uo pipefail
D=\$1
$nodebin/slurm-serve.sh --root /mnt/pmem0/haar-fail --port 7070 --replicas 2 --token-file $T \\
    --store-config /etc/haar/haar.yaml --config \$D/cluster.yaml -- bash $W/fail-clients.sh \$D
echo "JOB-END \$?"
JOB
    # shellcheck disable=SC2016
    on n1 bash -c "cat > $W/fail-clients.sh" <<'CLIENTS'
set -uo pipefail
D=$1
echo "SERVERS-UP $HAAR_SERVERS"
# The previous run's databases (verified by that run) are wiped now that the servers have
# restarted over them: without this a long run fills the node-local tier of n1, the node never
# killed (run 63 of the first 100-kill run: ENOSPC in a 1 GiB /mnt/pmem0).
run=${D##*-}
if [ "$run" -gt 1 ]; then
    prev=$(printf %04d $((run - 1)))
    if haar --config "$HAAR_CONFIG" --token-file "$(dirname "$D")/token" wipe --doit \
        "class=od,expver=$prev,stream=oper,date=20270101/20270102/20270103/20270104,time=0000,domain=g" \
        >/dev/null 2>/tmp/wipe-err; then
        echo "WIPED $prev"
    else
        echo "WIPE-FAILED $prev: $(tr '\n' ' ' < /tmp/wipe-err)"
    fi
fi
# --no-kill: the step goes on when a node of it fails (the producer there dies with it).
srun --overlap --no-kill -N4 --ntasks-per-node=1 bash "$(dirname "$D")/fail-producer.sh" "$D"
echo "PRODUCERS-EXIT $?"
exec bash "$(dirname "$D")/fail-verify.sh" "$D"
CLIENTS
    # shellcheck disable=SC2016
    on n1 bash -c "cat > $W/fail-producer.sh" <<PRODUCER
# One producer: a field per step, each archived and flushed by one haar process (as a model
# writes a step and flushes); retried on error (each error kept); a line in flushed.NODE once
# its flush returned.
set -uo pipefail
D=\$1
run=\${D##*-}
node=\$(hostname)
date=2027010\$((SLURM_NODEID + 1))
expver=\$(printf %04d "\$run")
for ((s = 0; s < 300; s++)); do
    [ -e "\$D/stop" ] && break
    key=class=od,expver=\$expver,stream=oper,time=0,domain=g,type=fc,levtype=sfc,date=\$date,step=\$s,param=167
    yes "\$key" | head -c \$(( (s % 7 + 1) * 9000 )) > /tmp/field
    tries=0
    until haar --config "\$HAAR_CONFIG" --token-file $T archive --key "\$key" /tmp/field 2>/tmp/err; do
        echo "ERROR \$node step \$s: \$(tr '\\n' ' ' < /tmp/err)" >> "\$D/errors.\$node"
        tries=\$((tries + 1))
        [ \$tries -lt 20 ] || { echo "GAVE-UP \$node step \$s" >> "\$D/errors.\$node"; exit 1; }
        sleep 0.2
    done
    echo "FLUSHED \$s \$key END" >> "\$D/flushed.\$node"
done
PRODUCER
    # shellcheck disable=SC2016
    on n1 bash -c "cat > $W/fail-verify.sh" <<VERIFY
# Every field any producer logged as flushed must retrieve byte-identical: one retrieve of
# every producer's date and step (--allow-missing: not every producer reached every step), each
# field of the output checked against bytes made again from its key (its first line), every
# logged field present exactly once. Fields read from a replica may come after the rest of the
# request (haar's dist retrieve), so the order is not checked.
set -uo pipefail
D=\$1
# Whole lines only (a node killed mid-append may leave a partial last line).
cat "\$D"/flushed.n* | grep '^FLUSHED [0-9]* [^ ]* END\$' > /tmp/lines
n=\$(wc -l < /tmp/lines)
dates=\$(grep -o 'date=[0-9]*' /tmp/lines | cut -d= -f2 | sort -u | paste -sd/)
steps=\$(seq -s/ 0 "\$(awk '{print \$2}' /tmp/lines | sort -n | tail -1)")
key=\$(head -1 /tmp/lines | awk '{print \$3}')
req=\$(tr ',' '\\n' <<<"\$key" | grep -v -e '^step=' -e '^domain=' -e '^date=' | paste -sd,),date=\$dates,step=\$steps
if haar --config "\$HAAR_CONFIG" --token-file $T retrieve --allow-missing "\$req" -o /tmp/got 2>/tmp/err \\
    && python3 $W/fail-check.py /tmp/lines /tmp/got; then
    echo "VERIFIED \$n LOST 0"
else
    echo "NOT-BYTE-IDENTICAL: \$(grep -v '^haar: missing' /tmp/err | tr '\\n' ' ')"
    echo "VERIFIED 0 LOST \$n"
fi
VERIFY
    on n1 bash -c "cat > $W/fail-check.py" <<'CHECK'
import sys
# The logged fields: key -> size (as the producer made them: the key repeated, (step % 7 + 1) * 9000 bytes).
want = {}
for line in open(sys.argv[1]):
    _, step, key, _ = line.split()
    want[key] = (int(step) % 7 + 1) * 9000
got = open(sys.argv[2], "rb").read()
seen, at = set(), 0
while at < len(got):
    key = got[at:got.index(b"\n", at)].decode()
    if key in seen:
        sys.exit(f"field {key!r} retrieved twice")
    # A field flushed but not yet logged when its producer's node died is checked as well.
    step = int(key.split("step=")[1].split(",")[0])
    size = want.get(key, (step % 7 + 1) * 9000)
    expected = ((key + "\n") * (size // (len(key) + 1) + 1)).encode()[:size]
    if got[at:at + size] != expected:
        sys.exit(f"{key}: bytes differ")
    seen.add(key)
    at += size
missing = set(want) - seen
if missing:
    sys.exit(f"{len(missing)} field(s) missing, e.g. {sorted(missing)[0]}")
CHECK
}

count_flushed() { # D NODE
    on n1 bash -c "cat $1/flushed.$2 2>/dev/null | grep -c ' END\$' || true"
}

# One run of the workflow with a node killed at a random moment (or none: victim "").
fail_run() {
    local r=$1 kill_node=$2 D=$W/fail-$1 jid
    on n1 mkdir -p "$D"
    jid=$(on n1 bash -c "cd $W && sbatch --parsable -J fail-$r -o $D/job.out $W/fail.sh $D") || fail "run $r: sbatch"
    # Every producer has flushed 2 fields: servers up, the workflow under way.
    local node deadline=$((SECONDS + 60))
    for node in n1 n2 n3 n4; do
        until [ "$(count_flushed "$D" $node)" -ge 2 ]; do
            [ $SECONDS -lt $deadline ] || fail "run $r: producer on $node did not flush 2 fields in 60 s: $(on n1 cat "$D/job.out" "$D/errors.$node" 2>&1 | tail -30)"
            sleep 0.2
        done
    done
    local victim='' held=0
    if [ "$kill_node" = 1 ]; then
        # The victim: a node other than n1 (the batch host) that holds fields of this run.
        local cands=() c h
        for c in n2 n3 n4; do
            h=$(on n1 haar --servers "$c:7070" --token-file $T list "class=od,expver=$(printf %04d "$r")" 2>/dev/null | grep -c 'step=' || true)
            [ "$h" -gt 0 ] && cands+=("$c")
        done
        [ ${#cands[@]} -gt 0 ] || cands=(n2 n3 n4)
        victim=${cands[RANDOM % ${#cands[@]}]}
        sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
        held=$(on n1 haar --servers "$victim:7070" --token-file $T list "class=od,expver=$(printf %04d "$r")" 2>/dev/null | grep -c 'step=' || true)
        local before=()
        for node in n1 n2 n3 n4; do before+=("$(count_flushed "$D" $node)"); done
        "$V" kill "$victim"
        local t_kill=$SECONDS
        # Slurm sees it down.
        until on n1 sinfo -h -n "$victim" -o %T | grep -q '^down'; do
            [ $((SECONDS - t_kill)) -lt 40 ] || fail "run $r: Slurm did not mark $victim down within 40 s: $(on n1 sinfo -N)"
            sleep 0.5
        done
        on n1 scontrol show node "$victim" | grep -q 'State=DOWN' || fail "run $r: scontrol show node $victim: not DOWN"
        local down_s=$((SECONDS - t_kill))
        # The other producers fail over: 2 more fields flushed each.
        local i=0
        for node in n1 n2 n3 n4; do
            if [ "$node" != "$victim" ]; then
                until [ "$(count_flushed "$D" $node)" -ge $((before[i] + 2)) ]; do
                    [ $((SECONDS - t_kill)) -lt 90 ] || fail "run $r: producer on $node flushed nothing more after $victim was killed: $(on n1 tail -3 "$D/errors.$node" 2>&1)"
                    sleep 0.2
                done
            fi
            i=$((i + 1))
        done
        # A client that needs the dead node names it: a list over every server without
        # replicas must fail, saying which server is gone.
        local err
        if err=$(on n1 haar --servers n1:7070,n2:7070,n3:7070,n4:7070 --token-file $T list "class=od,expver=$(printf %04d "$r")" 2>&1 >/dev/null); then
            fail "run $r: a list over all servers without replicas succeeded with $victim dead"
        fi
        grep -q "$victim:7070" <<<"$err" || fail "run $r: the error of a client reaching $victim does not name it: $err"
        say "run $r: killed $victim (held $held fields of the run); DOWN in Slurm after ${down_s} s; others went on after $((SECONDS - t_kill)) s"
    else
        sleep 1
    fi
    on n1 touch "$D/stop"
    local t_stop=$SECONDS
    for _ in $(seq 600); do
        [ -z "$(on n1 squeue -h -j "$jid" -o %T 2>/dev/null)" ] && break
        sleep 0.2
    done
    local out
    out=$(on n1 cat "$D/job.out")
    grep -q '^VERIFIED' <<<"$out" || fail "run $r: no verification (job $jid $(job_state "$jid")): $(tail -20 <<<"$out")"
    local verified lost
    read -r verified lost < <(grep '^VERIFIED' <<<"$out" | awk '{print $2, $4}')
    [ "$lost" = 0 ] || fail "run $r: $lost flushed field(s) not retrieved byte-identical (victim $victim): $(grep -v '^FLUSHED' <<<"$out" | tail -10)"
    [ "$verified" -ge 8 ] || fail "run $r: only $verified fields verified"
    if [ -n "$victim" ]; then
        # Errors a producer met (a field in flight on the dead server) name it.
        local errs
        errs=$(on n1 bash -c "cat $D/errors.n* 2>/dev/null" || true)
        if [ -n "$errs" ]; then
            grep -v "$victim" <<<"$errs" | grep -q . && fail "run $r: a producer error does not name $victim: $(grep -v "$victim" <<<"$errs" | head -3)"
        fi
        local t_rev=$SECONDS
        "$V" revive "$victim"
        wait_idle_all
        wait_runs_task "$victim"
        say "run $r: job ended $((t_rev - t_stop)) s after the stop; $victim back in service in $((SECONDS - t_rev)) s"
        KILL_LOG+=("$r $victim held=$held verified=$verified lost=$lost errors=$(grep -c . <<<"$errs" || true)")
    else
        grep -q '^JOB-END 0' <<<"$out" || fail "run $r (no kill): the job did not end well: $(tail -5 <<<"$out")"
        grep -q '^PRODUCERS-EXIT 0' <<<"$out" || fail "run $r (no kill): a producer failed: $(on n1 bash -c "cat $D/errors.n*" 2>&1 | tail -5)"
    fi
    RUN_VERIFIED=$verified
}

wait_idle_all() {
    for _ in $(seq 150); do
        [ "$(on n1 sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 4 ] && return 0
        sleep 0.2
    done
    fail "not every node idle 30 s after revive: $(on n1 sinfo -N)"
}

# Back in service means it runs a task: Slurm may show a node idle a moment before a step
# can be launched on it (its slurmd has just registered). The first failure is printed.
wait_runs_task() {
    local node=$1 err='' first=''
    for _ in $(seq 30); do
        if err=$(on n1 timeout 10 srun -N 1 -w "$node" --time=1 true 2>&1); then
            [ -z "$first" ] || say "$node: a task first failed to start after the revive: $first"
            return 0
        fi
        [ -n "$first" ] || first=$(tr '\n' ' ' <<<"$err")
        sleep 1
    done
    fail "$node runs no task 30 s after its revive: $err"
}

KILL_LOG=()
test_kills() {
    local k=$1 r total=0
    write_fail_scripts
    for ((r = 1; r <= k; r++)); do
        fail_run "$r" 1
        total=$((total + RUN_VERIFIED))
    done
    # The re-run after the last kill, on all 4 nodes, nothing killed.
    fail_run $((k + 1)) 0
    pass "node failure x$k: 0 of $total flushed fields lost; Slurm marked each victim DOWN; clients failed over; errors name the node; every re-run completed (last: $RUN_VERIFIED fields)"
    printf '    %s\n' "${KILL_LOG[@]}" >&2
}

want slurm && test_slurm
want stage && test_stage
if want serve || want mount; then test_serve_mount "$(want mount && echo 1 || echo 0)"; fi
want table9 && test_table9
if want kill; then test_kills "$kills"; fi
