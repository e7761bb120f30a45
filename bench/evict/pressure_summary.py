#!/usr/bin/env python3
"""Summarise bench/evict/pressure.sh: per workload and configuration, who
acted first, how long after stall onset (the node's /proc/pressure/memory
and the stalling pod's memory.pressure: `full` >= 10 % of 2 s within 2 s),
what died, the probe pod's lateness, over every run of the given files.
Writes pressure-summary.json beside the first and prints a Markdown table.

usage: pressure_summary.py RESULTS.jsonl...
"""
import json
import os
import sys


def med(v):
    v = sorted(v)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def fmt(v, unit=""):
    v = [x for x in v if x is not None]
    if not v:
        return "–"
    if len(v) == 1:
        return f"{v[0]:.0f}{unit}"
    return f"{med(v):.0f} ({min(v):.0f}–{max(v):.0f}){unit}"


def main():
    paths = sys.argv[1:]
    runs = []
    for path in paths:
        # qosd's --node-memory: MemTotal unless the run's log says otherwise
        # (NODE_MEM=available: what was left after boot)
        tag = ""
        try:
            for line in open(path.rsplit(".", 1)[0] + ".log"):
                f = line.split()
                if line.startswith("INFO systemd") and "node_memory_kib" in f:
                    if f[f.index("node_memory_kib") + 1] != f[f.index("memtotal_kib") + 1]:
                        tag = " (node = MemAvailable)"
        except OSError:
            pass
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                r["workload"] += tag
                runs.append(r)
    groups = {}
    for r in runs:
        groups.setdefault((r["workload"], r["config"]), []).append(r)
    doc, rows = [], []
    for (wl, cfg), rs in groups.items():
        actors, after_node, after_pod, onset_node, p99, died = {}, [], [], [], [], []
        right = 0
        for r in rs:
            w = r["watch"]
            node, pod = w["files"][0], w["files"][1]
            actor = r["first_actor"] if w["died"] else "none"
            # systemd-oomd's kill line is below the VM's log level
            # (systemd.log_level=warning): a SIGKILL with systemd-oomd
            # running and nothing else acting is its kill.
            if actor == "none" and w["died"] and r["config"].startswith("oomd") and r["staller_exit"] == 137:
                actor = "systemd-oomd"
            if w["died"] and actor == "none":
                actor = "unattributed exit"
            actors[actor] = actors.get(actor, 0) + 1
            if node["onset_ms"] is not None:
                onset_node.append(node["onset_ms"])
            if w["died"]:
                died.append("staller")
                if node["onset_ms"] is not None:
                    after_node.append(w["died_ms"] - node["onset_ms"])
                if pod["onset_ms"] is not None:
                    after_pod.append(w["died_ms"] - pod["onset_ms"])
            for who, alive in (("probe", r["probe_alive"]), ("bystander", r["bystander_alive"])):
                if not alive:
                    died.append(who)
            if w["died"] and r["probe_alive"] and r["bystander_alive"]:
                right += 1
            if r["probe"].get("p99_ms") is not None:
                p99.append(r["probe"]["p99_ms"])
        rec = {"workload": wl, "config": cfg, "runs": len(rs), "first_actor": actors,
               "node_onset_ms": onset_node, "kill_after_node_onset_ms": after_node,
               "kill_after_pod_onset_ms": after_pod, "probe_p99_ms": p99,
               "staller_killed_alone": right, "died": died,
               "timeout_ms": sorted({r["timeout_ms"] for r in rs})}
        doc.append(rec)
        who = ", ".join(f"{k} {v}" for k, v in sorted(actors.items(), key=lambda x: -x[1]))
        if actors.get("none") == len(rs):
            who = f"none in {rs[0]['timeout_ms'] // 1000} s"
        rows.append(f"| {wl} | {cfg} | {len(rs)} | {who} | {fmt(onset_node)} | {fmt(after_node)} | "
                    f"{fmt(after_pod)} | {right}/{len(rs)} | {fmt(p99)} |")
    doc = {"files": [os.path.basename(p) for p in paths], "groups": doc}
    json.dump(doc, open(os.path.join(os.path.dirname(paths[0]), "pressure-summary.json"), "w"), indent=1)
    print("| workload | config | n | acted first | stall onset after start, ms (node) | kill after onset, ms (node) | kill after onset, ms (pod) | staller killed, probe and bystander alive | probe p99 lateness, ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
