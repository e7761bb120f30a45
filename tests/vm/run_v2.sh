# `qosd run` on a real cgroup v2 kernel: run inside the VM by tests/vm/run_v2_vm.rs
# (busybox sh, /test/bin/qosd static, the fixture manifests in /test/pods).
#
# It only gathers facts; the Rust test judges them. Every fact is one line on
# $VMTEST_RESULTS: `<TAG> <payload>` where the tag is `<scenario>.<what>`.
# JSON documents are squeezed onto one line.
#
# Cgroups are created under /sys/fs/cgroup/qosd-test-<pid>* only and removed
# (leaf first) at the end.

set -u
CG=/sys/fs/cgroup
PODS=/test/pods
ID=$$
NODE="--node-cpu 4 --node-memory 8Gi"

res() { printf '%s\n' "$*" > "$VMTEST_RESULTS"; }
# Squeeze a (pretty-printed) JSON file onto one result line.
res_json() { res "$1 $(tr -d '\n' < "$2")"; }
# Milliseconds since boot (10 ms resolution).
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }
# Every interface file named in a qosd JSON document, once.
files_of() { sed -n 's/.*"file": "\([^"]*\)".*/\1/p' "$1" | sort -u; }
# Remove a cgroup tree, leaf first.
rmtree() { [ -d "$1" ] && find "$1" -depth -type d -exec rmdir {} \; 2>/dev/null; true; }

ROOTS=""
cleanup() {
    for r in $ROOTS; do rmtree "$CG/$r"; done
}
trap cleanup EXIT

res "KERNEL $(uname -r)"
res "ROOT_SUBTREE $(cat $CG/cgroup.subtree_control)"

# scenario NAME ROOT_DIR CGROUP_ROOT FRESH_DIR FRESH_CGROUP_ROOT QOSD_ARGS...
#   (memqos: no drift steps)
#   ROOT_DIR: the directory the --cgroup-root CGROUP_ROOT maps to (systemd: a
#   slice); FRESH_*: a second, empty root for the dry run. $RUNX: extra flags
#   of `qosd run` only, $PLANX: their `qosd plan` spelling.
RUNX="" PLANX=""
scenario() {
    name=$1 rootdir=$2 root=$3 fresh=$4 freshroot=$5
    shift 5
    ARGS="$*"
    ROOTS="$ROOTS $rootdir"
    mkdir "$CG/$rootdir" || { res "$name.FATAL cannot create $CG/$rootdir"; return; }
    res "$name.ROOTDIR $CG/$rootdir"

    # 1. first pass: creates and sizes the tree.
    t0=$(now_ms)
    q once1 run --once
    res "$name.ONCE1_MS $(($(now_ms) - t0))"

    # 2. read every planned file back from the kernel.
    for f in $(files_of /tmp/$name.once1.json); do
        if [ -r "$f" ]; then
            res "$name.READ $f $(cat "$f")"
        else
            res "$name.MISSING $f"
        fi
    done
    # subtree_control of the mount root and of every directory below the root.
    res "$name.SUBTREE $CG $(cat $CG/cgroup.subtree_control)"
    for d in $(find "$CG/$rootdir" -type d); do
        res "$name.SUBTREE $d $(cat "$d/cgroup.subtree_control")"
    done

    # 3. steady state: nothing to write.
    t0=$(now_ms)
    q once2 run --once
    res "$name.ONCE2_MS $(($(now_ms) - t0))"

    if [ "$name" != memqos ]; then
        # drift on one pod's cpu.weight: the dry run reports the one write and
        # makes none; the real pass makes exactly that write.
        drift=$(files_of /tmp/$name.once1.json | grep -E '(/|-)pod[^/]*/cpu.weight$' | head -1)
        echo 5000 > "$drift"
        res "$name.DRIFT $drift $(cat "$drift")"
        q dry run --dry-run --once
        res "$name.AFTERDRY $drift $(cat "$drift")"
        q once3 run --once
        res "$name.AFTERDRIFT $drift $(cat "$drift")"
    fi

    # 4. dry run on a fresh, empty root: creates nothing; its plan is `qosd plan`'s.
    ROOTS="$ROOTS $fresh"
    mkdir "$CG/$fresh"
    root=$freshroot
    q dryfresh run --dry-run --once
    res "$name.DRYFRESH_DIRS $(find "$CG/$fresh" -mindepth 1 -type d | wc -l)"
    q plan plan
}

