# The systemd node (issue 15), run as vmtest.service in the Debian VM of
# tests/vm/ (qosd_vm.py run --systemd). Gathers facts; tests/vm/systemd_vm.rs
# judges them. Results on $VMTEST_RESULTS, one `TAG value...` per line.
# Inputs in /test: bin/qosd, bin/qosd-cri-pod, pods/ (manifests),
# units.txt (the planned units), files.txt (the planned files), qosd.service,
# config-*.yaml, pods.json (CRI pods), pause.tar, memhog.tar.
set -u
exec 3>"$VMTEST_RESULTS"
res() { echo "$*" >&3; }
say() { echo "== $* ($(cut -d' ' -f1 /proc/uptime)s)"; }
SD=org.freedesktop.systemd1
PROPS="CPUWeight CPUQuotaPerSecUSec CPUQuotaPeriodUSec MemoryMax MemoryMin MemoryHigh TasksMax"
# One unit's state and resource properties as systemd holds them (raw u64).
unit_props() {
  path=$(busctl call $SD /org/freedesktop/systemd1 $SD.Manager GetUnit s "$1" 2>/dev/null | cut -d'"' -f2)
  if [ -z "$path" ]; then echo "$1 none"; return; fi
  st=$(busctl get-property $SD "$path" $SD.Unit ActiveState | cut -d'"' -f2)
  tr=$(busctl get-property $SD "$path" $SD.Unit Transient | cut -d' ' -f2)
  vals=$(busctl get-property $SD "$path" $SD.Slice $PROPS | cut -d' ' -f2 | tr '\n' ' ')
  echo "$1 $st transient=$tr $vals"
}
all_units() { while read -r u; do res "$1 $(unit_props "$u")"; done < /test/units.txt; }
all_files() { while read -r f; do res "$1 $f $(cat "$f" 2>/dev/null || echo MISSING)"; done < /test/files.txt; }
count() { grep -c "$1" "$2" 2>/dev/null || true; }
# qosd_reconciles_total of the qosd on 127.0.0.1:$1 (the test daemon's 9101
# by default; 0 when it does not answer; bash's /dev/tcp: no curl in a
# minimal Debian).
passes() {
  n=$(timeout 10 bash -c 'exec 5<>/dev/tcp/127.0.0.1/$0 || exit 1
    printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&5
    cat <&5' "${1:-9101}" 2>/dev/null | tr -d '\r' | awk '$1 == "qosd_reconciles_total" {print int($2); exit}')
  echo "${n:-0}"
}
passes_at_least() { [ "$(passes "${2:-9101}")" -ge "$1" ]; }
# systemd answers a bus call made after the reload: its main loop realizes
# the cgroups of reloaded units before it reads the next bus message, so the
# files are as the reload left them once this succeeds.
systemd_settled() { systemctl show -p Version > /dev/null; }
# No kubepods slice left in the cgroup tree.
kubepods_gone() { ! test -d /sys/fs/cgroup/kubepods.slice; }
# Wait until the command succeeds, at most $1 seconds (TCG emulation is slow
# and its speed varies with the host's load: wait for the effect, never a
# fixed time). The check after it reports what was found either way.
wait_for() {
  lim=$(($1 * 10)); shift; i=0
  while ! "$@" && [ $i -lt $lim ]; do sleep 0.1; i=$((i + 1)); done
  res "WAITED $1 $((i * 100))ms"
}

say "facts"
res "PID1 $(cat /proc/1/comm)"
res "CGROUPFS $(stat -fc %T /sys/fs/cgroup)"
res "SYSTEMD $(systemctl --version | head -1)"
res "ACTIVE dbus=$(systemctl is-active dbus) containerd=$(systemctl is-active containerd) journald=$(systemctl is-active systemd-journald)"
res "PROPNAMES $PROPS"

# ---------------------------------------------------------------- driver
say "A: the systemd driver, pods from manifests"
Q="qosd run --pods /test/pods --cgroup-driver systemd --cgroup-version v2 --node-cpu 2 --node-memory 2Gi --eviction-hard memory.available<1Mi"
$Q --once --output json > /tmp/once1.json 2> /tmp/once1.log
res "ONCE1_RC $?"
res "ONCE1 $(tr -d '\n' < /tmp/once1.json)"
res "ONCE1_LOG_DRIVER $(grep -c 'managed as systemd units over D-Bus' /tmp/once1.log)"
res "ONCE1_STARTED $(count 'started transient slice unit' /tmp/once1.log)"
all_units UNIT1
all_files FILE1
$Q --once --output json > /tmp/once2.json 2> /tmp/once2.log
res "ONCE2 $(tr -d '\n' < /tmp/once2.json)"
systemctl daemon-reload
wait_for 30 systemd_settled
all_files FILE_RELOAD
all_units UNIT_RELOAD
# The daemon: daemon-reload, a restart and a set-property while it runs.
$Q --reconcile-interval 1s --relist-interval 1s --metrics-address 127.0.0.1:9101 > /tmp/d1.log 2>&1 &
D=$!
wait_for 120 passes_at_least 2
mark=$(wc -l < /tmp/d1.log)
before=$(passes)
systemctl daemon-reload
# Three passes after the reload: any correction it needed is made by then.
wait_for 120 passes_at_least $((before + 3))
res "RELOAD_CORRECTIONS $(tail -n +$((mark + 1)) /tmp/d1.log | grep -c -E 'corrected drift|wrote cgroup value|set unit properties|started transient')"
systemctl set-property --runtime kubepods-burstable.slice CPUWeight=500
res "SETPROP_FILE $(cat /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cpu.weight)"
drift_back() {
  [ "$(grep 'corrected drift' /tmp/d1.log | grep 'kubepods-burstable.slice/cpu.weight' | grep -c 'found=500')" -ge 1 ] &&
    [ "$(grep 'set unit properties' /tmp/d1.log | grep -c 'kubepods-burstable.slice')" -ge 1 ] &&
    [ "$(cat /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cpu.weight)" != 500 ]
}
wait_for 30 drift_back
res "DRIFT_LOG $(grep 'corrected drift' /tmp/d1.log | grep 'kubepods-burstable.slice/cpu.weight' | grep -c 'found=500')"
res "DRIFT_SET $(grep 'set unit properties' /tmp/d1.log | grep -c 'kubepods-burstable.slice')"
res "DRIFT_AFTER $(unit_props kubepods-burstable.slice)"
res "DRIFT_AFTER_FILE $(cat /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cpu.weight)"
kill $D; wait $D
$Q --reconcile-interval 1s --relist-interval 1s --metrics-address 127.0.0.1:9101 > /tmp/d2.log 2>&1 &
D=$!
wait_for 120 passes_at_least 2
kill $D; wait $D
res "RESTART_CORRECTIONS $(grep -c -E 'corrected drift|wrote cgroup value|set unit properties|started transient' /tmp/d2.log)"
res "RESTART_DRIVER $(grep -c 'managed as systemd units over D-Bus' /tmp/d2.log)"
# Leave no slice behind for the next phase.
systemctl stop kubepods.slice
wait_for 30 kubepods_gone
res "A_DONE $(test -d /sys/fs/cgroup/kubepods.slice && echo kubepods-left || echo clean)"
for l in /tmp/once1.log /tmp/d1.log; do echo "--- $l"; tail -n 30 $l; done

# ---------------------------------------------------------------- the unit
say "C: qosd.service started by systemd"
install -m 0755 /test/bin/qosd /usr/local/bin/qosd
install -D -m 0644 /test/config.yaml /etc/qosd/config.yaml
install -m 0644 /test/qosd.service /etc/systemd/system/qosd.service
# The test's drop-in: a shorter watchdog (the shipped 30 s would make the
# restart check slow under emulation) and a probe run before qosd with the
# very same sandbox (ExecStartPre= shares namespaces, seccomp, capabilities).
install -D -m 0644 /test/dropin.conf /etc/systemd/system/qosd.service.d/test.conf
install -m 0755 /test/probe.sh /usr/local/bin/qosd-probe
mkdir -p /var/lib/kubelet
ctr -n k8s.io images import /test/pause.tar > /dev/null && ctr -n k8s.io images import /test/memhog.tar > /dev/null
res "IMAGES $(ctr -n k8s.io images ls -q | grep -c qosd.test)"
systemctl daemon-reload
t0=$(cut -d' ' -f1 /proc/uptime)
systemctl start qosd.service
res "UNIT_START_RC $?"
t1=$(cut -d' ' -f1 /proc/uptime)
res "UNIT_START_S $t0 $t1"
res "UNIT_STATE $(systemctl show -p ActiveState,SubState,Type,WatchdogUSec,NRestarts qosd.service | tr '\n' ' ')"
res "UNIT_SECURITY $(systemd-analyze security qosd.service 2>/dev/null | grep 'Overall exposure' | sed 's/.*qosd.service: //')"
journalctl -u qosd.service -o cat --no-pager | grep '^PROBE' | while read -r l; do res "$l"; done
PID=$(systemctl show -p MainPID --value qosd.service)
res "QOSD_OOM_SCORE_ADJ $(cat /proc/$PID/oom_score_adj)"
res "QOSD_MEMORY_MIN $(cat /sys/fs/cgroup/system.slice/qosd.service/memory.min)"
res "QOSD_SCHED $(cut -d' ' -f41 /proc/$PID/stat) $(for t in /proc/$PID/task/*; do cut -d' ' -f41 $t/stat; done | sort -u | tr '\n' ',')"

# drift under the unit: put back through systemd, logged as a warning
systemctl set-property --runtime kubepods.slice CPUWeight=300
unit_drift_back() {
  [ "$(cat /sys/fs/cgroup/kubepods.slice/cpu.weight)" != 300 ] &&
    [ "$(journalctl -u qosd.service -o cat --no-pager | grep -c 'corrected drift')" -ge 1 ]
}
wait_for 30 unit_drift_back
res "UNIT_DRIFT $(cat /sys/fs/cgroup/kubepods.slice/cpu.weight) $(journalctl -u qosd.service -o cat --no-pager | grep -c 'corrected drift')"

say "B: pods through containerd (SystemdCgroup = true)"
qosd-cri-pod run unix:///run/containerd/containerd.sock /test/pods.json > /tmp/pods.out 2>&1
res "PODS_RC $?"
cat /tmp/pods.out
grep '^POD ' /tmp/pods.out | while read -r l; do res "$l"; done
# Until every pod slice holds qosd's CPUWeight (unset reads as u64::MAX).
pods_set() {
  while read -r _ unit; do
    unit_props "$unit" | grep -q -E 'transient=[a-z]+ 18446744073709551615 | none$' && return 1
  done < /test/podunits.txt
  return 0
}
wait_for 30 pods_set
# One whole pass of the unit's qosd after that: every property set.
wait_for 60 passes_at_least $(($(passes 9847) + 2)) 9847
while read -r tag unit; do
  res "PODUNIT $tag $(unit_props "$unit")"
  d=$(systemctl show -p ControlGroup --value "$unit")
  res "PODFILES $tag $d $(cat /sys/fs/cgroup$d/cpu.weight) $(cat /sys/fs/cgroup$d/cpu.max | tr ' ' '/') $(cat /sys/fs/cgroup$d/memory.max)"
done < /test/podunits.txt
grep '^POD ' /tmp/pods.out | while read -r _ name sb cids; do
  for c in $cids; do
    res "SCOPE $name $(systemctl show -p Slice,ControlGroup,ActiveState cri-containerd-$c.scope | tr '\n' ' ')"
  done
done
for u in kubepods.slice kubepods-burstable.slice kubepods-besteffort.slice; do res "QOSUNIT $(unit_props $u)"; done

say "D: memory-pressure eviction under the unit"
mark=$(journalctl -u qosd.service -o cat --no-pager | wc -l)
qosd-cri-pod run unix:///run/containerd/containerd.sock /test/hog.json > /tmp/hog.out 2>&1
res "HOG_RC $?"
grep '^POD ' /tmp/hog.out | while read -r l; do res "$l"; done
i=0
while [ $i -lt 60 ]; do
  journalctl -u qosd.service -o cat --no-pager | tail -n +$((mark + 1)) | grep -q 'evict' && break
  sleep 1; i=$((i + 1))
done
# Two more passes of the unit's qosd: the eviction's log lines are written.
wait_for 60 passes_at_least $(($(passes 9847) + 2)) 9847
journalctl -u qosd.service -o cat --no-pager | tail -n +$((mark + 1)) | grep -i 'evict' | head -20 | while read -r l; do res "EVLOG $l"; done
res "OOM_KILLS $(grep '^oom_kill ' /sys/fs/cgroup/kubepods.slice/memory.events | cut -d' ' -f2) $(grep -c 'Killed process' /dev/null)"
res "KERNEL_OOM $(journalctl -k -o cat --no-pager | grep -c 'Out of memory')"
res "AFTER_EVICT $(systemctl is-active qosd.service) $(systemctl show -p NRestarts --value qosd.service)"
ctr -n k8s.io tasks ls 2>/dev/null | tail -n +2 | while read -r id pid st; do res "TASK $id $st"; done
# journald: priorities as stored
res "JOURNAL_PRIO $(journalctl -u qosd.service -o json --no-pager | grep -o '"PRIORITY":"[0-9]"' | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
res "JOURNAL_PREFIX_LEFT $(journalctl -u qosd.service -o cat --no-pager | grep -c '^<[0-9]>')"

say "C2: watchdog"
PID=$(systemctl show -p MainPID --value qosd.service)
n0=$(systemctl show -p NRestarts --value qosd.service)
t0=$(cut -d' ' -f1 /proc/uptime)
kill -STOP "$PID"
i=0
while [ $i -lt 120 ]; do
  p=$(systemctl show -p MainPID --value qosd.service)
  st=$(systemctl is-active qosd.service)
  [ "$p" != "$PID" ] && [ "$p" != 0 ] && [ "$st" = active ] && break
  sleep 0.5; i=$((i + 1))
done
t1=$(cut -d' ' -f1 /proc/uptime)
res "WATCHDOG old=$PID new=$(systemctl show -p MainPID --value qosd.service) restarts=$n0->$(systemctl show -p NRestarts --value qosd.service) state=$(systemctl is-active qosd.service) t=$t0->$t1"
res "WATCHDOG_LOG $(journalctl -u qosd.service --no-pager -o cat | grep -c -i 'watchdog timeout')"
journalctl -u qosd.service --no-pager -o cat | tail -n 40
res DONE
