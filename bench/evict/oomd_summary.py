#!/usr/bin/env python3
"""Summarise bench/evict/systemd-oomd.sh: who acted first, how long after
the sampled crossing of the line, and which process died, per config and
ramp. Reads OUT/oomd-vm-<config>.jsonl, writes OUT/oomd-summary.json and
prints a Markdown table (the one in bench/results/HISTORY.md section 6).

usage: oomd_summary.py [OUT]   (default bench/results)
"""
import json
import os
import sys

CONFIGS = ["qosd", "oomd-default", "oomd-tuned", "earlyoom", "kernel-oom"]


def pct(v, p):
    if not v:
        return None
    v = sorted(v)
    k = max(0, min(len(v) - 1, int(-(-len(v) * p // 100)) - 1))
    return v[k]


def fmt(v):
    if not v:
        return "–"
    med = sorted(v)[len(v) // 2] if len(v) % 2 else (sorted(v)[len(v) // 2 - 1] + sorted(v)[len(v) // 2]) / 2
    return f"{med:.1f} / {pct(v, 99):.1f} ({min(v):.1f}–{max(v):.1f})"


def act(cfg, r):
    """(who, ms after the sampled crossing) of the first action on the hog."""
    k = r.get("killer")
    if cfg == "earlyoom":
        who = "kernel-oom" if r.get("oom_first") else ("earlyoom" if r.get("killer", "").startswith("sig") else r.get("killer"))
        return who, r.get("signal_after_sampled_ms")
    if k == "qosd":
        return "qosd", r.get("kill_after_sampled_ms")
    if k == "kernel-oom":
        return "kernel-oom", r.get("oom_after_sampled_ms")
    if k == "external":
        return "systemd-oomd", r.get("exit_after_sampled_ms")
    return k or "none", None


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    rows, doc = [], {}
    for cfg in CONFIGS:
        path = os.path.join(out, f"oomd-vm-{cfg}.jsonl")
        runs = []
        try:
            for line in open(path):
                line = line.strip()
                if line:
                    runs += json.loads(line).get("runs", [])
        except (OSError, json.JSONDecodeError) as e:
            print(f"{cfg}: {e}", file=sys.stderr)
            continue
        by_rate = {}
        for r in runs:
            by_rate.setdefault(r["rate_mib_s"], []).append(r)
        for rate in sorted(by_rate):
            rs = by_rate[rate]
            whos, times = {}, []
            for r in rs:
                who, ms = act(cfg, r)
                whos[who] = whos.get(who, 0) + 1
                if ms is not None:
                    times.append(ms)
            died_right = sum(1 for r in rs if r.get("victim_correct", r.get("victim_ok", False)) or (cfg == "earlyoom" and r.get("victim_is_hog")))
            bys_killed = sum(1 for r in rs if r.get("bystander_alive") is False)
            rec = {"config": cfg, "rate_mib_s": rate, "runs": len(rs), "first_actor": whos,
                   "act_after_sampled_ms": times, "right_process_died": died_right,
                   "bystander_killed": bys_killed}
            doc.setdefault(cfg, []).append(rec)
            who_s = ", ".join(f"{k} {v}" for k, v in sorted(whos.items(), key=lambda x: -x[1]))
            died = f"{died_right}/{len(rs)}" if cfg != "earlyoom" else "see log"
            rows.append(f"| {cfg} | {rate} | {len(rs)} | {who_s} | {fmt(times)} | {died} | {bys_killed} |")
    json.dump(doc, open(os.path.join(out, "oomd-summary.json"), "w"), indent=1)
    print("| config | ramp MiB/s | n | acted first | action after sampled crossing, ms (median / p99 (min–max)) | hog died, bystander alive | bystander killed |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
