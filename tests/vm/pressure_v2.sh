# `qosd run` evicting on memory stall (PSI) on a real cgroup v2 kernel: run
# inside the VM by tests/vm/pressure_v2_vm.rs (busybox sh; /test/bin holds the
# static qosd, memhog and thrash). QUIET_S (seconds) is set by the test
# before this text.
#
# Three manifests (Guaranteed 96Mi, Burstable request 32Mi / limit 1Gi,
# BestEffort), `qosd run` with no byte threshold at all and one pressure
# threshold, `memory.full>=10%/2s`, the kill backend. Every pod holds some
# memory and sleeps (memhog): Guaranteed 20 MiB, Burstable 8 MiB,
# BestEffort 40 MiB (the kubelet's memory order would take BestEffort first).
#
# 1. Quiet: QUIET_S seconds of the VM's clock with the trigger armed, a
#    short-lived 64 MiB allocation in the BestEffort pod every 60 s (memory
#    use without stall). Nothing may be evicted; qosd's CPU time and the
#    pressure watcher thread's wake-ups over the phase are recorded.
# 2. Stall: in a child cgroup of the Burstable pod with memory.high 48M,
#    `thrash --anon 80` keeps replacing 80 MiB of anonymous memory; above
#    memory.high without swap every allocation is throttled (a memory stall
#    in the pod's and the node's memory.pressure). qosd must evict the
#    Burstable pod (the one that stalls), once, and nothing else.
#
# It only gathers facts, one `<TAG> <payload>` line each on $VMTEST_RESULTS;
# the Rust test judges them. Every cgroup lives under /sys/fs/cgroup/qosd-test.

set -u
CG=/sys/fs/cgroup
ROOT=qosd-test
K=$CG/$ROOT/kubepods
PODS=/tmp/pressure-pods
PORT=9847

G_UID=9e55c000-0001-4000-8000-000000000001
B_UID=9e55c000-0002-4000-8000-000000000002
BE_UID=9e55c000-0003-4000-8000-000000000003

res() { printf '%s\n' "$*" > "$VMTEST_RESULTS"; }
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }
dead() {
    [ -r "/proc/$1/stat" ] || return 0
    case "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" in
        Z | X | "") return 0 ;;
    esac
    return 1
}
http_get() { printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" | nc 127.0.0.1 $PORT 2>/dev/null; }
http_body() { http_get "$1" | sed '1,/^\r*$/d' | tr -d '\r\n'; }
metric() { http_get /metrics | grep -F "$1" | awk '{ print $NF }' | head -1; }
# /status, whole (busybox nc under emulation may hand back a short read: retry).
status() {
    i=0
    while :; do
        http_body /status > /tmp/status.json
        case "$(cat /tmp/status.json)" in "{"*"}") return 0 ;; esac
        i=$((i + 1))
        [ $i -lt 10 ] || return 1
        sleep 0.3
    done
}
evictions() { status && grep -o '"backend":' /tmp/status.json | wc -l; }
# Resident KiB of a pid (0 once it is gone).
rss_kib() {
    n=$(awk '/^VmRSS:/ { print $2; exit }' "/proc/$1/status" 2>/dev/null)
    echo "${n:-0}"
}
# utime + stime of a pid, clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# voluntary + involuntary context switches of qosd's thread named $1
thread_switches() {
    for t in /proc/$QPID/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = "$1" ]; then
            awk '/ctxt_switches/ { n += $2 } END { print n }' "$t/status"
            return
        fi
    done
    echo none
}

