#!/usr/bin/env python3
"""Markdown sections for docs/benchmarks.md from bench/compare.sh's JSON files.

usage: render_compare.py FIELDS SIZE "SHAPE ARGS"   (run by bench/compare.sh; prints to stdout)
"""
import json
import os
import sys

# The result files compare.sh writes (JSON, plots, the STREAM session notes).
RESULTS = os.path.join(os.path.dirname(__file__), "results")


def load(name):
    path = os.path.join(RESULTS, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # a harness that printed more than its JSON line
        return json.loads(text.splitlines()[-1])


def gib(x):
    return f"{x:.2f}"


def main():
    fields, size, shape = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    out = []
    out.append("\n## Hammer: the same fdb-hammer-style load through haar and the real FDB5\n")
    out.append(
        f"{fields} fields of {size // 1024} KiB ({fields * size / 2**30:.2f} GiB), "
        f"`haar hammer {shape}`: one flush per step per writer process; reads retrieve one "
        "field per call and verify header, key and checksum. Written by `bench/compare.sh`.\n"
    )
    out.append("| system | procs | write GiB/s | archive p50 / p99 µs | flush p50 µs | read GiB/s | retrieve p50 / p99 µs |")
    out.append("|---|---|---|---|---|---|---|")
    rows = {}
    for name, label in [
        ("haar-pmem", "haar pmem (local, /dev/shm)"),
        ("haar-dist", "haar dist, 3 local servers (pmem; reads same-host)"),
        ("fdb5", "FDB5 C API (`haar hammer --fdb5`)"),
    ]:
        for procs in (1, 2):
            w = load(f"hammer-{name}-write-p{procs}.json")
            r = load(f"hammer-{name}-read-p{procs}.json")
            if not w or not r:
                continue
            rows[(name, procs)] = (w, r)
            wl, rl = w["op_latency"], r["op_latency"]
            out.append(
                f"| {label} | {procs} | {gib(w['gib_per_s'])} | {wl['p50_us']:.0f} / {wl['p99_us']:.0f} | "
                f"{w['flush_latency']['p50_us']:.0f} | {gib(r['gib_per_s'])} | {rl['p50_us']:.0f} / {rl['p99_us']:.0f} |"
            )
    cw = load("hammer-fdb5-c-harness-write.json")
    cr = load("hammer-fdb5-c-harness-read.json")
    if cw and cr:
        out.append(
            f"| FDB5 C harness (`bench/fdb5_peer`, {cw.get('fdb5_version', '?')}) | 1 | {gib(cw['gib_per_s'])} | "
            f"per flush interval {cw['p50_us']:.0f} / {cw['p99_us']:.0f} | - | {gib(cr['gib_per_s'])} | "
            f"{cr['p50_us']:.0f} / {cr['p99_us']:.0f} |"
        )
    out.append("\nRatios measured in this run (target: hammer write through haar ≥ 3× FDB5's C API):\n")
    for procs in (1, 2):
        if ("haar-pmem", procs) in rows and ("fdb5", procs) in rows:
            hw, hr = rows[("haar-pmem", procs)]
            fw, fr = rows[("fdb5", procs)]
            ratios = [hw["gib_per_s"] / fw["gib_per_s"]]
            for r in (2, 3):
                h, f = load(f"hammer-haar-pmem-write-p{procs}-r{r}.json"), load(f"hammer-fdb5-write-p{procs}-r{r}.json")
                if h and f:
                    ratios.append(h["gib_per_s"] / f["gib_per_s"])
            rounds = ", ".join(f"{x:.1f}×" for x in ratios)
            med = sorted(ratios)[len(ratios) // 2]
            out.append(
                f"- {procs} process(es): haar pmem write **{med:.1f}×** FDB5, median of {len(ratios)} back-to-back "
                f"rounds ({rounds}); read **{hr['gib_per_s'] / fr['gib_per_s']:.1f}×** FDB5."
            )
    for procs in (1, 2):
        if ("haar-pmem", procs) in rows and ("fdb5", procs) in rows:
            hw, fw = rows[("haar-pmem", procs)][0], rows[("fdb5", procs)][0]
            if "provision_s" in hw:
                out.append(
                    f"- {procs} process(es), counting the pool's provisioning ({hw['provision_s']:.2f} s before "
                    f"the start barrier: file grown, pages allocated): "
                    f"haar {hw['gib_per_s_with_provision']:.2f} GiB/s = "
                    f"**{hw['gib_per_s_with_provision'] / fw['gib_per_s']:.2f}×** FDB5 (whose page allocation "
                    "happens inside its timed writes). A pool is provisioned once, as a pmem namespace is."
                )
    if ("haar-pmem", 1) in rows and cw:
        out.append(
            f"- haar pmem write (1 process) vs the FDB5 C harness: "
            f"**{rows[('haar-pmem', 1)][0]['gib_per_s'] / cw['gib_per_s']:.1f}×**; read "
            f"**{rows[('haar-pmem', 1)][1]['gib_per_s'] / cr['gib_per_s']:.1f}×**."
        )
    for key in [("haar-pmem", 2), ("haar-dist", 2)]:
        if key in rows and "raw_limits" in rows[key][0]:
            w = rows[key][0]
            lim, rat = w["raw_limits"], w["ratio_to"]
            out.append(
                f"- {key[0]} write ({key[1]} procs) {w['gb_per_s']:.2f} GB/s = "
                f"{100 * rat['memcpy']:.0f}% of memcpy ({lim['memcpy_gbs']:.2f} GB/s), "
                f"{100 * rat['nt_copy']:.0f}% of NT copy ({lim['nt_copy_gbs']:.2f}), "
                f"{100 * rat['write']:.0f}% of write(2) ({lim['write_gbs']:.2f}), "
                f"{100 * rat['loopback_tcp']:.0f}% of loopback TCP ({lim['loopback_tcp_gbs']:.2f}), "
                "limits measured in the same run."
            )

    for name, title in [
        ("workflow.json", "the default (`make run`)"),
        ("workflow-10x100.json", "the delivery-latency target's shape"),
    ]:
        out.extend(workflow_section(load(name), name, title))
    out.extend(stream_section())
    print("\n".join(out))


def workflow_section(wf, name, title):
    """One `haar workflow` run as a table."""
    if not wf:
        return []
    l = wf["layout"]
    png = name.replace(".json", ".png")
    floor = wf.get("product_floor_ms")
    out = ["\n## Workflow, " + title + ": producers and product generation (SC'19 Table 9 in miniature)\n"]
    out.append(
        f"`haar workflow`: {l['members']} members × {l['steps']} steps × {l['levels'] * l['params']} fields of "
        f"{l['field_size'] // 1024} KiB ({wf['volume_bytes_per_run'] / 2**30:.2f} GiB per run), "
        f"{wf['consumers']} consumers, {wf['compute_ms']} ms model time per step; each backend "
        f"run alone and with consumers on fresh stores. Figures: `bench/results/{name}`, plot: `bench/results/{png}`.\n"
    )
    out.append("| storage | producers alone s | with PGEN s | slowdown | I/O slowdown | product p50 / p99 ms | p50 ÷ floor | trigger p50 / p99 ms | consumer polls |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for b in wf["backends"]:
        a, w = b["alone"], b["with_consumers"]
        pct = lambda x: "-" if x is None else f"{100 * x:+.1f}%"
        ratio = b.get("step_latency_p50_over_floor")
        out.append(
            f"| {b['describe']} | {a['producer_wall_s']:.2f} | {w['producer_wall_s']:.2f} | "
            f"{pct(b['producer_slowdown'])} | {pct(b['producer_io_slowdown'])} | "
            f"{b['step_latency_p50_ms']:.0f} / {b['step_latency_p99_ms']:.0f} | "
            f"{'-' if ratio is None else f'{ratio:.1f}×'} | "
            f"{b['trigger_latency_p50_ms']:.1f} / {b['trigger_latency_p99_ms']:.1f} | {w['polls']} |"
        )
    out.append(
        "\nslowdown: producers' wall time with consumers ÷ alone − 1 (target for haar: ≤ 5%); I/O "
        "slowdown: the same for their archive+flush time. product: last member's flush of a step → "
        "all its products flushed (target p50 < 100 ms at 10 members × 100 fields of 800 KiB); "
        "trigger: → every consumer knows the step is complete. Every member field was delivered "
        "exactly once and every product checked against values recomputed from the members' seeds."
    )
    if floor:
        out.append(
            f"\nfloor: {floor:.0f} ms, measured first in the same run — the consumers' computation alone for "
            f"one step ({l['members']} × {l['levels'] * l['params']} member fields reduced, "
            f"{2 * l['levels'] * l['params']} products packed, {wf['consumers']} threads), fields already in "
            "memory, no store. No store can deliver a step faster on this machine.\n"
        )
    return out


def stream_section():
    """The STREAM figures (haar stream beside the reference), from bench/results/benchmarks-stream.md."""
    path = os.path.join(RESULTS, "benchmarks-stream.md")
    if not os.path.exists(path):
        return []
    lines = open(path).read().splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("| kernel | reference"))
    except StopIteration:
        return []
    table = []
    for l in lines[start:]:
        if not l.startswith("|"):
            break
        table.append(l)
    return [
        "\n## Memory bandwidth: `haar stream` beside the reference STREAM\n",
        "`HAAR=target/release/haar bench/stream-compare.sh` runs `haar stream` and `bench/stream_ref.c` "
        "(McCalpin's STREAM 5.10 rules) alternately in one session, 143 MiB arrays (4× the L3), 2 pinned "
        "threads, best of 5 rounds, MB/s (from the session that wrote bench/results/benchmarks-stream.md, where "
        "the machine, the sweep plot and every command are):\n",
        *table,
    ]


if __name__ == "__main__":
    main()
