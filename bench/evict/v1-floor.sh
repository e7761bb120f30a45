#!/bin/sh
# Host cgroup v1: qosd's watcher with the 1 ms poll floor (the default since
# issue 17) against the previous 5 ms floor, interleaved, on the ramps of
# section 5. Usage (root): bench/evict/v1-floor.sh   Env: ROUNDS (3), RUNS (2).
# Results: bench/results/evict-host-floor-{1ms,5ms}.jsonl
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-2}
OUT=${OUT:-$repo/bench/results}
[ -n "${NO_BUILD:-}" ] || cargo build --release -p qosd-devtools --bin qosd-evict-bench >&2
B=target/release/qosd-evict-bench
common="--capacity-mib 512 --threshold-mib 100 --limit-mib 512 --sampler --rates 50,200,1000 --runs $RUNS"
: > "$OUT/evict-host-floor-1ms.jsonl"; : > "$OUT/evict-host-floor-5ms.jsonl"
r=1
while [ $r -le "$ROUNDS" ]; do
    echo "== round $r/$ROUNDS $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >&2
    $B $common --min-interval-ms 1 | tr -d '\n' >> "$OUT/evict-host-floor-1ms.jsonl"; echo >> "$OUT/evict-host-floor-1ms.jsonl"
    $B $common --min-interval-ms 5 | tr -d '\n' >> "$OUT/evict-host-floor-5ms.jsonl"; echo >> "$OUT/evict-host-floor-5ms.jsonl"
    r=$((r + 1))
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def pct(v, p):
    v = sorted(v); k = max(0, min(len(v) - 1, -(-len(v) * p // 100) - 1)); return v[int(k)]
for tag in ("1ms", "5ms"):
    runs = []
    for l in open(f"{out}/evict-host-floor-{tag}.jsonl"):
        if l.strip():
            runs += json.loads(l)["runs"]
    for rate in (50, 200, 1000):
        rs = [r for r in runs if r["rate_mib_s"] == rate]
        for key in ("kill_ms", "kill_after_sampled_ms"):
            v = [r[key] for r in rs if r.get(key) is not None]
            if v:
                print(f"floor {tag} {rate:>4} MiB/s {key:<22} n={len(v)} median {pct(v,50):.2f} p99 {pct(v,99):.2f} max {max(v):.2f}")
        print(f"floor {tag} {rate:>4} MiB/s killer qosd {sum(r['killer']=='qosd' for r in rs)}/{len(rs)}, right pod {sum(r['victim_correct'] for r in rs)}/{len(rs)}")
PY
