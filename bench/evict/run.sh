#!/bin/sh
# Eviction reaction comparison (issue 7, item 1): qosd fast path vs the
# kubelet-like 10 s poll vs the kernel OOM killer alone (host, cgroup v1 or
# v2), and earlyoom vs qosd vs the kernel OOM killer inside the cgroup v2 VM.
#
# Usage (root): bench/evict/run.sh [host|vm|all]   (default all)
# Env: ROUNDS (host, default 6), RATES (default 50,200,1000),
#      VM_RUNS (default 5), VM_RATES (default 50,200,1000), OUT (default bench/results)
# Every configuration runs once per rate in each round (A B C D A B C D ...),
# so load changes hit all of them alike. Results: $OUT/evict-<cfg>.jsonl
# (one JSON document per invocation) and $OUT/evict-summary.json.
# Safety: the bench creates cgroups only under <root>/qosd-test-<pid>-bench
# and removes them leaf first; it kills only its own hogs, by PID.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
what=${1:-all}
ROUNDS=${ROUNDS:-6}
RATES=${RATES:-50,200,1000}
VM_RUNS=${VM_RUNS:-5}
VM_RATES=${VM_RATES:-50,200,1000}
OUT=${OUT:-$repo/bench/results}
mkdir -p "$OUT"
cd "$repo"

CAP=512 THR=100            # host: kubepods capacity 512 MiB, threshold 100 MiB
LIMIT=$CAP                 # the kubepods-like cgroup's limit = capacity

host() {
    cargo build --release -p qosd-devtools --bin qosd-evict-bench >&2
    B=target/release/qosd-evict-bench
    common="--capacity-mib $CAP --threshold-mib $THR --limit-mib $LIMIT --sampler --rates $RATES"
    for c in qosd qosd-rt50 kubelet-poll10s kernel-oom; do : > "$OUT/evict-host-$c.jsonl"; done
    r=1
    while [ $r -le "$ROUNDS" ]; do
        echo "== round $r/$ROUNDS $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >&2
        # (a) qosd fast path: default watcher (eventfd on v1 + adaptive 5-100 ms poll)
        $B $common --runs 2 | tr -d '\n' >> "$OUT/evict-host-qosd.jsonl"; echo >> "$OUT/evict-host-qosd.jsonl"
        # (a') the same with the watcher thread at SCHED_FIFO 50
        $B $common --runs 2 --rt 50 | tr -d '\n' >> "$OUT/evict-host-qosd-rt50.jsonl"; echo >> "$OUT/evict-host-qosd-rt50.jsonl"
        # (b) kubelet-like: 10 s housekeeping poll, no notification, random phase
        $B $common --runs 1 --no-eventfd --min-interval-ms 10000 --max-interval-ms 10000 \
            --random-phase-ms 10000 | tr -d '\n' >> "$OUT/evict-host-kubelet-poll10s.jsonl"; echo >> "$OUT/evict-host-kubelet-poll10s.jsonl"
        # (c) the kernel OOM killer alone
        $B $common --runs 1 --no-watcher | tr -d '\n' >> "$OUT/evict-host-kernel-oom.jsonl"; echo >> "$OUT/evict-host-kernel-oom.jsonl"
        r=$((r + 1))
    done
}

vm() {
    # static bench binary for the busybox VM
    CARGO_TARGET_DIR=target/static RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 \
        cargo build --release -p qosd-devtools --target x86_64-unknown-linux-gnu --bin qosd-evict-bench >&2
    SB=target/static/x86_64-unknown-linux-gnu/release/qosd-evict-bench
    # earlyoom from Debian's package, never installed on the host
    eo=target/evict-bench/earlyoom
    if [ ! -x "$eo/usr/bin/earlyoom" ]; then
        mkdir -p "$eo"
        (cd "$eo" && apt-get download earlyoom >&2 && dpkg -x earlyoom_*.deb .)
    fi
    files=""
    for lib in $(ldd "$eo/usr/bin/earlyoom" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | sort -u); do
        files="$files --file $(readlink -f "$lib"):${lib#/}"
    done
    script=target/evict-bench/vm-run.sh
    cat > "$script" <<VMEOF
set -u
R=\$VMTEST_RESULTS
echo "== qosd v2 (default watcher), kubepods limit at capacity" >&2
qosd-evict-bench --capacity-mib 256 --threshold-mib 56 --limit-mib 256 --sampler --rates $VM_RATES --runs $VM_RUNS | tr -d '\n' > /tmp/qosd.json
echo "== kernel OOM killer alone, v2 cgroup" >&2
qosd-evict-bench --capacity-mib 256 --threshold-mib 56 --limit-mib 256 --sampler --no-watcher --rates $VM_RATES --runs 3 | tr -d '\n' > /tmp/koom.json
echo "== earlyoom -m 10 -r 1 on the whole VM" >&2
earlyoom -m 10 -r 1 > /tmp/earlyoom.log 2>&1 &
EO=\$!
sleep 1
qosd-evict-bench --meminfo-race --avail-pct 10 --sample-us 500 --rates $VM_RATES --runs $VM_RUNS | tr -d '\n' > /tmp/eo.json
kill \$EO
echo "== kernel OOM killer alone, whole VM" >&2
qosd-evict-bench --meminfo-race --avail-pct 10 --sample-us 500 --rates $VM_RATES --runs 2 | tr -d '\n' > /tmp/vmoom.json
{ echo "QOSD_JSON \$(cat /tmp/qosd.json)"; echo "KOOM_JSON \$(cat /tmp/koom.json)"; echo "EO_JSON \$(cat /tmp/eo.json)"; echo "VMOOM_JSON \$(cat /tmp/vmoom.json)"; sed 's/^/EO_LOG /' /tmp/earlyoom.log; } > \$R
VMEOF
    # shellcheck disable=SC2086
    python3 tests/vm/qosd_vm.py run --script "$script" --bin "$SB" \
        --file "$(readlink -f "$eo/usr/bin/earlyoom")":test/bin/earlyoom $files \
        --mem 640 --timeout 1500 --log "$OUT/evict-vm-console.log" --results target/evict-bench/vm-results.txt >&2 || true
    r=target/evict-bench/vm-results.txt
    sed -n 's/^QOSD_JSON //p' "$r" > "$OUT/evict-vm-qosd.jsonl"
    sed -n 's/^KOOM_JSON //p' "$r" > "$OUT/evict-vm-kernel-oom.jsonl"
    sed -n 's/^EO_JSON //p' "$r" > "$OUT/evict-vm-earlyoom.jsonl"
    sed -n 's/^VMOOM_JSON //p' "$r" > "$OUT/evict-vm-kernel-oom-whole.jsonl"
    sed -n 's/^EO_LOG //p' "$r" > "$OUT/evict-vm-earlyoom.log"
}

case $what in
    host) host ;;
    vm) vm ;;
    all) host; vm ;;
    *) echo "usage: $0 [host|vm|all]" >&2; exit 2 ;;
esac
python3 "$here/summarize.py" "$OUT" > "$OUT/evict-summary.json"
cat "$OUT/evict-summary.json"
