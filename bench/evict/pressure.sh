#!/bin/sh
# Memory stall (PSI) side by side on the systemd node VM (issue 29, the
# proof): workloads that stall without crossing a byte threshold, and the
# tools that may act on them, in one boot of the systemd VM
# (tests/vm/qosd_vm.py run --systemd: Debian bookworm, systemd PID 1,
# cgroup v2, psi=1, qemu TCG).
#
# Usage (root): bench/evict/pressure.sh
# Env: WORKLOADS (default "file"; any of file high anon),
#      CONFIGS (default "qosd-pressure qosd-bytes oomd-default oomd-tuned
#               earlyoom kernel-oom"), RUNS (per workload and config, default 1),
#      OUT (default bench/results), NO_BUILD=1 (use target/release/qosd as is),
#      STAMP (file name suffix, default the UTC time), NODE_MEM (total: qosd's
#      --node-memory is MemTotal; available: MemAvailable after boot).
# Results: $OUT/pressure-vm-$STAMP.jsonl (one JSON object per run),
#          $OUT/pressure-vm-$STAMP.log (qosd's, systemd-oomd's, earlyoom's words),
#          $OUT/pressure-vm-$STAMP-console.log; summary: pressure_summary.py.
#
# Every run has its own cgroup root /bench.slice/r<n> (bench.slice has
# ManagedOOMMemoryPressure=kill: systemd-oomd's candidates are its
# descendants) and `qosd run` as the node agent with three pods from
# manifests: the stalling pod (Burstable, requests 32Mi, limit 1Gi; its
# process in a child cgroup `app`), a probe pod (Burstable, request 16Mi:
# bin/latprobe, wakes every 10 ms and records its lateness) and a BestEffort
# bystander holding 24 MiB (the kubelet's byte order would take it first).
# The workloads, in the stalling pod's `app`:
#   file   memory.max 64M; bench/evict/pressure/streamread re-reads 128 MiB of
#          a RAM block device (/dev/ram0, brd) through the page cache, forever
#   high   memory.high 48M, no max; tests/images/thrash --anon 80
#   anon   no limit; tests/images/memhog ramps 32 MiB every 100 ms to 4 GiB
#          (past the node's memory: the usual anonymous ramp)
# The configurations (qosd's eviction settings; the others run qosd with
# no eviction threshold as the node agent):
#   qosd-pressure  --eviction-hard memory.available<100Mi
#                  --eviction-pressure-hard memory.full=10%/2s
#   qosd-bytes     --eviction-hard memory.available<100Mi
#   oomd-default   systemd-oomd defaults (60 % for 30 s)
#   oomd-tuned     ManagedOOMMemoryPressureLimit=10 %, DefaultMemoryPressureDurationSec=1s
#   earlyoom       earlyoom -m 10 -r 1
#   kernel-oom     nothing: the kernel's OOM killer alone
# bin/stallwatch follows the node's /proc/pressure/memory and the stalling
# pod's memory.pressure every 10 ms from the workload's start: stall onset is
# the first reading at which `full` grew by >= 10 % of 2 s within 2 s (the
# trigger's condition), and the staller's exit (pidfd) ends the run.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
WORKLOADS=${WORKLOADS:-file}
CONFIGS=${CONFIGS:-qosd-pressure qosd-bytes oomd-default oomd-tuned earlyoom kernel-oom}
RUNS=${RUNS:-1}
OUT=${OUT:-$repo/bench/results}
STAMP=${STAMP:-$(date -u +%Y%m%dT%H%M%SZ)}
W=$repo/target/pressure-bench
mkdir -p "$OUT" "$W"
cd "$repo"

[ -n "${NO_BUILD:-}" ] || cargo build --release --bin qosd >&2
for p in streamread latprobe stallwatch; do
    gcc -O2 -Wall -static -o "$W/$p" "$here/pressure/$p.c"
done
for p in thrash memhog; do
    gcc -O2 -Wall -static -o "$W/$p" "tests/images/$p.c"
done
python3 tests/vm/qosd_vm.py prepare-systemd >&2
brd=$(find "${QOSD_VM_CACHE:-target/vm-cache}/kernel/lib/modules" -name brd.ko | head -1)
[ -n "$brd" ] || { echo "no brd.ko in the kernel package" >&2; exit 1; }
# the image has no kmod: busybox's insmod loads brd
busybox=$(find "${QOSD_VM_CACHE:-target/vm-cache}/busybox" -path "*/bin/busybox" -type f | head -1)

script=$W/vm-run.sh
{
    echo "WORKLOADS='$WORKLOADS'"
    echo "CONFIGS='$CONFIGS'"
    echo "RUNS=$RUNS"
    echo "NODE_MEM=${NODE_MEM:-total}"
    cat "$here/pressure/vm-run.sh"
} > "$script"

results=$W/vm-results.txt
: > "$results"
n=$(echo $WORKLOADS | wc -w); c=$(echo $CONFIGS | wc -w)
timeout=$((300 + n * c * RUNS * 120))
python3 tests/vm/qosd_vm.py run --systemd --script "$script" \
    --bin target/release/qosd --bin "$W/streamread" --bin "$W/latprobe" --bin "$W/stallwatch" \
    --bin "$W/thrash" --bin "$W/memhog" --bin "$busybox" --file "$brd:test/brd.ko" \
    --mem 1536 --timeout $timeout --log "$OUT/pressure-vm-$STAMP-console.log" --results "$results" >&2 || true
tr -d '\r' < "$results" | sed -n 's/^RESULT //p' > "$OUT/pressure-vm-$STAMP.jsonl"
tr -d '\r' < "$results" | grep -v '^RESULT ' > "$OUT/pressure-vm-$STAMP.log" || true
echo "commit $(git rev-parse HEAD)" >> "$OUT/pressure-vm-$STAMP.log"
python3 "$here/pressure_summary.py" "$OUT/pressure-vm-$STAMP.jsonl"
