# The Debian package and its unit on a systemd node (cgroup v1 or v2: the
# kernel command line decides), run as vmtest.service in the Debian VM of
# tests/vm/ (qosd_vm.py run --systemd [--cgroup v1]). Gathers facts;
# tests/vm/systemd_vm.rs judges them. Results on $VMTEST_RESULTS, one
# `TAG value...` per line. Inputs in /test: qosd.deb, enforce.yaml (qosd's
# config writing every kind of cgroup), audit.yaml (beside a kubelet),
# kubelet.yaml (a kubeadm node's kubelet config), reserved.conf (the
# documented drop-in opening the kube-reserved cgroup), orphans.conf,
# bad.yaml.
set -u
exec 3>"$VMTEST_RESULTS"
res() { echo "$*" >&3; }
say() { echo "== $* ($(cut -d' ' -f1 /proc/uptime)s)"; }
CG=/sys/fs/cgroup
# Wait until the command succeeds, at most $1 seconds of uptime (emulation
# speed varies: wait for the effect, never a fixed time).
wait_for() {
  lim=$1; shift; t0=$(cut -d. -f1 /proc/uptime)
  while ! "$@"; do
    [ $(($(cut -d. -f1 /proc/uptime) - t0)) -ge "$lim" ] && break
    sleep 0.2
  done
  res "WAITED $lim $(($(cut -d. -f1 /proc/uptime) - t0))s"
}
# The HTTP status of GET $1 on qosd's metrics address (bash's /dev/tcp: no
# curl in a minimal Debian).
http() { httpraw "$1" | head -n 1 | cut -d' ' -f2; }
httpraw() {
  timeout 10 bash -c 'exec 5<>/dev/tcp/127.0.0.1/9847 || exit 1
    printf "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" "$1" >&5
    cat <&5' _ "$1" 2>/dev/null | tr -d '\r'
}
state() { systemctl show -p ActiveState,SubState,Result,NRestarts,ExecMainStatus qosd.service | tr '\n' ' '; }
active_ready() { [ "$(systemctl is-active qosd.service)" = active ] && [ "$(http /readyz)" = 200 ]; }
# Hierarchies: v2 one, v1 every mounted one (cpu and cpuacct are links to
# cpu,cpuacct; skip links).
if [ "$(stat -fc %T $CG)" = cgroup2fs ]; then
  V=v2; HIER=.
