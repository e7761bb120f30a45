#!/usr/bin/env python3
# One start of `qosd run` against the pods `bench_real hold` holds (its
# QOSD_BENCH_HOLD_FILE, default /tmp/qosd-bench-hold): prints exec -> READY=1
# (sd_notify datagram) and the CPU of every thread at READY, then stops it
# with SIGINT. Usage: bench/startup_once.py BIN [--strace OUT | --perf OUT] [qosd flags]
# (QOSD_STATE_DIR selects the status cache directory; HOLD_S: seconds kept after READY).
import os, socket, subprocess, sys, time, signal, tempfile
bin_ = sys.argv[1]; rest = sys.argv[2:]
wrap = []
if rest and rest[0] == "--strace":
    wrap = ["strace", "-f", "--seccomp-bpf", "-e", "trace=execve,bind,connect,openat,write", "-tt", "-o", rest[1]]; rest = rest[2:]
elif rest and rest[0] == "--perf":
    wrap = ["perf", "record", "-F", "20000", "-g", "-o", rest[1], "--"]; rest = rest[2:]
args = open(os.environ.get("QOSD_BENCH_HOLD_FILE", "/tmp/qosd-bench-hold")).read().split()
d = tempfile.mkdtemp()
sp = os.path.join(d, "n.sock")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sp); s.settimeout(60)
env = dict(os.environ, NOTIFY_SOCKET=sp, QOSD_LOG=os.environ.get("QOSD_LOG", "warn"))
port = 20000 + os.getpid() % 20000
t = time.monotonic()
p = subprocess.Popen(wrap + [bin_, "run"] + args + ["--metrics-address", f"127.0.0.1:{port}"] + rest, env=env,
                     stdout=open(os.path.join(d, "log"), "w"), stderr=subprocess.STDOUT)
while True:
    m = s.recv(4096)
    if b"READY=1" in m:
        break
ms = (time.monotonic() - t) * 1e3
pid = p.pid
if not wrap:
    tot = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try: tot += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError: pass
    print(f"ready {ms:.1f} ms cpu {tot/1e6:.1f} ms")
else:
    print(f"ready {ms:.1f} ms (traced)")
time.sleep(float(os.environ.get("HOLD_S","0.3")))
os.kill(pid if not wrap else int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0]), signal.SIGINT); p.wait(10)
sys.stderr.write(open(os.path.join(d, "log")).read()[-2000:])
