#!/usr/bin/env bash
# Soak qosd (issue 13): pod churn on a real containerd with faults injected at
# random (runtime SIGSTOP / SIGKILL + restart, cgroup drift, slow HTTP
# clients), recording RSS, descriptors, errors and missed pods. Not a CI test.
#
#   bench/soak.sh [SECONDS]        # default 1800 (30 min); needs root
#   QOSD_SOAK_SEED=42 bench/soak.sh 600
#
# The result (one JSON document) goes to bench/results/soak-<UTC stamp>.json,
# qosd's log to bench/results/soak-<UTC stamp>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-1800}"
mkdir -p bench/results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="bench/results/soak-$stamp.json"
# qosd's own log (the causes of the counted errors) is kept beside it.
QOSD_SOAK_LOG="$PWD/bench/results/soak-$stamp.log" QOSD_SOAK_SECONDS="$secs" cargo test --release --test soak -- --ignored --nocapture --exact soak \
  | tee /dev/stderr | sed -n 's/^BENCH_JSON //p' > "$out"
echo "soak: result in $out"
cat "$out"
