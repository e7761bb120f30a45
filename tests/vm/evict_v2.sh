# `qosd run` evicting plain processes as pods on a real cgroup v2 kernel: run
# inside the VM by tests/vm/evict_v2_vm.rs (busybox sh; /test/bin holds the
# static qosd and qosd-evict-bench, whose `--hog PROGRESS RATE_MIB TOTAL_MIB`
# mode is the memory hog).
#
# Three manifests (Guaranteed 96Mi, Burstable request 32Mi / limit 1Gi,
# BestEffort), `qosd run` with 400Mi allocatable and
# allocatableMemory.available<80Mi and the kill backend; one hog per pod
# cgroup: Guaranteed holds 40 MiB, BestEffort ramps at 100 MiB/s and, once
# BestEffort holds 96 MiB, Burstable at 50 MiB/s, toward 400 MiB each: more
# than kubepods can hold, so without qosd the kernel OOM killer would fire.
#
# It only gathers facts, one `<TAG> <payload>` line each on $VMTEST_RESULTS;
# the Rust test judges them. The VM is discarded afterwards, but every cgroup
# lives under /sys/fs/cgroup/qosd-test anyway.

set -u
CG=/sys/fs/cgroup
ROOT=qosd-test
K=$CG/$ROOT/kubepods
PODS=/tmp/evict-pods
PORT=9847
SHM_BYTES=2097216 # qosd-evict-bench's progress area: 64 + 2^17 * 16

G_UID=e71c7000-0001-4000-8000-000000000001
B_UID=e71c7000-0002-4000-8000-000000000002
BE_UID=e71c7000-0003-4000-8000-000000000003

res() { printf '%s\n' "$*" > "$VMTEST_RESULTS"; }
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }
# Dead = gone or a zombie (the hogs are this shell's children, reaped late).
dead() {
    [ -r "/proc/$1/stat" ] || return 0
    case "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" in
        Z | X | "") return 0 ;;
    esac
    return 1
}
http_get() { printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" | nc 127.0.0.1 $PORT 2>/dev/null; }
# The body of an HTTP answer, on one line.
http_body() { http_get "$1" | sed '1,/^\r*$/d' | tr -d '\r\n'; }
field() { sed -n "s/^$2 //p" "$1"; }

QPID="" HOGS=""
cleanup() {
    for p in $HOGS $QPID; do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

res "KERNEL $(uname -r)"

mkdir -p $PODS
cat > $PODS/guaranteed.yaml <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: guaranteed
  namespace: evict
  uid: $G_UID
spec:
  containers:
  - name: hog
    image: hog
    resources:
      requests: {cpu: "200m", memory: "96Mi"}
      limits: {cpu: "200m", memory: "96Mi"}
EOF
cat > $PODS/burstable.yaml <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: burstable
  namespace: evict
  uid: $B_UID
spec:
  containers:
  - name: hog
    image: hog
    resources:
      requests: {cpu: "100m", memory: "32Mi"}
      limits: {memory: "1Gi"}
EOF
cat > $PODS/besteffort.yaml <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: besteffort
  namespace: evict
  uid: $BE_UID
spec:
  containers:
  - name: hog
    image: hog
EOF

ip link set lo up
# The cgroup root is the operator's to create (as on a node); qosd fills it.
mkdir -p $CG/$ROOT
t0=$(now_ms)
QOSD_LOG=info qosd run --pods $PODS --cgroup-version v2 --cgroup-root /$ROOT \
    --node-cpu 2 --node-memory 400Mi \
    --eviction-hard 'allocatableMemory.available<80Mi' --eviction-backend kill \
    --metrics-address 127.0.0.1:$PORT --reconcile-interval 1s \
    --log-format text > /tmp/qosd.log 2>&1 &
QPID=$!

# First reconcile: kubepods limited to 400Mi, the pod cgroups created.
while [ "$(cat $K/memory.max 2>/dev/null)" != 419430400 ] && [ $(($(now_ms) - t0)) -lt 60000 ]; do
    sleep 0.1
done
res "KUBEPODS_MAX $(cat $K/memory.max 2>/dev/null) $(($(now_ms) - t0))"
# Stop early (with the log on the console) when the daemon did not start.
bail() {
    res "FATAL $*"
    sed 's/^/qosd: /' /tmp/qosd.log | tail -40
    exit 1
}
dead $QPID && bail "qosd run exited"
[ -d $K ] || bail "no kubepods cgroup"
G_CG=$K/pod$G_UID
B_CG=$K/burstable/pod$B_UID
BE_CG=$K/besteffort/pod$BE_UID
for d in $G_CG $B_CG $BE_CG; do
    res "POD_CGROUP $d $([ -d "$d" ] && echo yes || echo no) $(cat "$d/memory.max" 2>/dev/null)"
done

# The eviction loop has a listing: /status shows the signals.
t1=$(now_ms)
while :; do
    http_body /status > /tmp/status0.json
    grep -q '"signal": *"allocatableMemory.available"' /tmp/status0.json && break
    [ $(($(now_ms) - t1)) -lt 60000 ] || break
    sleep 0.2
done
res "STATUS_READY $(grep -c allocatableMemory.available /tmp/status0.json) $(($(now_ms) - t1))"

# The hogs: started, moved into their pod cgroup, then released together.
hog() { # NAME CGROUP RATE_MIB TOTAL_MIB
    f=/tmp/hog-$1.progress
    dd if=/dev/zero of="$f" bs=1 count=0 seek=$SHM_BYTES 2>/dev/null
    qosd-evict-bench --hog "$f" "$3" "$4" &
    pid=$!
    HOGS="$HOGS $pid"
    echo $pid > "$2/cgroup.procs" || res "MOVE_FAILED $1 $pid"
    res "HOG $1 $pid $(grep -qx $pid "$2/cgroup.procs" && echo in || echo out)"
    eval "PID_$1=$pid"
}
hog guaranteed $G_CG 100 40
hog burstable $B_CG 50 400
hog besteffort $BE_CG 100 400
# Each hog sets the progress area's first word once mapped; then go (word 1).
for n in guaranteed burstable besteffort; do
    i=0
    while [ "$(od -An -tu1 -j0 -N1 /tmp/hog-$n.progress | tr -d ' ')" != 1 ] && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
done
res "BASE_CURRENT $(cat $K/memory.current)"
go() { printf '\001' | dd of=/tmp/hog-$1.progress bs=1 seek=8 conv=notrunc 2>/dev/null; }
tgo=$(now_ms)
go guaranteed
go besteffort
# Under emulation the hogs are CPU-bound and their rates are not what they
# ask for (BestEffort may well grow slower than Burstable): BestEffort gets a
# 96 MiB head start, so it is the larger one over its request (0) at the
# line, whatever the CPU split. The kubelet ranks by usage above the request,
# not by QoS class; this makes "BestEffort first" the right answer.
while [ "$(cat $BE_CG/memory.current)" -lt $((96 << 20)) ] && [ $(($(now_ms) - tgo)) -lt 60000 ]; do
    sleep 0.05
done
res "BURSTABLE_GO $(($(now_ms) - tgo)) $(cat $BE_CG/memory.current)"
go burstable

# Who dies, and when (ms after the go); the peak of kubepods' usage.
peak=0
order=""
while [ $(($(now_ms) - tgo)) -lt 120000 ]; do
    for n in guaranteed burstable besteffort; do
        eval "pid=\$PID_$n"
        case " $order " in *" $n "*) continue ;; esac
        if dead "$pid"; then
            order="$order $n"
            res "DIED $n $(($(now_ms) - tgo)) $(cat $K/memory.current)"
        fi
    done
    cur=$(cat $K/memory.current)
    [ "$cur" -gt "$peak" ] && peak=$cur
    case "$order" in *burstable*besteffort* | *besteffort*burstable*) break ;; esac
    sleep 0.05