QPID="" KIDS=""
cleanup() {
    for p in $KIDS $QPID; do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT
bail() {
    res "FATAL $*"
    sed 's/^/qosd: /' /tmp/qosd.log | tail -40
    exit 1
}

res "KERNEL $(uname -r)"
res "PSI $(tr '\n' ' ' < /proc/pressure/memory)"

mkdir -p $PODS
pod() { # FILE NAME UID RESOURCES
    {
        echo "apiVersion: v1"
        echo "kind: Pod"
        echo "metadata: {name: $2, namespace: pressure, uid: $3}"
        echo "spec:"
        echo "  containers:"
        echo "  - name: app"
        echo "    image: app"
        [ -n "$4" ] && echo "    resources: $4"
    } > "$PODS/$1.yaml"
}
pod guaranteed guaranteed $G_UID '{requests: {cpu: "200m", memory: "96Mi"}, limits: {cpu: "200m", memory: "96Mi"}}'
pod burstable burstable $B_UID '{requests: {cpu: "100m", memory: "32Mi"}, limits: {memory: "1Gi"}}'
pod besteffort besteffort $BE_UID ''

ip link set lo up
mkdir -p $CG/$ROOT
t0=$(now_ms)
QOSD_LOG=info qosd run --pods $PODS --cgroup-version v2 --cgroup-root /$ROOT \
    --node-cpu 2 --node-memory 600Mi \
    --eviction-hard '' --eviction-pressure-hard 'memory.full=10%/2s' \
    --eviction-backend kill --metrics-address 127.0.0.1:$PORT \
    --reconcile-interval 1s --log-format text > /tmp/qosd.log 2>&1 &
QPID=$!

G_CG=$K/pod$G_UID
B_CG=$K/burstable/pod$B_UID
BE_CG=$K/besteffort/pod$BE_UID
while { [ ! -d $G_CG ] || [ ! -d $B_CG ] || [ ! -d $BE_CG ]; } && [ $(($(now_ms) - t0)) -lt 60000 ]; do
    sleep 0.1
done
dead $QPID && bail "qosd run exited"
for d in $G_CG $B_CG $BE_CG; do
    [ -d "$d" ] || bail "no pod cgroup $d"
done

# The trigger armed, the pods listed.
t1=$(now_ms)
while :; do
    status
    grep -q '"mode": *"trigger"' /tmp/status.json && grep -q '"best_effort": *1' /tmp/status.json && break
    [ $(($(now_ms) - t1)) -lt 60000 ] || bail "memory.full never armed: $(cat /tmp/status.json)"
    sleep 0.2
done
res "ARMED $(($(now_ms) - t1))"
res "ARMED_STATUS $(cat /tmp/status.json)"

# Each pod holds memory and sleeps; the Burstable pod's processes live in
# children of its cgroup (cgroup v2: no process beside child cgroups with
# controllers), as containers do.
hold() { # CGROUP MIB
    memhog "$2" > /dev/null &
    pid=$!
    KIDS="$KIDS $pid"
    echo $pid > "$1/cgroup.procs" || res "MOVE_FAILED $1 $pid"
    eval "PID_$3=$pid"
}
mkdir $B_CG/app $B_CG/stall
echo +memory > $B_CG/cgroup.subtree_control || res "SUBTREE_FAILED $(cat $B_CG/cgroup.subtree_control)"
hold $G_CG 20 g
hold $B_CG/app 8 b
hold $BE_CG 40 be

# 1. Quiet.
q0=$(now_ms)
cpu0=$(cpu_ticks $QPID)
sw0=$(thread_switches qosd-psi-watch)
full0=$(awk '/^full/ { sub("total=", "", $5); print $5 }' /proc/pressure/memory)
churn=0
while [ $(($(now_ms) - q0)) -lt $((QUIET_S * 1000)) ]; do
    sleep 10
    dead $QPID && bail "qosd run exited in the quiet phase"
    n=$(evictions)
    [ "$n" = 0 ] || { res "QUIET_EVICTED $n $(($(now_ms) - q0))"; break; }
    if [ $(($(now_ms) - q0)) -ge $(((churn + 1) * 60000)) ]; then
        churn=$((churn + 1))
        memhog 64 > /dev/null &
        c=$!
        echo $c > $BE_CG/cgroup.procs
        # Held until it is resident and a reconcile pass has seen it.
        tc=$(now_ms)
        until [ "$(rss_kib $c)" -ge $((64 << 10)) ]; do
            [ $(($(now_ms) - tc)) -lt 30000 ] || bail "the churn memhog did not hold its 64 MiB within 30 s"
            sleep 0.1
        done
        r0=$(reconciles)
        tc=$(now_ms)
        until [ "$(reconciles)" -gt "$r0" ]; do
            [ $(($(now_ms) - tc)) -lt 30000 ] || bail "no reconcile pass within 30 s of the churn"
            sleep 0.5
        done
        kill -TERM $c
        wait $c 2>/dev/null
    fi
done
q1=$(now_ms)
res "QUIET_MS $((q1 - q0))"
res "QUIET_CHURNS $churn"
res "QUIET_CPU_TICKS $(($(cpu_ticks $QPID) - cpu0))"
res "QUIET_PSI_THREAD_SWITCHES $sw0 $(thread_switches qosd-psi-watch)"
res "QUIET_FULL_STALL_US $(($(awk '/^full/ { sub("total=", "", $5); print $5 }' /proc/pressure/memory) - full0))"
res "QUIET_EVICTIONS $(evictions)"
res "QUIET_STATUS $(cat /tmp/status.json)"

# 2. Stall: the Burstable pod's child at memory.high 48M, 80 MiB replaced.
echo $((48 << 20)) > $B_CG/stall/memory.high
thrash --anon 80 > /dev/null &
TPID=$!
KIDS="$KIDS $TPID"
echo $TPID > $B_CG/stall/cgroup.procs || res "MOVE_FAILED stall $TPID"
tgo=$(now_ms)
res "STALL_START $(tr '\n' ' ' < /proc/pressure/memory)"
while ! dead $TPID && [ $(($(now_ms) - tgo)) -lt 120000 ]; do
    sleep 0.05
done
dead $TPID && res "DIED thrash $(($(now_ms) - tgo))"
res "STALL_END $(tr '\n' ' ' < $B_CG/memory.pressure 2>/dev/null)"
res "NODE_AT_END $(tr '\n' ' ' < /proc/pressure/memory)"
# Once, and only the staller: the stall is over, memory.full no longer met.
t2=$(now_ms)
while :; do
    status
    grep -q '"met": *false' /tmp/status.json && break
    [ $(($(now_ms) - t2)) -lt 60000 ] || { res "STILL_MET"; break; }
    sleep 0.2
done
for n in g b be; do
    eval "pid=\$PID_$n"
    res "ALIVE $n $(dead "$pid" && echo no || echo yes)"
done
res "STATUS $(cat /tmp/status.json)"
http_get /metrics | grep -E '^qosd_(evictions_total\{eviction_signal="memory.full"|signal_pressure)' | while read -r l; do res "METRIC $l"; done
res "EVICTIONS_LOGGED $(grep -c 'evicting pod' /tmp/qosd.log)"
res "WATCHED $(grep -c 'pressure signal watched' /tmp/qosd.log)"

kill -TERM $QPID
wait $QPID
res "QOSD_EXIT $?"
QPID=""
grep -E 'evict|pressure|WARN|ERROR' /tmp/qosd.log | sed 's/^/qosd: /' | head -40
res "DONE"
