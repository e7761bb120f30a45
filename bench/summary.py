#!/usr/bin/env python3
"""Print a summary of qosd benchmark results (bench/results/*.json).

  bench/summary.py [FILE...]   # default: the newest file of each part
"""
import glob
import json
import os
import sys

GOALS = {
    "plan_10000_ms": 100.0,
    "idle_cpu_percent": 0.1,  # issue 17 (was 0.2)
    "rss_mib": 16.0,
}


def rng(s, unit="", fmt="{:.1f}"):
    if not s:
        return "n/a"
    f = lambda x: fmt.format(x)
    return f"{f(s['median'])}{unit} (range {f(s['min'])}–{f(s['max'])}, n={s['n']})"


def verdict(ok):
    return "goal met" if ok else "GOAL MISSED"


def plan(r):
    for row in r["results"]:
        line = (f"  plan {row['pods']:>6} pods {row['cgroup_version']} {row['driver']:<8}: "
                f"wall {row['wall_ms_median_of_round_medians']:.2f} ms median "
                f"(range {row['wall_ms_min']:.2f}–{row['wall_ms_max']:.2f}), "
                f"thread CPU {row['thread_cpu_ms_median']:.2f} ms, {row['writes']} writes")
        if row["pods"] == 10000:
            line += f"  [{verdict(row['wall_ms_median_of_round_medians'] < GOALS['plan_10000_ms'])}: < 100 ms]"
        print(line)


def reconcile(r):
    for row in r["results"]:
        for side in ("first_pass", "steady"):
            s = row[side]
            w = s["writes"]
            print(f"  reconcile {row['pods']:>3} pods {side:<10}: wall {rng(s['wall_ms'], ' ms')}, "
                  f"CPU {rng(s['cpu_ms'], ' ms')}, "
                  f"writes {min(w)}–{max(w)}, errors {s['errors']}")
        ip = row.get("in_process")
        if ip:
            for k in ("list", "list_uncached", "steady_full_reconcile", "reconcile_first_pass", "reconcile_steady", "reconcile_steady_watched"):
                if k not in ip:
                    continue
                w = ip[k].get("writes")
                print(f"  in-process {row['pods']:>3} pods {k:<21}: wall {rng(ip[k]['wall_ms'], ' ms', '{:.2f}')}, "
                      f"CPU {rng(ip[k]['cpu_ms'], ' ms', '{:.2f}')}" + (f", writes {min(w)}–{max(w)}" if w else ""))
        ok = all(x == 0 for x in row["steady"]["writes"])
        print(f"  reconcile {row['pods']:>3} pods steady writes: {verdict(ok)} (0)")
        e = row["exec_baseline_version"]
        print(f"  exec baseline (qosd --version): wall {rng(e['wall_ms'], ' ms')}, CPU {rng(e['cpu_ms'], ' ms')}")


def footprint(r):
    # utime+stime of the whole process (ticks) is the figure; schedstat
    # (every thread's run time, ns) cross-checks it.
    cpu = r["cpu_percent_of_one_core_total_ticks"]
    mib = r["vm_rss_kib_end"] / 1024
    hwm = r["vm_hwm_kib"] / 1024
    print(f"  footprint {r['pods']} pods, {r['duration_s']} s: CPU {cpu:.3f} % of one core "
          f"(per 60 s window {rng(r['cpu_percent_per_window_ticks'], ' %', '{:.3f}')}; schedstat {r['cpu_percent_of_one_core_total_schedstat']:.3f} %) "
          f"[{verdict(cpu < GOALS['idle_cpu_percent'])}: < {GOALS['idle_cpu_percent']} %]")
    eo = r.get("earlyoom")
    if eo:
        e = eo["cpu_percent_of_one_core_total_ticks"]
        print(f"  footprint earlyoom beside it ({eo['args']}): CPU {e:.4f} % [{verdict(cpu <= e)}: qosd <= earlyoom]")
    print(f"  footprint VmRSS {mib:.1f} MiB, VmHWM {hwm:.1f} MiB, {r['threads']} threads "
          f"[{verdict(max(mib, hwm) < GOALS['rss_mib'])}: < 16 MiB]; "
          f"{r['reconciles_during']} reconciles, {r['cgroup_writes_during']} writes during the window")