done
res "ORDER$order"
res "PEAK_CURRENT $peak"
# The Guaranteed pod outlives the evictions by a few reconcile passes: three
# more counted in qosd_reconciles_total (at most 60 s), or until it dies.
r0=$(reconciles)
t4=$(now_ms)
until [ "$(reconciles)" -ge $((r0 + 3)) ] || dead "$PID_guaranteed"; do
    [ $(($(now_ms) - t4)) -lt 60000 ] || bail "fewer than 3 reconcile passes within 60 s after the evictions"
    sleep 0.2
done
for n in guaranteed burstable besteffort; do
    eval "pid=\$PID_$n"
    res "ALIVE $n $(dead "$pid" && echo no || echo yes)"
done

# /status, whole (busybox nc under emulation may hand back a short read: retry).
i=0
while :; do
    http_body /status > /tmp/status.json
    case "$(cat /tmp/status.json)" in "{"*"}") break ;; esac
    i=$((i + 1))
    [ $i -lt 10 ] || break
    sleep 0.3
done
res "STATUS_TRIES $((i + 1))"
res "STATUS $(cat /tmp/status.json)"
http_get /metrics | grep -E '^qosd_evictions_total' | while read -r l; do res "METRIC $l"; done
for d in $K $K/burstable $K/besteffort $G_CG $B_CG $BE_CG; do
    res "EVENTS $d oom $(field $d/memory.events oom) oom_kill $(field $d/memory.events oom_kill) max $(field $d/memory.events max)"
done
res "WATCHER_STARTED $(grep -c 'fast memory watcher started' /tmp/qosd.log)"
res "EVICTIONS_LOGGED $(grep -c 'evicting pod' /tmp/qosd.log)"
res "ELAPSED_MS $(($(now_ms) - t0))"

kill -TERM $QPID
wait $QPID
res "QOSD_EXIT $?"
QPID=""
grep -E 'evict|watcher|WARN|ERROR' /tmp/qosd.log | sed 's/^/qosd: /' | head -40
res "DONE"
