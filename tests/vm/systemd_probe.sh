#!/bin/sh
# Run as ExecStartPre= of qosd.service in the systemd VM: the same sandbox
# as qosd itself. Prints PROBE <what> ok|fail (journald collects it).
try() { what=$1; shift; if sh -c "$*" 2>/dev/null; then echo "PROBE $what ok"; else echo "PROBE $what fail"; fi; }
k=/sys/fs/cgroup/kubepods.slice
try write_kubepods "cat $k/memory.high > $k/memory.high"
try mkdir_kubepods "mkdir $k/probe-x && rmdir $k/probe-x"
try write_outside_kubepods "cat /sys/fs/cgroup/system.slice/memory.high > /sys/fs/cgroup/system.slice/memory.high"
try write_root_subtree "echo +cpu > /sys/fs/cgroup/cgroup.subtree_control"
try write_etc "echo x > /etc/qosd-probe"
try read_meminfo "grep -q MemAvailable /proc/meminfo"
try read_pressure "grep -q some /proc/pressure/memory"
try read_kubelet_root "ls /var/lib/kubelet > /dev/null"
try cri_socket "test -S /run/containerd/containerd.sock"
exit 0
