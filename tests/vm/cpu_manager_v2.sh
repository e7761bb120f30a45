# The static CPU manager on cgroup v2 with a multi-socket topology (issue 18),
# run as vmtest.service in the Debian systemd node of tests/vm/ booted with
# 2 sockets x 2 cores x 2 threads and one NUMA node per socket. Gathers facts;
# tests/vm/cpu_manager_v2_vm.rs judges them. Results on $VMTEST_RESULTS, one
# `TAG value...` per line.
# Inputs in /test: bin/qosd, bin/qosd-cri-pod, config.yaml, pods1.json
# (x, g1, b), pods2.json (g2), pause.tar.
set -u
exec 3>"$VMTEST_RESULTS"
res() { echo "$*" >&3; }
say() { echo "== $* ($(cut -d' ' -f1 /proc/uptime)s)"; }
EP=unix:///run/containerd/containerd.sock
STATE=/var/lib/qosd/cpu_manager_state
export QOSD_LOG=info,qosd::runtime::daemon=debug

# Count of finished reconcile passes in a daemon log.
passes() { grep -c 'reconciled' "$1" 2>/dev/null || true; }
# Wait (bounded) until the daemon logging to $1 has made $2 more passes.
settle() {
  want=$(( $(passes "$1") + $2 )); i=0
  while [ "$(passes "$1")" -lt "$want" ] && [ $i -lt 240 ]; do sleep 0.5; i=$((i + 1)); done
  res "SETTLED $3 $(passes "$1")/$want"
}
# One line per container of /tmp/pods.out: name, cgroup, cpuset.cpus,
# cpuset.cpus.effective, the process's Cpus_allowed_list.
cpusets() {
  grep '^POD ' /tmp/pods.out | while read -r _ name sb cids; do
    for c in $cids; do
      cg=$(systemctl show -p ControlGroup --value "cri-containerd-$c.scope")
      d=/sys/fs/cgroup$cg
      pid=$(head -n 1 "$d/cgroup.procs" 2>/dev/null)
      allowed=$(grep Cpus_allowed_list "/proc/$pid/status" 2>/dev/null | cut -f2)
      res "CPUSET $1 $name $cg cpus=$(cat "$d/cpuset.cpus" 2>/dev/null || echo MISSING) effective=$(cat "$d/cpuset.cpus.effective" 2>/dev/null || echo MISSING) allowed=${allowed:-none}"
    done
  done
}
state() { res "STATE $1 $(tr -d '\n' < $STATE 2>/dev/null || echo MISSING)"; }
start_qosd() {
  qosd run --config /test/config.yaml > "$1" 2>&1 &
  echo $! > /tmp/qosd.pid
}
stop_qosd() {
  pid=$(cat /tmp/qosd.pid)
  kill -TERM "$pid"; wait "$pid"
  res "EXIT $1 $?"
}

say "facts"
res "CGROUPFS $(stat -fc %T /sys/fs/cgroup)"
res "ONLINE $(cat /sys/devices/system/cpu/online)"
for n in /sys/devices/system/node/node[0-9]*; do res "NODE ${n##*node} $(cat "$n/cpulist")"; done
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  t=$c/topology
  res "TOPO ${c##*cpu} package=$(cat $t/physical_package_id) core=$(cat $t/core_id) siblings=$(cat $t/thread_siblings_list)"
done
ctr -n k8s.io images import /test/pause.tar > /dev/null
res "IMAGES $(ctr -n k8s.io images ls -q | grep -c qosd.test)"

say "1: x (1 CPU), g1 (1 CPU), b (Burstable), then qosd"
qosd-cri-pod run $EP /test/pods1.json > /tmp/pods.out 2>&1
res "PODS1_RC $?"
cat /tmp/pods.out
cpusets BEFORE
start_qosd /tmp/d1.log
settle /tmp/d1.log 3 one
cpusets ONE
state ONE
res "SUBTREE $(cat /sys/fs/cgroup/kubepods.slice/cgroup.subtree_control)"

say "2: x goes"
sb=$(grep '^POD x ' /tmp/pods.out | cut -d' ' -f3)
qosd-cri-pod remove $EP "$sb"
res "REMOVE_RC $?"
grep -v '^POD x ' /tmp/pods.out > /tmp/pods.kept; mv /tmp/pods.kept /tmp/pods.out
settle /tmp/d1.log 3 two
state TWO

say "3: g2 (2 CPUs) arrives"
qosd-cri-pod run $EP /test/pods2.json >> /tmp/pods.out 2>&1
res "PODS2_RC $?"
settle /tmp/d1.log 3 three
cpusets THREE
state THREE
stop_qosd d1

say "4: qosd restarts"
start_qosd /tmp/d2.log
settle /tmp/d2.log 3 four
cpusets FOUR
state FOUR
res "STARTED2 $(grep 'CPU manager started' /tmp/d2.log)"
res "SET2 $(grep -c 'set cpuset' /tmp/d2.log)"
res "DRIFT2 $(grep -c 'corrected cpuset drift' /tmp/d2.log)"
stop_qosd d2

for l in /tmp/d1.log /tmp/d2.log; do
  echo "--- $l"; grep -v 'reconciled' $l | tail -n 40
  grep -E 'set cpuset|CPU manager|refused|cannot set' $l | while read -r line; do res "LOG $(basename $l .log) $line"; done
done
res DONE
