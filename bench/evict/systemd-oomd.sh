#!/bin/sh
# Side by side on the systemd node (issue 15, item 4): qosd's fast path vs
# systemd-oomd (its default PSI config, and a tuned one) vs earlyoom vs the
# kernel OOM killer, on the ramps of bench/results/HISTORY.md section 5, in one boot of
# the systemd VM (tests/vm/qosd_vm.py run --systemd: Debian bookworm,
# systemd PID 1, cgroup v2, psi=1).
#
# Usage (root): bench/evict/systemd-oomd.sh
# Env: VM_RUNS (default 5), VM_RATES (default 50,200,1000), EO_RUNS (default 3),
#      OUT (default bench/results), NO_BUILD=1 (use the built binary as is)
# Results: $OUT/oomd-vm-<config>.jsonl (one qosd-evict-bench document each),
#          $OUT/oomd-vm-journal.log (systemd-oomd's and earlyoom's own words),
#          $OUT/oomd-vm-console.log; the summary: bench/evict/summarize.py.
#
# The configurations, one after the other in one boot:
#   qosd         qosd's watcher (v2: adaptive 5-100 ms poll of memory.current),
#                kills the hog's pod; systemd-oomd stopped.
#   kernel-oom   no watcher, systemd-oomd stopped: the kernel OOM killer alone.
#   oomd-default no watcher; systemd-oomd running with its defaults
#                (DefaultMemoryPressureLimit=60%, DefaultMemoryPressureDurationSec=30s)
#                and bench.slice ManagedOOMMemoryPressure=kill.
#   oomd-tuned   the same with ManagedOOMMemoryPressureLimit=10% on bench.slice
#                and DefaultMemoryPressureDurationSec=1s (oomd.conf drop-in).
#   earlyoom     earlyoom -m 10 -r 1 on the whole VM (MemAvailable <= 10 %),
#                qosd-evict-bench --meminfo-race (no cgroup limit).
# Every cgroup run: a kubepods-like cgroup kp-<n> under
# /sys/fs/cgroup/bench.slice/qosd-test-<pid>-bench with memory.max = 256 MiB
# (the capacity), a hog pod ramping and a 32 MiB bystander pod; the line is
# 200 MiB (threshold 56 MiB). systemd-oomd watches bench.slice: its
# candidates are bench.slice's leaf cgroups, i.e. the two pods.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
VM_RUNS=${VM_RUNS:-5}
VM_RATES=${VM_RATES:-50,200,1000}
EO_RUNS=${EO_RUNS:-3}
OUT=${OUT:-$repo/bench/results}
mkdir -p "$OUT" "$repo/target/oomd-bench"
cd "$repo"

# The VM is Debian bookworm like this host: the ordinary (glibc) release
# binary runs there.
[ -n "${NO_BUILD:-}" ] || cargo build --release -p qosd-devtools --bin qosd-evict-bench >&2
B=target/release/qosd-evict-bench

script=target/oomd-bench/vm-run.sh
cat > "$script" <<VMEOF
set -u
R=\$VMTEST_RESULTS
res() { echo "\$*" > \$R; }
mkdir -p /run/systemd/system /run/systemd/oomd.conf.d
cat > /run/systemd/system/bench.slice <<EOF
[Slice]
MemoryAccounting=yes
ManagedOOMMemoryPressure=kill
EOF
systemctl daemon-reload
systemctl start bench.slice
echo +memory > /sys/fs/cgroup/bench.slice/cgroup.subtree_control
systemctl stop systemd-oomd.socket systemd-oomd.service 2>/dev/null || true
systemctl stop earlyoom.service 2>/dev/null || true
res "INFO systemd \$(systemctl --version | head -1) kernel \$(uname -r) memtotal_kib \$(awk '/MemTotal/ {print \$2}' /proc/meminfo) psi \$(test -r /proc/pressure/memory && echo yes || echo no)"
B="qosd-evict-bench --capacity-mib 256 --threshold-mib 56 --limit-mib 256 --sampler --rates $VM_RATES --runs $VM_RUNS --cgroup-root /sys/fs/cgroup/bench.slice"
run() { # tag, extra args
    tag=\$1; shift
    echo "== \$tag \$(date +%T)" >&2
    \$B "\$@" | tr -d '\n' > /tmp/\$tag.json
    echo "JSON_\$tag \$(cat /tmp/\$tag.json)" > \$R
}
run qosd
run kernel-oom --no-watcher
systemctl start systemd-oomd.service
sleep 1
res "OOMCTL_DEFAULT \$(oomctl 2>&1 | tr '\n' '|')"
run oomd-default --no-watcher
cat > /run/systemd/oomd.conf.d/tuned.conf <<EOF
[OOM]
DefaultMemoryPressureDurationSec=1s
EOF
systemctl set-property --runtime bench.slice ManagedOOMMemoryPressureLimit=10%
systemctl restart systemd-oomd.service
sleep 1
res "OOMCTL_TUNED \$(oomctl 2>&1 | tr '\n' '|')"
run oomd-tuned --no-watcher
systemctl stop systemd-oomd.service
echo "== earlyoom \$(date +%T)" >&2
earlyoom -m 10 -r 1 > /tmp/earlyoom.log 2>&1 &
EO=\$!
sleep 1
qosd-evict-bench --meminfo-race --avail-pct 10 --sample-us 500 --rates $VM_RATES --runs $EO_RUNS | tr -d '\n' > /tmp/eo.json
kill \$EO
echo "JSON_earlyoom \$(cat /tmp/eo.json)" > \$R
journalctl -b -u systemd-oomd --no-pager -o short-monotonic 2>/dev/null | sed 's/^/JOURNAL /' > \$R
sed 's/^/EO_LOG /' /tmp/earlyoom.log > \$R
exit 0
VMEOF

results=target/oomd-bench/vm-results.txt
python3 tests/vm/qosd_vm.py run --systemd --script "$script" --bin "$B" \
    --mem 1536 --timeout 2400 --log "$OUT/oomd-vm-console.log" --results "$results" >&2 || true
for tag in qosd kernel-oom oomd-default oomd-tuned earlyoom; do
    sed -n "s/^JSON_$tag //p" "$results" | tr -d '\r' > "$OUT/oomd-vm-$tag.jsonl"
done
sed -n 's/^\(INFO\|OOMCTL_[A-Z]*\|JOURNAL\|EO_LOG\) /\1 /p' "$results" | tr -d '\r' > "$OUT/oomd-vm-journal.log"
python3 "$here/oomd_summary.py" "$OUT"