else
  V=v1; HIER=$(for h in $CG/*; do [ -L "$h" ] || [ ! -d "$h" ] || basename "$h"; done)
fi
res "PID1 $(cat /proc/1/comm)"
res "CGROUP $V $(stat -fc %T $CG) $(echo $HIER | tr '\n' ' ')"
eroft() { journalctl -u qosd.service -o cat --no-pager | grep -c -i -E 'read-only file system|os error 30'; }

say "P: the package, the shipped config"
# As the kubelet (cgroupfs driver) would have: kubepods in every hierarchy.
for h in $HIER; do mkdir -p $CG/$h/kubepods/burstable $CG/$h/kubepods/besteffort; done
mkdir -p /var/lib/kubelet
dpkg -i /test/qosd.deb > /tmp/dpkg.log 2>&1
res "DPKG_RC $?"
cat /tmp/dpkg.log
for f in /usr/bin/qosd /usr/lib/systemd/system/qosd.service /etc/qosd/config.yaml \
  /usr/share/man/man1/qosd.1.gz /usr/share/bash-completion/completions/qosd \
  /usr/share/zsh/vendor-completions/_qosd /usr/share/fish/vendor_completions.d/qosd.fish; do
  res "PKGFILE $f $(test -s $f && echo present || echo missing)"
done
res "CONFFILES $(dpkg-query -W -f='${Conffiles}' qosd | awk '{print $1}' | tr '\n' ' ')"
res "MAN $(zcat /usr/share/man/man1/qosd.1.gz | grep -c '^\.TH')"
res "INSTALLED_STATE $(systemctl is-enabled qosd.service 2>&1) $(systemctl is-active qosd.service 2>&1)"
systemctl enable --now qosd.service > /tmp/enable.log 2>&1
res "ENABLE_RC $?"
cat /tmp/enable.log
wait_for 60 active_ready
res "P_STATE $(state)"
res "P_READYZ $(http /readyz)"
res "P_READYZ_BODY $(httpraw /readyz | tail -n 3 | tr '\n' ' ')"
res "P_ENABLED $(systemctl is-enabled qosd.service)"
res "P_EROFS $(eroft)"
journalctl -u qosd.service -o cat --no-pager | tail -n 15

say "E: enforce, every kind of write and removal on $V"
systemctl stop qosd.service
# Orphaned pod cgroups as a runtime leaves them, in every hierarchy.
OUID=0e0e0e0e-0000-4000-8000-00000000000e
for h in $HIER; do mkdir -p $CG/$h/kubepods/besteffort/pod$OUID; done
# The kube-reserved cgroup: made by the node's admin, written by qosd (on
# v2 directly below the root: the admin enables its controllers there, a
# cgroup qosd's unit may not write).
for h in $HIER; do mkdir -p $CG/$h/kube-reserved; done
[ $V = v2 ] && echo +hugetlb > $CG/cgroup.subtree_control
install -D -m 0644 /test/reserved.conf /etc/systemd/system/qosd.service.d/reserved.conf
# The test's own drop-in: orphans removed on the first pass that finds them
# (the shipped grace is a minute).
install -D -m 0644 /test/orphans.conf /etc/systemd/system/qosd.service.d/orphans.conf
install -m 0644 /test/enforce.yaml /etc/qosd/config.yaml
systemctl daemon-reload
mark=$(journalctl -u qosd.service -o cat --no-pager | wc -l)
systemctl start qosd.service
res "E_START_RC $?"
orphans_gone() {
  for h in $HIER; do [ -d $CG/$h/kubepods/besteffort/pod$OUID ] && return 1; done
  return 0
}
wait_for 60 orphans_gone
wait_for 30 active_ready
res "E_STATE $(state)"
res "E_READYZ $(http /readyz)"
res "E_READYZ_BODY $(httpraw /readyz | tail -n 3 | tr '\n' ' ')"
for h in $HIER; do
  res "ORPHAN $h $(test -d $CG/$h/kubepods/besteffort/pod$OUID && echo left || echo removed)"
done
if [ $V = v1 ]; then
  res "WRITTEN memory $(cat $CG/memory/kubepods/memory.limit_in_bytes)"
  res "WRITTEN cpu $(cat $CG/cpu/kubepods/cpu.shares)"
  res "WRITTEN besteffort $(cat $CG/cpu/kubepods/besteffort/cpu.shares)"
  res "WRITTEN hugetlb $(ls $CG/hugetlb/kubepods/ | grep -c '^besteffort$') $(cat $CG/hugetlb/kubepods/hugetlb.2MB.limit_in_bytes)"
  res "WRITTEN reserved $(cat $CG/memory/kube-reserved/memory.limit_in_bytes)"
else
  res "WRITTEN memory $(cat $CG/kubepods/memory.max)"
  res "WRITTEN cpu $(cat $CG/kubepods/cpu.weight)"
  res "WRITTEN besteffort $(cat $CG/kubepods/besteffort/cpu.weight)"
  res "WRITTEN reserved $(cat $CG/kube-reserved/memory.max)"
fi
res "E_EROFS $(journalctl -u qosd.service -o cat --no-pager | tail -n +$((mark + 1)) | grep -c -i -E 'read-only file system|os error 30')"
journalctl -u qosd.service -o cat --no-pager | tail -n +$((mark + 1)) | grep -i -E 'error|warn|orphan|removed' | head -n 20

say "B: a bad config stops the unit"
install -m 0644 /test/bad.yaml /etc/qosd/config.yaml
systemctl restart qosd.service
res "B_RESTART_RC $?"
failed() { [ "$(systemctl is-failed qosd.service)" = failed ]; }
wait_for 30 failed
res "B_STATE $(state)"
res "B_JOURNAL $(journalctl -u qosd.service -o cat --no-pager | grep -c 'not-a-mode')"
journalctl -u qosd.service -o cat --no-pager | tail -n 8

say "K: beside a kubelet (kubeadm layout, systemd driver): audit, dry-run"
systemctl stop qosd.service
rm -f /etc/systemd/system/qosd.service.d/reserved.conf /etc/systemd/system/qosd.service.d/orphans.conf
install -D -m 0644 /test/kubelet.yaml /var/lib/kubelet/config.yaml
# The kubelet's QoS slices (systemd driver).
systemctl start kubepods.slice
install -m 0644 /test/audit.yaml /etc/qosd/config.yaml
systemctl daemon-reload
mark=$(journalctl -u qosd.service -o cat --no-pager | wc -l)
systemctl start qosd.service
res "K_START_RC $?"
wait_for 30 active_ready
res "K_STATE $(state)"
res "K_READYZ $(http /readyz)"
st=$(httpraw /status | tr -d '\n')
res "K_STATUS_ENFORCEMENT $(echo "$st" | grep -o '"cgroup_enforcement": *"[a-z]*"' | head -n 1)"
res "K_DRIVER $(journalctl -u qosd.service -o cat --no-pager | tail -n +$((mark + 1)) | grep -c 'managed as systemd units over D-Bus')"
res "K_EROFS $(journalctl -u qosd.service -o cat --no-pager | tail -n +$((mark + 1)) | grep -c -i -E 'read-only file system|os error 30')"
journalctl -u qosd.service -o cat --no-pager | tail -n +$((mark + 1)) | head -n 20

say "U: purge"
for h in $HIER; do res "KUBEPODS_BEFORE $h $(test -d $CG/$h/kubepods && echo present || echo gone)"; done
PID=$(systemctl show -p MainPID --value qosd.service)
dpkg --purge qosd > /tmp/purge.log 2>&1
res "PURGE_RC $?"
cat /tmp/purge.log
for f in /usr/bin/qosd /usr/lib/systemd/system/qosd.service /etc/qosd/config.yaml /var/lib/qosd; do
  res "PURGED $f $(test -e $f && echo left || echo gone)"
done
res "PURGED_UNIT $(systemctl is-active qosd.service 2>&1) $(systemctl is-enabled qosd.service 2>&1)"
res "PURGED_PID $PID $( [ "$PID" != 0 ] && kill -0 "$PID" 2>/dev/null && echo alive || echo gone)"
for h in $HIER; do res "KUBEPODS_LEFT $h $(test -d $CG/$h/kubepods && echo present || echo gone)"; done
res "KUBEPODS_SLICE $(systemctl is-active kubepods.slice)"

if [ $V = v1 ]; then
  say "T: systemd trims empty cgroups it did not make (v1), qosd gone"
  # Why blkio/kubepods is gone before the purge: on every daemon-reload and
  # unit start, systemd trims the empty cgroups below its root slice in the
  # v1 hierarchies of the controllers it manages but no unit uses (blkio
  # here), not those of controllers it does not know (hugetlb).
  for h in $HIER; do mkdir -p $CG/$h/qosd-trim-probe; done
  systemctl daemon-reload
  systemd-run --quiet --wait --unit=qosd-trim-probe true
  for h in $HIER; do
    res "TRIM $h $(test -d $CG/$h/qosd-trim-probe && echo present || echo gone)"
    rmdir $CG/$h/qosd-trim-probe 2>/dev/null
  done
fi
res DONE