# q STEP SUBCOMMAND ARGS...: run qosd with the scenario's flags; JSON output
# goes to $VMTEST_RESULTS as <scenario>.<STEP>, the exit code as .<STEP>_RC;
# the log is shown on the console only when qosd failed.
q() {
    step=$1 sub=$2
    shift 2
    if [ "$sub" = plan ]; then x=$PLANX; else x=$RUNX; fi
    # shellcheck disable=SC2086
    qosd "$sub" "$@" --output json --pods $PODS --cgroup-root "$root" $x $ARGS \
        > /tmp/$name.$step.json 2> /tmp/$name.$step.err
    rc=$?
    res "$name.${step}_RC $rc"
    res_json "$name.$step" /tmp/$name.$step.json
    [ $rc -eq 0 ] || sed "s/^/$name.$step stderr: /" /tmp/$name.$step.err | head -40
}

BASE="--cgroup-version v2 --cgroupfs $CG $NODE"
# shellcheck disable=SC2086
scenario cgroupfs qosd-test-$ID /qosd-test-$ID qosd-test-$ID-fresh /qosd-test-$ID-fresh $BASE
# The systemd driver escapes '-' to '_' in slice names.
# shellcheck disable=SC2086
scenario systemd qosd_test_$ID.slice /qosd-test-$ID qosd_test_${ID}_fresh.slice /qosd-test-$ID-fresh \
    --cgroup-driver systemd $BASE
# MemoryQoS: `qosd run --memory-qos true` is `qosd plan --memory-qos`
# (kubelet 1.35's model, memory.min = request; 1.36's tiers are checked in
# tests/vm/cgroup_v2_vm.rs).
RUNX="--memory-qos true --kubelet-version 1.35" PLANX="--memory-qos --kubelet-version 1.35"
# shellcheck disable=SC2086
scenario memqos qosd-test-$ID-mq /qosd-test-$ID-mq qosd-test-$ID-mqfresh /qosd-test-$ID-mqfresh $BASE
RUNX="" PLANX=""

# 5. the daemon, on the cgroupfs scenario's (converged) tree.
ip link set lo up
K=$CG/qosd-test-$ID/kubepods
ORPHAN=$K/besteffort/podffffffff-0000-4000-8000-000000000099
BUSY=$K/burstable/podffffffff-0000-4000-8000-000000000098
mkdir "$ORPHAN" "$BUSY"
sleep 120 &
SLEEPER=$!
echo $SLEEPER > "$BUSY/cgroup.procs"
res "DAEMON.BUSY_PROCS $(cat "$BUSY/cgroup.procs" | tr '\n' ' ')"

# The daemon reads a copy of the manifests, so pods can come and go.
LIVE=/tmp/live-pods
cp -r $PODS $LIVE
t0=$(now_ms)
# shellcheck disable=SC2086
qosd run --pods $LIVE --cgroup-root /qosd-test-$ID $BASE \
    --reconcile-interval 500ms --relist-interval 200ms --orphan-grace-period 0s \
    --metrics-address 127.0.0.1:10259 --log-format text > /tmp/daemon.log 2>&1 &
QPID=$!
# The orphan goes on the first pass (deadlines are generous: emulation on a
# busy host is slow; the test judges the times).
while [ -d "$ORPHAN" ] && [ $(($(now_ms) - t0)) -lt 30000 ]; do sleep 0.05; done
res "DAEMON.ORPHAN_GONE $([ -d "$ORPHAN" ] && echo no || echo yes) $(($(now_ms) - t0))"
res "DAEMON.BUSY_KEPT $([ -d "$BUSY" ] && echo yes || echo no)"

drift=$K/pod6c1a1f2e-0001-4d5e-9a00-000000000001/cpu.max
before=$(cat "$drift")
echo "max 100000" > "$drift"
res "DAEMON.DRIFT $drift $before"
t1=$(now_ms)
while [ "$(cat "$drift")" != "$before" ] && [ $(($(now_ms) - t1)) -lt 15000 ]; do sleep 0.05; done
res "DAEMON.CORRECTED $(cat "$drift") $(($(now_ms) - t1))"

