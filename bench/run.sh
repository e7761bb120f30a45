#!/usr/bin/env bash
# qosd benchmarks (issue 7): reproducible, measurement only (nothing fails
# on a slow machine). Results go to bench/results/<part>-<UTC stamp>.json,
# a summary is printed at the end.
#
#   bench/run.sh                 # everything below (hours: the VM parts boot qemu)
#   bench/run.sh plan            # planning alone, 1,000 and 10,000 synthetic pods
#   bench/run.sh reconcile       # qosd run --once with 10/50/110 real pods (root)
#   bench/run.sh footprint       # idle CPU and RSS of `qosd run`, 50 pods (root)
#   bench/run.sh startup         # exec -> READY=1 with 110 pods (root)
#   bench/run.sh churn           # 110 pods held, up to 5 created + 5 removed per second,
#                                # 30 min (root; a pod is created only to replace a removed one)
#   bench/run.sh profile         # perf record of the idle daemon, 110 pods (root)
#   bench/run.sh idle            # the issue-17 idle row: 110 pods held, `qosd run`
#                                # per thread beside earlyoom in the same windows,
#                                # interleaved with the previous commit (root;
#                                # bench/idle_threads.py)
#   bench/run.sh evict           # eviction reaction, qosd vs kubelet-like poll vs
#                                # OOM killer (host) and vs earlyoom (v2 VM)
#                                # (root; bench/evict/run.sh all)
#   bench/run.sh evict-floor     # host v1: the 1 ms poll floor vs 5 ms (root;
#                                # bench/evict/v1-floor.sh)
#   bench/run.sh oomd            # systemd node VM: qosd vs systemd-oomd vs earlyoom
#                                # vs the OOM killer (root; bench/evict/systemd-oomd.sh)
#   bench/run.sh pressure        # systemd node VM: memory stall (PSI) without a byte
#                                # threshold crossed, qosd (pressure / bytes) vs
#                                # systemd-oomd vs earlyoom vs the OOM killer
#                                # (root; bench/evict/pressure.sh)
#   bench/run.sh e2e             # qosd run evicting a real pod ramping past a hard
#                                # threshold, reaction from its own histogram (root)
#   bench/run.sh summary [FILE…] # print the summary of stored results
#
# Parameters (environment), defaults in brackets:
#   QOSD_BENCH_PODS [10,50,110]  QOSD_BENCH_RUNS [10]           (reconcile)
#   QOSD_BENCH_FOOTPRINT_PODS [50]  QOSD_BENCH_DURATION [300]  QOSD_BENCH_WINDOWS [5]
#   QOSD_BENCH_STARTUP_PODS [110]  QOSD_BENCH_STARTUP_RUNS [7]
#   QOSD_BENCH_PLAN_ROUNDS [3]  QOSD_BENCH_PLAN_RUNS [20]       (plan)
#   QOSD_BENCH_CHURN_PODS [110]  QOSD_BENCH_CHURN_RATE [5]  QOSD_BENCH_CHURN_DURATION [1800]
#   QOSD_BENCH_IDLE_PODS [110]  QOSD_BENCH_IDLE_ROUNDS [4]  QOSD_BENCH_IDLE_WINDOW [60] (idle)
#   QOSD_BENCH_CHURN_ARGS []: more `qosd run` flags for churn (a diagnosis)
#   QOSD_BENCH_E2E_IDLE [10]  QOSD_BENCH_E2E_RUNS [10]  QOSD_BENCH_E2E_RATES [50,200,1000]
#   QOSD_BENCH_E2E_MODES [watcher,pass]  (pass: QOSD_EVICTION_WATCHER=off)
#   QOSD_BENCH_E2E_LOG [warn]: qosd's log filter (warn,qosd::eviction::timing=debug:
#     per-pass phase timing, recorded per run)  QOSD_BENCH_E2E_LOG_DIR: keep its logs there
#   QOSD_BENCH_BASELINE_REV [merge-base of HEAD and main]: the previous
#     commit, built once into target/bench-baseline/qosd-<rev> and run
#     interleaved by reconcile and startup (QOSD_BENCH_BASELINE=none: skip)
#   QOSD_BENCH_UNDER_TEST [target/release/qosd]: the qosd binary measured
#     (e.g. a previous build, for a before/after of one part)
#   QOSD_BENCH_PREBUILT=1: run the already built bench_real test binary
#     (and skip the cargo build), e.g. while another build holds target/
#   QOSD_BENCH_EARLYOOM [earlyoom in PATH, else target/earlyoom/...]: run
#     beside the daemon by footprint (see bench/earlyoom.sh to fetch it)
# e.g. a quick pass: QOSD_BENCH_DURATION=30 QOSD_BENCH_RUNS=3 bench/run.sh
#
# The real-pod parts need root, containerd, runc, gcc and python3 (see
# tests/support/mod.rs); they run as #[ignore]d functions of
# tests/bench_real.rs and print one `BENCH_JSON {...}` line each.
# Eviction reaction time is measured by devtools/src/bin/qosd-evict-bench.rs.
set -euo pipefail
shopt -s lastpipe  # `… | store` records its file in this shell

