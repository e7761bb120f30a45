#!/bin/bash
# Sample a running qosd for the churn RSS investigation (bench/results/HISTORY.md
# section 7, "RSS under churn"): every EVERY seconds one line with the
# seconds since start, VmRSS, VmHWM, threads, the resident KiB of the main
# malloc arena ([heap]) and of anonymous mappings (thread arenas, stacks),
# and per inotify fd the number of watches the kernel holds
# ("fd:watches": the pod cgroup events' and the planned files' watches).
#
#   bench/rss_sampler.sh EXE [EVERY] OUT
#
# EXE: the absolute path of the qosd binary being run (e.g. the
# QOSD_BENCH_QOSD given to `bench_real churn`); the first process running
# it is sampled until it exits.
set -u
bin=$1 every=${2:-10} out=$3
pid=""
while [ -z "$pid" ]; do
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$bin" ] && { pid=${p#/proc/}; break; }
  done
  sleep 0.5
done
echo "pid $pid" >>"$out"
t0=$(date +%s)
while [ -d "/proc/$pid" ]; do
  st=$(cat "/proc/$pid/status" 2>/dev/null) || break
  rss=$(awk '/^VmRSS/{print $2}' <<<"$st")
  hwm=$(awk '/^VmHWM/{print $2}' <<<"$st")
  thr=$(awk '/^Threads/{print $2}' <<<"$st")
  w=""
  for f in /proc/"$pid"/fd/*; do
    if [ "$(readlink "$f" 2>/dev/null)" = "anon_inode:inotify" ]; then
      w="$w ${f##*/}:$(grep -c '^inotify wd' "/proc/$pid/fdinfo/${f##*/}" 2>/dev/null)"
    fi
  done
  heap=$(awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6} /^Rss:/{ if (name=="[heap]") h+=$2; else if (name=="") a+=$2 } END{print "heap="h" anon="a}' "/proc/$pid/smaps" 2>/dev/null)
  echo "$(( $(date +%s) - t0 )) rss=$rss hwm=$hwm threads=$thr $heap inotify=$w" >>"$out"
  sleep "$every"
done
