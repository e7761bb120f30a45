#!/bin/sh
# Which ramps the emulated VM reaches: qosd's bench (v2) with the achieved
# ramp over the 200 ms before the crossing recorded per run.
# Usage (root): bench/evict/vm-rate-check.sh  -> bench/results/evict-vm-rates.jsonl
set -eu
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
CARGO_TARGET_DIR=target/static RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 \
    cargo build --release -p qosd-devtools --target x86_64-unknown-linux-gnu --bin qosd-evict-bench >&2
mkdir -p target/evict-bench
cat > target/evict-bench/vm-rates.sh <<'VMEOF'
qosd-evict-bench --capacity-mib 256 --threshold-mib 56 --limit-mib 256 --sampler --rates 50,200,500,1000 --runs 3 | tr -d '\n' > $VMTEST_RESULTS
VMEOF
python3 tests/vm/qosd_vm.py run --script target/evict-bench/vm-rates.sh \
    --bin target/static/x86_64-unknown-linux-gnu/release/qosd-evict-bench \
    --mem 640 --timeout 600 --results target/evict-bench/vm-rates.txt >&2 || true
grep -o '^{.*}' target/evict-bench/vm-rates.txt > bench/results/evict-vm-rates.jsonl
python3 -c '
import json,sys
d=json.load(open("bench/results/evict-vm-rates.jsonl"))
for r in d["runs"]: print(r["rate_mib_s"], r["achieved_mib_s"], r["kill_ms"], r["killer"])'
