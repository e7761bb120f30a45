#!/usr/bin/env python3
"""Merge the per-invocation JSON documents of bench/evict/run.sh into one
summary per configuration and ramp: median, p99 (nearest rank; with fewer
than 100 runs that is the largest run), min, max; who killed first and
whether the right pod died. Usage: summarize.py RESULTS_DIR"""
import glob
import json
import os
import sys


def stats(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    rank = lambda p: v[min(len(v) - 1, round(p / 100 * (len(v) - 1)))]
    return {"n": len(v), "median": rank(50), "p99": rank(99), "min": v[0], "max": v[-1]}


def main(d):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "evict-*.jsonl"))):
        cfg = os.path.basename(f)[len("evict-"):-len(".jsonl")]
        runs, meta = [], None
        for line in open(f):
            line = line.strip()
            if not line:
                continue
            doc = json.loads(line)
            meta = {k: v for k, v in doc.items() if k not in ("summary", "runs", "failures")}
            runs += doc.get("runs", [])
        by_rate = {}
        for r in runs:
            by_rate.setdefault(r["rate_mib_s"], []).append(r)
        rows = []
        for rate, rs in sorted(by_rate.items()):
            col = lambda k: [r.get(k) for r in rs]
            row = {"rate_mib_s": rate, "runs": len(rs),
                   "achieved_mib_s": stats(col("achieved_mib_s"))}
            if meta and meta.get("mode") == "meminfo-race":
                row.update({
                    "signal_ms": stats(col("signal_ms")),
                    "signal_after_sampled_ms": stats(col("signal_after_sampled_ms")),
                    "released_ms": stats(col("released_ms")),
                    "sampler_cross_lag_ms": stats(col("sampler_cross_lag_ms")),
                    "killers": {k: sum(1 for r in rs if r["killer"] == k) for k in {r["killer"] for r in rs}},
                    "oom_first": sum(1 for r in rs if r["oom_first"]),
                })
            else:
                row.update({
                    "kill_ms": stats(col("kill_ms")),
                    "kill_after_sampled_ms": stats(col("kill_after_sampled_ms")),
                    "released_ms": stats(col("released_ms")),
                    "oom_ms": stats(col("oom_ms")),
                    "oom_after_sampled_ms": stats(col("oom_after_sampled_ms")),
                    "killer_qosd": sum(1 for r in rs if r["killer"] == "qosd"),
                    "killer_kernel_oom": sum(1 for r in rs if r["killer"] == "kernel-oom"),
                    "runs_with_oom_kill": sum(1 for r in rs if r["oom_kills"] > 0),
                    "victim_correct": sum(1 for r in rs if r["victim_correct"]),
                    "eventfd_wakes": sum(1 for r in rs if r.get("wake") == "eventfd"),
                })
            rows.append(row)
        out[cfg] = {"meta": meta, "rates": rows}
    json.dump(out, sys.stdout, indent=1)
    print()




def fmt(x):
    if not x:
        return "–"
    return f"{x['median']:.1f} / {x['p99']:.1f} ({x['min']:.1f}–{x['max']:.1f})"


def markdown(d):
    """Tables for BENCHMARKS.md and bench/results/HISTORY.md: median / p99 (min–max), ms."""
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(d)
    s = json.loads(buf.getvalue())
    for cfg, v in s.items():
        rows = v["rates"]
        print(f"\n**{cfg}** (n per ramp: {', '.join(str(r['runs']) for r in rows)})\n")
        if v["meta"] and v["meta"].get("mode") == "meminfo-race":
            print("| ramp asked | achieved | signal after crossing (reconstructed) | signal after sampled crossing | memory back | killer | kernel OOM first |")
            print("|---|---|---|---|---|---|---|")
            for r in rows:
                ach = r.get("achieved_mib_s")
                killers = ", ".join(f"{k} {n}" for k, n in sorted(r["killers"].items()))
                print(f"| {r['rate_mib_s']} | {ach['median']:.0f} | " if ach else f"| {r['rate_mib_s']} | – | ", end="")
                print(f"{fmt(r['signal_ms'])} | {fmt(r['signal_after_sampled_ms'])} | {fmt(r['released_ms'])} | {killers} | {r['oom_first']}/{r['runs']} |")
        else:
            print("| ramp asked | achieved | kill issued (reconstructed) | kill issued after sampled crossing | memory back | OOM kill seen | killer qosd / kernel | right pod died |")
            print("|---|---|---|---|---|---|---|---|")
            for r in rows:
                ach = r.get("achieved_mib_s")
                print(f"| {r['rate_mib_s']} | {ach['median']:.0f} | " if ach else f"| {r['rate_mib_s']} | – | ", end="")
                print(f"{fmt(r['kill_ms'])} | {fmt(r['kill_after_sampled_ms'])} | {fmt(r['released_ms'])} | {fmt(r['oom_ms'])} | "
                      f"{r['killer_qosd']} / {r['killer_kernel_oom']} | {r['victim_correct']}/{r['runs']} |")


if __name__ == "__main__":
    if sys.argv[1] == "--md":
        markdown(sys.argv[2])
    else:
        main(sys.argv[1])