cd "$(dirname "$0")/.."
ROOT=$PWD
RESULTS=$ROOT/bench/results
mkdir -p "$RESULTS"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)

meta() {
    python3 - "$@" <<'EOF'
import json, os, platform, subprocess, time
def sh(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return None
model = None
try:
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            model = l.split(":", 1)[1].strip(); break
except OSError:
    pass
mem = None
try:
    for l in open("/proc/meminfo"):
        if l.startswith("MemTotal:"):
            mem = int(l.split()[1]) * 1024; break
except OSError:
    pass
fs = sh("stat", "-fc", "%T", "/sys/fs/cgroup")
unified = os.path.isdir("/sys/fs/cgroup/unified")
cg = "v2" if fs == "cgroup2fs" else ("v1 hybrid" if unified else "v1")
print(json.dumps({
    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "commit": sh("git", "rev-parse", "--short=12", "HEAD"),
    "dirty": bool(sh("git", "status", "--porcelain", "--", ".", ":!bench/results")),
    "nproc": os.cpu_count(),
    "cpu_model": model,
    "memory_bytes": mem,
    "kernel": platform.release(),
    "cgroup": cg,
    "loadavg_at_start": open("/proc/loadavg").read().split()[:3],
}))
EOF
}

# store PART < JSON: wrap the part's result with the machine metadata.
store() {
    local out="$RESULTS/$1-$STAMP.json"
    python3 -c '
import json, sys
meta = json.loads(sys.argv[3])
body = json.loads(sys.stdin.read())
meta["loadavg_at_end"] = open("/proc/loadavg").read().split()[:3]
json.dump({"part": sys.argv[1], "machine": meta, "result": body}, open(sys.argv[2], "w"), indent=2)
print("bench: wrote", sys.argv[2])
' "$1" "$out" "$META"
    LAST_FILES+=("$out")
}

build() {
    echo "bench: cargo build --release --workspace --bins" >&2
    cargo build --release --workspace --bins
}

# The previous commit's qosd (release), for the side-by-side parts. Built in
# a detached worktree sharing target/ (the dependencies are reused), then
# copied away; our own binary is relinked afterwards.
baseline() {
    if [ "${QOSD_BENCH_BASELINE:-}" = none ]; then
        unset QOSD_BENCH_BASELINE
        return 0
    fi
    if [ -n "${QOSD_BENCH_BASELINE:-}" ]; then
        export QOSD_BENCH_BASELINE
        return 0
    fi
    local rev
    rev=$(git rev-parse --short=12 "${QOSD_BENCH_BASELINE_REV:-$(git merge-base HEAD main)}")
    local out=$ROOT/target/bench-baseline/qosd-$rev
    if [ ! -x "$out" ]; then
        echo "bench: building the baseline qosd at $rev" >&2
        local wt=$ROOT/target/bench-baseline/src-$rev
        rm -rf "$wt"
        git worktree prune
        git worktree add --detach "$wt" "$rev" >&2
        (cd "$wt" && CARGO_TARGET_DIR=$ROOT/target cargo build --release --bin qosd) >&2
        cp "$ROOT/target/release/qosd" "$out"
        git worktree remove --force "$wt"
        # Relink ours (the shared target's qosd is the baseline's now).
        touch "$ROOT/src/main.rs"
        cargo build --release --bin qosd >&2
    fi
    export QOSD_BENCH_BASELINE=$out
    echo "bench: baseline $QOSD_BENCH_BASELINE" >&2
}

earlyoom_bin() {
    if [ -n "${QOSD_BENCH_EARLYOOM:-}" ]; then
        export QOSD_BENCH_EARLYOOM
    elif command -v earlyoom >/dev/null; then
        export QOSD_BENCH_EARLYOOM=earlyoom
    else
        export QOSD_BENCH_EARLYOOM=$("$ROOT/bench/earlyoom.sh")
    fi
}

# A real-pod part: run one ignored function of tests/bench_real.rs.
real() {
    local name=$1 as=${2:-$1}
    if [ "$(id -u)" != 0 ]; then
        echo "bench: skipping $name: needs root (starts containerd, creates cgroups)" >&2
        return 0
    fi
    META=$(meta)
    local log
    log=$(mktemp)
    if [ -n "${QOSD_BENCH_PREBUILT:-}" ]; then
        # The test binary built earlier (no cargo: another build may hold
        # target/'s lock meanwhile).
        local bin
        bin=$(ls -t target/release/deps/bench_real-* | grep -v '\.d$' | head -1)
        "$bin" --ignored --nocapture --exact "$name" | tee "$log"
    else
        cargo test --release --test bench_real -- --ignored --nocapture --exact "$name" | tee "$log"
    fi
    local line
    line=$(grep '^BENCH_JSON ' "$log" | tail -1 | sed 's/^BENCH_JSON //')
    rm -f "$log"
    if [ -z "$line" ]; then
        echo "bench: $name printed no result" >&2
        return 1
    fi
    printf '%s' "$line" | store "$as"
}

plan() {
    local rounds=${QOSD_BENCH_PLAN_ROUNDS:-3} runs=${QOSD_BENCH_PLAN_RUNS:-20}
    META=$(meta)
    local log
    log=$(mktemp)
    # A B A B: the two sizes alternate, each round runs every layout RUNS times.
    for ((r = 1; r <= rounds; r++)); do
        for n in 1000 10000; do
            echo "== round $r, $n pods" | tee -a "$log"
            "$ROOT/target/release/bench_plan" "$n" "$runs" | tee -a "$log"
        done
    done
    python3 - "$log" <<'EOF' | store plan
import json, re, statistics, sys
rows = {}
pods = None
for l in open(sys.argv[1]):
    m = re.match(r"== round (\d+), (\d+) pods", l)
    if m:
        pods = int(m.group(2)); continue
    m = re.match(r"\s+(v\d)\s+(\w+)\s*: wall\s+([\d.]+) /\s+([\d.]+) /\s+([\d.]+) ms, cpu\s+([\d.]+) /\s+([\d.]+) ms\s+\((\d+) writes; JSON ([\d.]+) ms", l)
    if m and pods:
        key = (pods, m.group(1), m.group(2))
        r = rows.setdefault(key, {"wall_min": [], "wall_median": [], "wall_max": [], "cpu_median": [], "writes": int(m.group(8)), "json_ms": []})
        r["wall_min"].append(float(m.group(3)))
        r["wall_median"].append(float(m.group(4)))
        r["wall_max"].append(float(m.group(5)))
        r["cpu_median"].append(float(m.group(7)))
        r["json_ms"].append(float(m.group(9)))
out = []
for (pods, v, d), r in sorted(rows.items()):
    out.append({
        "pods": pods, "cgroup_version": v, "driver": d, "writes": r["writes"],
        "rounds": len(r["wall_median"]),
        "wall_ms_median_of_round_medians": statistics.median(r["wall_median"]),
        "wall_ms_min": min(r["wall_min"]), "wall_ms_max": max(r["wall_max"]),
        "thread_cpu_ms_median": statistics.median(r["cpu_median"]),
        "thread_cpu_ms_range_of_medians": [min(r["cpu_median"]), max(r["cpu_median"])],
        "json_serialise_ms_median": statistics.median(r["json_ms"]),
    })
print(json.dumps({"command": "target/release/bench_plan N RUNS (N = 1000, 10000 alternating)", "results": out}))
EOF
    rm -f "$log"
}

summary() {
    python3 "$ROOT/bench/summary.py" "$@"
}

# The issue-17 idle row: `bench_real hold` keeps 110 real pods on a private
# containerd; bench/idle_threads.py starts each qosd (ours, the previous
# commit's) in turn, A B A B, with default settings, and measures one window
# per run by thread, earlyoom (--dryrun) beside it in the same window.
idle() {
    if [ "$(id -u)" != 0 ]; then
        echo "bench: skipping idle: needs root (starts containerd, creates cgroups)" >&2
        return 0
    fi
    META=$(meta)
    local hold=/tmp/qosd-bench-idle-hold-$$ log
    log=$(mktemp)
    local cmd=(cargo test --release --test bench_real --)
    if [ -n "${QOSD_BENCH_PREBUILT:-}" ]; then
        cmd=("$(ls -t target/release/deps/bench_real-* | grep -v '\.d$' | head -1)")
    fi
    QOSD_BENCH_HOLD_PODS=${QOSD_BENCH_IDLE_PODS:-110} QOSD_BENCH_HOLD_FILE=$hold \
        "${cmd[@]}" --ignored --exact hold >"$log" 2>&1 &
    local holder=$!
    local t=0
    until [ -s "$hold" ]; do
        sleep 1
        t=$((t + 1))
        if ! kill -0 "$holder" 2>/dev/null || [ $t -gt 900 ]; then
            cat "$log" >&2
            echo "bench: the pod holder did not start" >&2
            return 1
        fi
    done
    local bins=(--bin "new=$QOSD_BENCH_QOSD")
    [ -n "${QOSD_BENCH_BASELINE:-}" ] && bins+=(--bin "base=$QOSD_BENCH_BASELINE")
    local rc=0 out
    out=$(python3 "$ROOT/bench/idle_threads.py" "${bins[@]}" --hold "$hold" \
        --rounds "${QOSD_BENCH_IDLE_ROUNDS:-4}" --window "${QOSD_BENCH_IDLE_WINDOW:-60}" \
        --earlyoom "$(command -v "$QOSD_BENCH_EARLYOOM" || echo "$QOSD_BENCH_EARLYOOM")") || rc=$?
    rm -f "$hold"
    wait "$holder" || true
    rm -f "$log"
    [ $rc = 0 ] || return $rc
    printf '%s' "$out" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' | store idle
}

# perf record of the idle daemon (a shorter footprint run), reported as
# the top symbols by thread: bench/results/profile-<stamp>.txt.
profile() {
    if ! perf record -o /dev/null -- true >/dev/null 2>&1; then
        echo "bench: skipping profile: perf record does not work here" >&2
        return 0
    fi
    local data=$RESULTS/profile-$STAMP.data
    QOSD_BENCH_PERF_OUT=$data QOSD_BENCH_DURATION=${QOSD_BENCH_PROFILE_DURATION:-120} \
        QOSD_BENCH_WINDOWS=2 real footprint profile-footprint
    local out=$RESULTS/profile-$STAMP.txt
    {
        echo "# perf record -F 999 -g -p <qosd run>, 110 pods, idle; commit $(git rev-parse --short=12 HEAD)"
        echo "## samples by thread"
        perf report -i "$data" --stdio --no-children --sort comm -g none 2>/dev/null | grep -E '^ +[0-9]'
        echo "## inclusive, by symbol (user space)"
        perf report -i "$data" --stdio --children --sort sym -g none 2>/dev/null \
            | grep -E '^ +[0-9]' | grep -v '\[k\]' | head -40
        echo "## self, by thread and symbol"
        perf report -i "$data" --stdio --no-children --sort comm,dso,sym -g none 2>/dev/null \
            | grep -E '^ +[0-9]' | head -50
    } >"$out"
    rm -f "$data"
    echo "bench: wrote $out"
}

LAST_FILES=()
part=${1:-all}
shift || true
case "$part" in
    summary) summary "$@"; exit 0 ;;
    plan|reconcile|footprint|startup|churn|profile|e2e|idle|all) ;;
    # The eviction-reaction benches have their own drivers (qosd-evict-bench,
    # the VMs); they write bench/results/evict-*.
    evict) exec "$ROOT/bench/evict/run.sh" all ;;
    evict-floor) exec "$ROOT/bench/evict/v1-floor.sh" ;;
    oomd) exec "$ROOT/bench/evict/systemd-oomd.sh" ;;
    pressure) exec "$ROOT/bench/evict/pressure.sh" ;;
    *) echo "usage: bench/run.sh [all|plan|reconcile|footprint|startup|churn|profile|e2e|idle|evict|evict-floor|oomd|pressure|summary]" >&2; exit 2 ;;
