# The rendered DaemonSet's pod on a kubeadm-like systemd node, run as
# vmtest.service in the Debian VM of tests/vm/ (qosd_vm.py run --systemd,
# cgroup v2). Gathers facts; tests/vm/daemonset_vm.rs judges them. Results on
# $VMTEST_RESULTS, one `TAG value...` per line.
#
# Inputs in /test: kubelet.yaml (the kubelet's config file), pod.json (the
# DaemonSet's pod, devtools/src/daemonset_pod.rs), node.json (this node's
# part: pod name, uid, image, cgroup parent), probes.txt (`KIND PATH PORT`),
# qosd.tar / pause.tar / memhog.tar (images), pods.json (two workload pods),
# slices.txt (`UNIT PROPERTY=VALUE...`: the kubelet's slices and values).
set -u
exec 3>"$VMTEST_RESULTS"
res() { echo "$*" >&3; }
say() { echo "== $* ($(cut -d' ' -f1 /proc/uptime)s)"; }
CG=/sys/fs/cgroup
SOCK=/run/containerd/containerd.sock
# Wait until the command succeeds, at most $1 seconds of uptime (emulation
# speed varies: wait for the effect, never a fixed time).
wait_for() {
  lim=$1; shift; t0=$(cut -d. -f1 /proc/uptime)
  while ! "$@"; do
    [ $(($(cut -d. -f1 /proc/uptime) - t0)) -ge "$lim" ] && break
    sleep 0.5
  done
  res "WAITED $* $(($(cut -d. -f1 /proc/uptime) - t0))s"
}
probe() { awk -v k="$1" '$1 == k { print $2, $3 }' /test/probes.txt; }
# GET $1 on port $2 (bash's /dev/tcp: no curl in a minimal Debian).
httpraw() {
  timeout 10 bash -c 'exec 5<>/dev/tcp/127.0.0.1/$2 || exit 1
    printf "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" "$1" >&5
    cat <&5' _ "$1" "$2" 2>/dev/null | tr -d '\r'
}
code() { httpraw "$1" "$2" | head -n 1 | cut -d' ' -f2; }
set -- $(probe readiness); READY_PATH=$1; PORT=$2
set -- $(probe liveness); LIVE_PATH=$1
set -- $(probe startup); START_PATH=$1
ready() { [ "$(code "$READY_PATH" "$PORT")" = 200 ]; }
metric() { httpraw /metrics "$PORT" | awk -v m="$1" '$1 == m { print $2 }'; }
reconciled() { n=$(metric qosd_reconciles_total); [ "${n%.*}" -ge "$1" ] 2>/dev/null; }
# Every value file of every cgroup below kubepods.slice, `PATH FILE VALUE`.
snapshot() {
  find $CG/kubepods.slice -type d | LC_ALL=C sort | while read -r d; do
    for f in cpu.weight cpu.weight.nice cpu.max cpu.idle cpuset.cpus cpuset.mems \
      memory.min memory.low memory.high memory.max memory.swap.max memory.oom.group \
      pids.max io.weight hugetlb.2MB.max; do
      [ -f "$d/$f" ] && res "$1 ${d#$CG/} $f $(tr '\n' ' ' < "$d/$f" | sed 's/ *$//')"
    done
  done
}

res "PID1 $(cat /proc/1/comm)"
res "CGROUPFS $(stat -fc %T $CG)"
res "CONTAINERD $(systemctl is-active containerd.service)"

say "the kubeadm node: kubelet config, the kubelet's slices, workload pods"
install -D -m 0644 /test/kubelet.yaml /var/lib/kubelet/config.yaml
# The slices the kubelet (systemd driver) starts as transient units over
# D-Bus, with its properties: started, then given the values at runtime.
# kubepods' memory.max: the node's capacity less the reservations (256Mi).
ALLOC=$(( $(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo) * 1024 - 268435456 ))
sed "s/@ALLOCATABLE@/$ALLOC/" /test/slices.txt | while read -r unit props; do
  systemctl start "$unit" && systemctl set-property --runtime "$unit" $props
  res "SLICE $unit $? $(systemctl is-active "$unit")"