# The HTTP side answers on loopback (busybox nc; HTTP/1.0 closes after the answer).
http_get() { printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" | nc 127.0.0.1 10259 2>&1; }
res "DAEMON.HEALTHZ $(http_get /healthz | head -1 | tr -d '\r')"
# busybox nc under emulation may hand back a short read: retry until the
# counters are there.
i=0
while :; do
    http_get /metrics > /tmp/metrics.txt
    grep -q '^qosd_cgroup_writes_total ' /tmp/metrics.txt && break
    i=$((i + 1))
    [ $i -lt 10 ] || break
    sleep 0.3
done
res "DAEMON.METRICS_TRIES $((i + 1))"
res "DAEMON.METRICS_LINES $(grep -c '^qosd_' /tmp/metrics.txt)"
grep -E '^qosd_(cgroup_writes_total|reconciles_total|errors_total|pods)[ {]' /tmp/metrics.txt |
    while read -r l; do res "DAEMON.METRIC $l"; done

# Pods come and go: a burstable pod's manifest disappears; its (empty) cgroup
# goes and the burstable level's cpu.weight follows the plan without it; the
# manifest comes back; so do the cgroup and the weight.
GONE=$K/burstable/pod6c1a1f2e-0004-4d5e-9a00-000000000004
QOSW=$K/burstable/cpu.weight
mkdir /tmp/fewer-pods
cp $LIVE/* /tmp/fewer-pods/ && rm /tmp/fewer-pods/04-frontend.yaml
# shellcheck disable=SC2086
qosd plan --pods /tmp/fewer-pods --output json --cgroup-root /qosd-test-$ID $BASE > /tmp/fewer.json
want=$(grep -A1 "\"$QOSW\"" /tmp/fewer.json | sed -n 's/.*"value": "\(.*\)".*/\1/p')
was=$(cat $QOSW)
res "DAEMON.QOSW $was $want"
mv $LIVE/04-frontend.yaml /tmp/04-frontend.yaml
t3=$(now_ms)
while { [ -d "$GONE" ] || [ "$(cat $QOSW)" != "$want" ]; } && [ $(($(now_ms) - t3)) -lt 15000 ]; do
    sleep 0.05
done
res "DAEMON.POD_REMOVED $([ -d "$GONE" ] && echo no || echo yes) $(cat $QOSW) $(($(now_ms) - t3))"
mv /tmp/04-frontend.yaml $LIVE/04-frontend.yaml
t3=$(now_ms)
while { [ ! -r "$GONE/cpu.max" ] || [ "$(cat $QOSW)" != "$was" ]; } && [ $(($(now_ms) - t3)) -lt 15000 ]; do
    sleep 0.05
done
res "DAEMON.POD_BACK $(cat $QOSW) $(($(now_ms) - t3))"
# Let the pass that recreated it finish its writes: one more pass counted
# in qosd_reconciles_total (at most 15 s).
r0=$(reconciles)
t3=$(now_ms)
until [ "$(reconciles)" -gt "$r0" ]; do
    if [ $(($(now_ms) - t3)) -ge 15000 ]; then
        res "FATAL no reconcile pass within 15 s after the pod came back"
        exit 1
    fi
    sleep 0.05
done
res "DAEMON.POD_BACK_CPUMAX $(cat "$GONE/cpu.max")"
res "DAEMON.POD_BACK_MEMMAX $(cat "$GONE/memory.max")"

# What starting and ending this binary costs under emulation, for scale.
t2=$(now_ms)
qosd --version > /dev/null
res "DAEMON.VERSION_MS $(($(now_ms) - t2))"

# SIGTERM: exit 0 promptly (a watchdog kills it after 20 s so the run ends).
(sleep 20; kill -KILL $QPID 2>/dev/null) &
WATCHDOG=$!
t2=$(now_ms)
kill -TERM $QPID
wait $QPID
rc=$?
res "DAEMON.EXIT $rc $(($(now_ms) - t2))"
kill $WATCHDOG 2>/dev/null
grep -v ' INFO ' /tmp/daemon.log | sed 's/^/daemon: /' | head -40
res "DAEMON.LOG_LINES $(wc -l < /tmp/daemon.log)"
grep -c 'corrected drift' /tmp/daemon.log | sed 's/^/DAEMON.DRIFT_LOGGED /' > "$VMTEST_RESULTS"

kill $SLEEPER
wait $SLEEPER 2>/dev/null
# Wait for the killed process to leave the cgroup, then clean up.
i=0
while [ -s "$BUSY/cgroup.procs" ] && [ $i -lt 50 ]; do sleep 0.02; i=$((i + 1)); done
cleanup
left=""
for r in $ROOTS; do [ -d "$CG/$r" ] && left="$left $r"; done
res "CLEANUP_LEFT${left:- none}"
res "DONE"