esac
[ -n "${QOSD_BENCH_PREBUILT:-}" ] || build
# The qosd under test, copied: a baseline build shares target/.
mkdir -p "$ROOT/target/bench-bin"
cp "${QOSD_BENCH_UNDER_TEST:-$ROOT/target/release/qosd}" "$ROOT/target/bench-bin/qosd-$$"
export QOSD_BENCH_QOSD=$ROOT/target/bench-bin/qosd-$$
trap 'rm -f "$QOSD_BENCH_QOSD"' EXIT
case "$part" in reconcile|startup|idle|all) baseline ;; esac
case "$part" in footprint|profile|idle|all) earlyoom_bin ;; esac
if [ "$part" = all ]; then
    # Real-pod parts share the test binary: build it once up front.
    cargo test --release --test bench_real --no-run
    plan
    real reconcile
    real startup
    real footprint
    idle
    profile
    real churn
    real e2e
    # The eviction-reaction comparisons (host v1, v2 VM, systemd node VM,
    # memory stall).
    "$ROOT/bench/evict/run.sh" all
    "$ROOT/bench/evict/v1-floor.sh"
    "$ROOT/bench/evict/systemd-oomd.sh"
    "$ROOT/bench/evict/pressure.sh"
else
    case "$part" in
        plan) plan ;;
        profile) profile ;;
        idle) idle ;;
        *) real "$part" ;;
    esac
fi
if [ ${#LAST_FILES[@]} -gt 0 ]; then
    summary "${LAST_FILES[@]}"
fi