done
# What systemd has no property for, the kubelet writes itself (its cgroup
# manager enables every controller down the path): a pod without hugepage
# requests may use none.
for d in $CG $CG/kubepods.slice $CG/kubepods.slice/kubepods-burstable.slice $CG/kubepods.slice/kubepods-besteffort.slice; do
  echo +hugetlb > $d/cgroup.subtree_control
done
n=0
for f in $CG/kubepods.slice/kubepods-pod*.slice/hugetlb.*.max $CG/kubepods.slice/*/kubepods-*-pod*.slice/hugetlb.*.max; do
  [ -f "$f" ] && echo 0 > "$f" && n=$((n + 1))
done
res "HUGETLB_ZERO $n"
n=0
for img in /test/pause.tar /test/memhog.tar /test/qosd.tar; do
  ctr --address $SOCK -n k8s.io images import "$img" > /dev/null 2>&1 && n=$((n + 1))
done
res "IMAGES $n"
qosd-cri-pod run unix://$SOCK /test/pods.json > /tmp/pods.out 2>&1
res "PODS_RC $?"
cat /tmp/pods.out
grep '^POD ' /tmp/pods.out | while read -r _ name _; do res "WORKLOAD $name"; done

say "before: every kubepods.slice value"
snapshot BEFORE

say "the DaemonSet pod"
t0=$(cut -d' ' -f1 /proc/uptime)
qosd-cri-pod daemonset unix://$SOCK /test/pod.json /test/node.json > /tmp/ds.out 2>&1
res "DS_RC $?"
cat /tmp/ds.out
wait_for 400 ready
res "READY_AFTER $t0 $(cut -d' ' -f1 /proc/uptime)"
res "READYZ $(code "$READY_PATH" "$PORT")"
res "READYZ_BODY $(httpraw "$READY_PATH" "$PORT" | sed '1,/^$/d' | tr '\n' ' ')"
res "HEALTHZ $(code "$LIVE_PATH" "$PORT")"
res "STARTUP $(code "$START_PATH" "$PORT")"
# Three more passes (reconcileInterval as shipped) before counting writes.
first=$(metric qosd_reconciles_total); first=${first%.*}
wait_for 120 reconciled $((${first:-0} + 3))
res "RECONCILES ${first:-none} $(metric qosd_reconciles_total)"
res "STATUS $(httpraw /status "$PORT" | sed '1,/^$/d' | tr -d '\n')"
for m in qosd_cgroup_writes_total qosd_dry_run_cgroup_writes_total qosd_cgroup_audit_drift qosd_ready; do
  res "METRIC $m $(metric $m)"
done

say "the container as the runtime made it"
PID=$(pgrep -o -f '^/usr/local/bin/qosd run')
res "QOSD_PID ${PID:-none}"
if [ -n "$PID" ]; then
  res "QOSD_CGROUP $(cut -d: -f3 /proc/$PID/cgroup)"
  res "QOSD_ARGS $(tr '\0' ' ' < /proc/$PID/cmdline)"
  res "QOSD_ENV $(tr '\0' '\n' < /proc/$PID/environ | grep '^NODE_NAME=')"
  for f in Uid CapEff CapBnd NoNewPrivs Seccomp; do
    res "QOSD_PROC $f $(awk -v f="$f:" '$1 == f { print $2 }' /proc/$PID/status)"
  done
  # mountinfo: field 5 the mount point, field 6 its options.
  awk '{ print "MOUNT", $5, $6 }' /proc/$PID/mountinfo >&3
fi
res "HOSTNAME $(cat /proc/sys/kernel/hostname)"
LOG=$(find /var/log/pods -name '*.log' | head -n 1)
res "LOG_EROFS $(grep -c -i -E 'read-only file system|os error 30' "$LOG" 2>/dev/null)"
echo "--- qosd's log ($LOG)"; tail -n 25 "$LOG" 2>/dev/null

say "after: every kubepods.slice value"
snapshot AFTER
res DONE