def startup(r):
    print(f"  startup {r['pods']} pods cold (first pass writes): {rng(r['cold_exec_to_ready_ms'], ' ms')}")
    print(f"  startup {r['pods']} pods warm (restart, no writes):  {rng(r['warm_exec_to_ready_ms'], ' ms')}")
    if "warm_nofile_exec_to_ready_ms" in r:
        print(f"  startup {r['pods']} pods warm without the status cache file: {rng(r['warm_nofile_exec_to_ready_ms'], ' ms')}, "
              f"CPU {rng(r['warm_nofile_cpu_ms_at_ready'], ' ms', '{:.1f}')}")
    b = r.get("baseline")
    if b:
        print(f"  startup baseline cold {rng(b['cold_exec_to_ready_ms'], ' ms')}, warm {rng(b['warm_exec_to_ready_ms'], ' ms')}")
        if "warm_file_exec_to_ready_ms" in b:
            print(f"  startup baseline warm with its status cache file {rng(b['warm_file_exec_to_ready_ms'], ' ms')}")
    print(f"  startup CPU at ready: cold {rng(r['cold_cpu_ms_at_ready'], ' ms', '{:.1f}')}, "
          f"warm {rng(r['warm_cpu_ms_at_ready'], ' ms', '{:.1f}')}; VmHWM {rng(r['vm_hwm_kib_at_ready'], ' KiB', '{:.0f}')}")


def churn(r):
    print(f"  churn {r['pods']} pods, {r['duration_s']} s: {r['created_per_s']:.2f} created + {r['removed_per_s']:.2f} removed per s "
          f"(asked {r['rate_asked_per_s']}); missed {r['missed_pods_not_enforced_within_10s']} "
          f"[{verdict(r['missed_pods_not_enforced_within_10s'] == 0)}: 0]")
    p99 = r.get("pod_running_to_values_p99_ms")
    print(f"  churn pod running -> values: {rng(r['pod_running_to_values_ms'], ' ms')}, p99 {p99} ms "
          f"[{verdict(p99 is not None and p99 < 1000)}: < 1 s]")
    print(f"  churn VmRSS {r['vm_rss_kib_start'] / 1024:.1f} -> {r['vm_rss_kib_end'] / 1024:.1f} MiB (max {r['vm_rss_kib_max'] / 1024:.1f}, "
          f"slope {r['vm_rss_kib_per_hour_slope_second_half'] / 1024:+.2f} MiB/h) [{verdict(r['vm_rss_kib_max'] / 1024 < GOALS['rss_mib'])}: < 16 MiB]; "
          f"fds {r['fds_start']} -> {r['fds_end']} (max {r['fds_max']})")
    if "vm_rss_kib_per_hour_slope_whole_run" in r:
        # The held live set (bench/run.sh churn since 2026-11-26).
        print(f"  churn RSS slope over the whole run {r['vm_rss_kib_per_hour_slope_whole_run'] / 1024:+.2f} MiB/h; "
              f"fds {r['fds_min']}-{r['fds_max']}; pods in the runtime {rng(r['pods_in_runtime'], '')}, "
              f"qosd_pods {rng(r['qosd_pods'], '')}, pod cgroups {rng(r['pod_cgroups'], '')}, "
              f"inotify watches {rng(r['inotify_watches_total'], '')}; load {rng(r['load1'], '', '{:.1f}')}")
        print(f"  churn creations not started: {r['creations_not_started']}")
    if "errors_during_by_kind" in r:
        print(f"  churn errors by kind: {r['errors_during_by_kind']}")


