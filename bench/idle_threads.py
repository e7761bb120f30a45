#!/usr/bin/env python3
"""Idle CPU of `qosd run` per thread, several binaries side by side against
one held containerd (issue 17). Measurement only.

    cargo test --release --test bench_real -- --ignored --exact hold &   # 110 pods
    bench/idle_threads.py --bin new=target/release/qosd --bin base=PATH \
        [--rounds 2] [--window 60] [--settle 10] [--earlyoom PATH]

Each round starts every binary in turn (A B A B …) with the flags the
`hold` helper wrote to its file (default /tmp/qosd-bench-hold), default
settings otherwise: exec → READY=1 (sd_notify), a settle, then one window
of `utime+stime` (/proc/PID/stat) and of every thread's schedstat run time,
by thread name; earlyoom (`--dryrun -r 3600`) runs beside it in the same
window when given. The daemon is stopped by its PID (SIGTERM). Prints one
JSON document (machine load included) and a table.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HZ = os.sysconf("SC_CLK_TCK")


def ticks(pid):
    s = open(f"/proc/{pid}/stat").read()
    f = s[s.rfind(")") + 2:].split()
    return int(f[11]) + int(f[12])


def switches(path):
    """Voluntary context switches of one thread: its wake-ups (a thread
    that blocks and is woken switches out once per sleep; preemptions by
    other load, the involuntary ones, are left out)."""
    for line in open(path):
        if line.startswith("voluntary_ctxt_switches"):
            return int(line.split()[1])
    return 0


def threads(pid):
    """{tid: (name, schedstat run ns, context switches)} of every live thread."""
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            name = open(f"{base}/{tid}/comm").read().strip()
            ns = int(open(f"{base}/{tid}/schedstat").read().split()[0])
            sw = switches(f"{base}/{tid}/status")
        except OSError:
            continue
        out[tid] = (name, ns, sw)
    return out


def group(name, main=False):
    # The main thread carries the binary's name (bench/run.sh copies it to
    # qosd-<pid>); tokio workers are numbered or share one name: group them.
    if main:
        return "main thread"
    if name.startswith("tokio-") or name.startswith("qosd-rt"):
        return "tokio workers"
    return name


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_ready(sock, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        sock.settimeout(max(0.001, end - time.monotonic()))
        try:
            msg = sock.recv(4096).decode(errors="replace")
        except socket.timeout:
            return None
        if "READY=1" in msg.splitlines():
            return time.monotonic()
    return None


def one(bin_path, flags, args, tmp):
    path = os.path.join(tmp, f"notify-{time.monotonic_ns()}.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    env = dict(os.environ, QOSD_LOG="warn", NOTIFY_SOCKET=path)
    for k in ("CONTAINER_RUNTIME_ENDPOINT", "QOSD_CONFIG", "NODE_NAME"):
        env.pop(k, None)
    cmd = [bin_path, "run", *flags, "--metrics-address", f"127.0.0.1:{free_port()}"]
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready = wait_ready(sock, 60)
        ready_ms = None if ready is None else (ready - t0) * 1e3
        time.sleep(args.settle)
        eo = None
        if args.earlyoom:
            eo = subprocess.Popen([args.earlyoom, "--dryrun", "-r", "3600"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        pid = child.pid
        load0 = open("/proc/loadavg").read().split()[:3]
        a_t, a_th = ticks(pid), threads(pid)
        e0 = (ticks(eo.pid), threads(eo.pid)) if eo else None
        w0 = time.monotonic()
        time.sleep(args.window)
        el = time.monotonic() - w0
        b_t, b_th = ticks(pid), threads(pid)
        e1 = (ticks(eo.pid), threads(eo.pid)) if eo else None
        load1 = open("/proc/loadavg").read().split()[:3]
        per = {}
        wakes = {}
        for tid, (name, ns, sw) in b_th.items():
            _, before, sw0 = a_th.get(tid, (name, 0, 0))
            g = group(name, main=(tid == str(pid)))
            per[g] = per.get(g, 0.0) + (ns - before) / 1e9 / el * 100
            wakes[g] = wakes.get(g, 0.0) + (sw - sw0) / el * 60
        res = {
            "exec_to_ready_ms": ready_ms,
            "window_s": round(el, 1),
            "cpu_percent_ticks": (b_t - a_t) / HZ / el * 100,
            "cpu_percent_schedstat": sum(per.values()),
            "per_thread_percent": dict(sorted(per.items())),
            "per_thread_wakeups_per_min": dict(sorted(wakes.items())),
            "loadavg": [load0, load1],
        }
        if eo:
            res["earlyoom_cpu_percent_ticks"] = (e1[0] - e0[0]) / HZ / el * 100
            res["earlyoom_cpu_percent_schedstat"] = sum(
                (ns - e0[1].get(t, ("", 0, 0))[1]) for t, (_, ns, _) in e1[1].items()) / 1e9 / el * 100
            res["earlyoom_wakeups_per_min"] = sum(
                (sw - e0[1].get(t, ("", 0, 0))[2]) for t, (_, _, sw) in e1[1].items()) / el * 60
            eo.terminate()
            eo.wait()
        return res
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        sock.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--hold", default=os.environ.get("QOSD_BENCH_HOLD_FILE", "/tmp/qosd-bench-hold"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--earlyoom")
    args = ap.parse_args()
    flags = [l for l in open(args.hold).read().splitlines() if l]
    bins = [b.split("=", 1) for b in args.bin]
    runs = {name: [] for name, _ in bins}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, path in bins:
                res = one(path, flags, args, tmp)
                runs[name].append(res)
                print(f"round {r} {name}: {res['cpu_percent_ticks']:.3f} % (ticks), "
                      f"{res['cpu_percent_schedstat']:.3f} % (schedstat), ready "
                      f"{res['exec_to_ready_ms']:.0f} ms, load {res['loadavg'][0][0]}", file=sys.stderr)
    doc = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "bins": dict(bins), "window_s": args.window, "settle_s": args.settle,
           "runs": runs}
    print(json.dumps(doc, indent=1))
    names = sorted({t for rs in runs.values() for r in rs for t in r["per_thread_percent"]})
    print("\n| % of one core | " + " | ".join(f"{n} r{i}" for n, rs in runs.items() for i in range(len(rs))) + " |", file=sys.stderr)
    for t in names:
        print(f"| {t} | " + " | ".join(f"{r['per_thread_percent'].get(t, 0):.3f}" for rs in runs.values() for r in rs) + " |", file=sys.stderr)
    for t in names:
        print(f"| {t}, wake-ups/min | " + " | ".join(f"{r.get('per_thread_wakeups_per_min', {}).get(t, 0):.0f}" for rs in runs.values() for r in rs) + " |", file=sys.stderr)
    if any("earlyoom_wakeups_per_min" in r for rs in runs.values() for r in rs):
        print("| earlyoom wake-ups/min | " + " | ".join(f"{r.get('earlyoom_wakeups_per_min', 0):.0f}" for rs in runs.values() for r in rs) + " |", file=sys.stderr)
    if any("earlyoom_cpu_percent_schedstat" in r for rs in runs.values() for r in rs):
        print("| earlyoom, same window | " + " | ".join(f"{r.get('earlyoom_cpu_percent_schedstat', 0):.3f}" for rs in runs.values() for r in rs) + " |", file=sys.stderr)
    print("| total (ticks) | " + " | ".join(f"{r['cpu_percent_ticks']:.3f}" for rs in runs.values() for r in rs) + " |", file=sys.stderr)


if __name__ == "__main__":
    main()
