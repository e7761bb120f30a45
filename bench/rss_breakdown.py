#!/usr/bin/env python3
"""Where a running qosd's resident memory is (issue 17, the churn row's
"< 16 MiB"): /proc/<pid>/smaps summed per mapping, with the anonymous
mappings told apart (main arena, thread arenas, thread stacks, other).

    bench/rss_breakdown.py PID                   # one process, now
    bench/rss_breakdown.py --sections PID        # the binary's ELF sections: resident KiB
    bench/rss_breakdown.py --run BIN [--settle S] [--env K=V ...] [--hold FILE] [--json]

--run starts `BIN run <flags of the bench_real hold file>` (as
bench/idle_threads.py does: QOSD_LOG=warn, a free metrics port, READY=1
awaited on a private NOTIFY_SOCKET), waits --settle seconds (default 30),
prints the breakdown and stops the daemon by its PID. --env adds variables
to the daemon's environment only (e.g. LD_PRELOAD, GLIBC_TUNABLES).
Measurement only; nothing is asserted.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

MAP_RE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$")
ARENA = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's reservation


def smaps(pid):
    """Mappings of pid: dicts with start, end, perms, name and the smaps fields (KiB)."""
    maps, cur = [], None
    for line in open(f"/proc/{pid}/smaps"):
        m = MAP_RE.match(line)
        if m:
            cur = {"start": int(m.group(1), 16), "end": int(m.group(2), 16),
                   "perms": m.group(3), "name": m.group(4).strip()}
            maps.append(cur)
            continue
        k, _, v = line.partition(":")
        v = v.strip()
        if v.endswith(" kB"):
            cur[k] = int(v[:-3])
    return maps


def classify(maps):
    """A label per mapping: the file, [heap] (main arena), thread-arena,
    thread-stack, guard, or anon."""
    labels = []
    for i, m in enumerate(maps):
        name = m["name"]
        if name:
            labels.append(name)
            continue
        size = m["end"] - m["start"]
        prev = maps[i - 1] if i else None
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        if m["perms"].startswith("---"):
            labels.append("guard/reserved")
        elif (m["start"] % ARENA == 0 and nxt and nxt["perms"].startswith("---")
              and nxt["start"] == m["end"] and nxt["end"] - m["start"] == ARENA) or (
                m["start"] % ARENA == 0 and size == ARENA):
            labels.append("[thread arena]")
        elif prev and prev["perms"].startswith("---") and prev["end"] == m["start"] \
                and prev["end"] - prev["start"] == 4096:
            labels.append("[thread stack]")
        else:
            labels.append("[anon]")
    return labels


def breakdown(pid):
    maps = smaps(pid)
    labels = classify(maps)
    groups = {}
    for m, lab in zip(maps, labels):
        key = lab
        if lab.startswith("/"):
            key = lab + (" (x)" if "x" in m["perms"] else " (rw)" if "w" in m["perms"] else " (r)")
        g = groups.setdefault(key, {"mappings": 0, "size_kib": 0, "rss_kib": 0, "pss_kib": 0,
                                    "anon_kib": 0, "shared_clean_kib": 0,
                                    "private_clean_kib": 0, "private_dirty_kib": 0})
        g["mappings"] += 1
        g["size_kib"] += (m["end"] - m["start"]) // 1024
        g["rss_kib"] += m.get("Rss", 0)
        g["pss_kib"] += m.get("Pss", 0)
        g["anon_kib"] += m.get("Anonymous", 0)
        g["shared_clean_kib"] += m.get("Shared_Clean", 0)
        g["private_clean_kib"] += m.get("Private_Clean", 0)
        g["private_dirty_kib"] += m.get("Private_Dirty", 0)
    status = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads", "VmStk"):
            status[k] = v.strip()
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except OSError:
            continue
        threads[name] = threads.get(name, 0) + 1
    return {"pid": pid, "status": status, "threads": threads,
            "groups": dict(sorted(groups.items(), key=lambda kv: -kv[1]["rss_kib"]))}


def render(b):
    out = [f"pid {b['pid']}  " + "  ".join(f"{k} {v}" for k, v in b["status"].items()),
           "threads: " + ", ".join(f"{n} x{c}" for n, c in sorted(b["threads"].items())),
           f"{'mapping':60} {'n':>3} {'size':>8} {'rss':>7} {'anon':>7} {'shclean':>7} {'prclean':>7} {'prdirty':>7}"]
    for k, g in b["groups"].items():
        if g["rss_kib"] == 0:
            continue
        out.append(f"{k[-60:]:60} {g['mappings']:3} {g['size_kib']:8} {g['rss_kib']:7} {g['anon_kib']:7} "
                   f"{g['shared_clean_kib']:7} {g['private_clean_kib']:7} {g['private_dirty_kib']:7}")
    return "\n".join(out)


def sections(pid):
    """Resident KiB per ELF section of the process's own binary (pages
    present in its page table, /proc/PID/pagemap bit 63; a page shared by
    two sections counts for both)."""
    exe = os.readlink(f"/proc/{pid}/exe")
    base = None
    for line in open(f"/proc/{pid}/maps"):
        m = MAP_RE.match(line)
        if m and m.group(4).strip() == exe and line.split()[2] == "00000000":
            base = int(m.group(1), 16)
            break
    out = subprocess.run(["readelf", "-SW", exe], capture_output=True, text=True, check=True).stdout
    rows = []
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        for line in out.splitlines():
            m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", line)
            if not m or int(m.group(2), 16) == 0:
                continue
            name, addr, size = m.group(1), int(m.group(2), 16), int(m.group(3), 16)
            if size == 0 or name in (".tbss", ".bss"):
                continue
            first, last = (base + addr) >> 12, (base + addr + size - 1) >> 12
            pm.seek(first * 8)
            data = pm.read((last - first + 1) * 8)
            present = sum(1 for i in range(0, len(data), 8)
                          if int.from_bytes(data[i:i + 8], "little") >> 63)
            rows.append((name, size // 1024, present * 4))
    return rows


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run(args):
    flags = [l for l in open(args.hold).read().splitlines() if l]
    tmp = tempfile.mkdtemp(prefix="qosd-rss-")
    path = os.path.join(tmp, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(60)
    env = dict(os.environ, QOSD_LOG="warn", NOTIFY_SOCKET=path)
    for k in ("CONTAINER_RUNTIME_ENDPOINT", "QOSD_CONFIG", "NODE_NAME", "LD_PRELOAD"):
        env.pop(k, None)
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v
    cmd = [args.run, "run", *flags, "--metrics-address", f"127.0.0.1:{free_port()}", *args.extra]
    child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            msg = sock.recv(4096).decode(errors="replace")
            if "READY=1" in msg.splitlines():
                break
        time.sleep(args.settle)
        b = breakdown(child.pid)
        b["loadavg"] = open("/proc/loadavg").read().split()[:3]
        b["binary"] = args.run
        b["env"] = args.env
        b["settle_s"] = args.settle
        return b
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        sock.close()
        os.unlink(path)
        os.rmdir(tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pid", nargs="?", type=int)
    ap.add_argument("--run")
    ap.add_argument("--settle", type=float, default=30)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--extra", action="append", default=[], help="one more qosd run flag")
    ap.add_argument("--hold", default=os.environ.get("QOSD_BENCH_HOLD_FILE", "/tmp/qosd-bench-hold"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sections", action="store_true", help="with PID: resident KiB per ELF section")
    args = ap.parse_args()
    if args.run:
        b = run(args)
    elif args.pid and args.sections:
        for name, size, res in sections(args.pid):
            print(f"{name:24} size {size:6} KiB  resident {res:6} KiB")
        return
    elif args.pid:
        b = breakdown(args.pid)
    else:
        ap.error("PID or --run BIN")
    print(json.dumps(b) if args.json else render(b))


if __name__ == "__main__":
    sys.exit(main())