def e2e(r):
    # qosd's own reaction (exact values from /status, the ones observed
    # into qosd_eviction_reaction_seconds) and the bench's cross-check
    # (sampled crossing of kubepods usage -> the hog seen exiting).
    for m in r["modes"]:
        h = m["histogram"]
        print(f"  e2e {m['mode']:<7}: histogram n={h['count']:.0f}, p50 bucket <= {h['p50_bucket_ms']} ms, "
              f"p99 bucket <= {h['p99_bucket_ms']} ms; kernel OOM kills {m['kernel_oom_kills_in_kubepods']}")
        for x in m["rates"]:
            p99 = x["qosd_reaction_ms_p99"]
            ext = x["sampled_cross_to_hog_exiting_ms_p99"]
            print(f"  e2e {m['mode']:<7} {x['rate_mib_s']:>4} MiB/s: qosd reaction {rng(x['qosd_reaction_ms'], ' ms', '{:.2f}')}, p99 {p99} ms "
                  f"[{verdict(p99 is not None and p99 <= 10)}: <= 10 ms]; crossing -> hog exiting {rng(x['sampled_cross_to_hog_exiting_ms'], ' ms', '{:.1f}')}, "
                  f"p99 {ext} ms; evicted the hog {x['evicted_the_hog']}/{x['runs']}")
            # Since the reaction starts at the first read that showed the
            # crossing: the gap to that source's previous read bounds what
            # the reaction cannot see (reaction + gap >= the real span).
            rows = [r for r in x.get("rows", []) if r.get("detection_gap_ms") is not None
                    and r.get("reaction_ms_qosd") is not None]
            if rows:
                by = sorted({r.get("detected_by") or "?" for r in rows})
                gaps = sorted(r["detection_gap_ms"] for r in rows)
                bound = sorted(r["reaction_ms_qosd"] + r["detection_gap_ms"] for r in rows)
                print(f"  e2e {m['mode']:<7} {x['rate_mib_s']:>4} MiB/s: detected by {'/'.join(by)}; gap to the previous read "
                      f"median {gaps[len(gaps) // 2]:.2f} ms, max {gaps[-1]:.2f} ms; reaction + gap p99 {bound[-1]:.2f} ms "
                      f"[{verdict(bound[-1] <= 10)}: <= 10 ms]")


def idle(r):
    import statistics
    for name, runs in r["runs"].items():
        q = [x["cpu_percent_schedstat"] for x in runs]
        e = [x["earlyoom_cpu_percent_schedstat"] for x in runs if "earlyoom_cpu_percent_schedstat" in x]
        line = (f"  idle {name:<5}: qosd {statistics.median(q):.3f} % of a core "
                f"(range {min(q):.3f}–{max(q):.3f}, n={len(q)}, schedstat)")
        if e:
            line += f", earlyoom {statistics.median(e):.3f} % ({min(e):.3f}–{max(e):.3f})"
            line += (f"  [{verdict(statistics.median(q) < GOALS['idle_cpu_percent'])}: < 0.1 %; "
                     f"{verdict(statistics.median(q) <= statistics.median(e))}: <= earlyoom]")
        print(line)


PARTS = {"plan": plan, "reconcile": reconcile, "footprint": footprint, "startup": startup,
         "churn": churn, "profile-footprint": footprint, "e2e": e2e, "idle": idle}


def main(files):
    if not files:
        d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
        for part in PARTS:
            found = sorted(glob.glob(os.path.join(d, f"{part}-*.json")))
            if found:
                files.append(found[-1])
    for f in files:
        doc = json.load(open(f))
        m = doc["machine"]
        print(f"{doc['part']}: {os.path.basename(f)}  (commit {m['commit']}{' dirty' if m['dirty'] else ''}, "
              f"{m['nproc']}× {m['cpu_model']}, kernel {m['kernel']}, cgroup {m['cgroup']}, "
              f"load {' '.join(m['loadavg_at_start'])} → {' '.join(m.get('loadavg_at_end', []))})")
        PARTS[doc["part"]](doc["result"])


if __name__ == "__main__":
    main(sys.argv[1:])
