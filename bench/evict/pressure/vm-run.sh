# The body of bench/evict/pressure.sh inside the systemd VM (dash; /test/bin
# on PATH). WORKLOADS, CONFIGS and RUNS are set before this text. One
# `RESULT <json>` line per run on $VMTEST_RESULTS, the tools' own words as
# `LOG <config> <workload> <line>`.
set -u
R=$VMTEST_RESULTS
CG=/sys/fs/cgroup
res() { printf '%s\n' "$*" > "$R"; }
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }
alive() { [ -r "/proc/$1/stat" ] && case "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" in Z | X | "") false ;; *) true ;; esac; }
# wait until `$1` (a shell condition) holds, at most $2 ms
wait_for() {
    w0=$(now_ms)
    until eval "$1"; do
        [ $(($(now_ms) - w0)) -lt "$2" ] || return 1
        sleep 0.05
    done
}
oomd_kills() { journalctl -u systemd-oomd -o cat --no-pager 2>/dev/null | grep -c 'Killed' || true; }

mkdir -p /run/systemd/system /run/systemd/oomd.conf.d
cat > /run/systemd/system/bench.slice <<EOF
[Slice]
MemoryAccounting=yes
ManagedOOMMemoryPressure=kill
EOF
systemctl daemon-reload
systemctl start bench.slice
echo '+cpu +memory +pids' > $CG/bench.slice/cgroup.subtree_control
systemctl stop systemd-oomd.socket systemd-oomd.service 2>/dev/null || true
systemctl stop earlyoom.service 2>/dev/null || true
busybox insmod /test/brd.ko rd_nr=1 rd_size=$((160 * 1024)) || res "INFO insmod brd failed"
dd if=/dev/zero of=/dev/ram0 bs=1M count=160 oflag=direct 2>/dev/null || res "INFO dd /dev/ram0 failed"
sync
echo 3 > /proc/sys/vm/drop_caches
MEM_KIB=$(awk '/MemTotal/ { print $2 }' /proc/meminfo)
# qosd's node memory: MemTotal, or with NODE_MEM=available what is left
# after boot (the VM's root filesystem lives in RAM, outside every pod: with
# MemTotal, memory.available never nears its line before the node runs out)
NODE_KIB=$MEM_KIB
[ "${NODE_MEM:-total}" = available ] && NODE_KIB=$(awk '/MemAvailable/ { print $2 }' /proc/meminfo)
res "INFO systemd $(systemctl --version | head -1) kernel $(uname -r) memtotal_kib $MEM_KIB node_memory_kib $NODE_KIB psi $(tr '\n' ' ' < /proc/pressure/memory) qosd $(qosd --version 2>&1 | head -1)"

S_UID=9e55c000-0001-4000-8000-00000000
P_UID=9e55c000-0002-4000-8000-00000000
B_UID=9e55c000-0003-4000-8000-00000000
pod() { # DIR NAME UID RESOURCES
    {
        echo "apiVersion: v1"
        echo "kind: Pod"
        echo "metadata: {name: $2, namespace: bench, uid: $3}"
        echo "spec:"
        echo "  containers:"
        echo "  - name: app"
        echo "    image: app"
        [ -n "$4" ] && echo "    resources: $4"
    } > "$1/$2.yaml"
}

n=0
run_one() { # WORKLOAD CONFIG
    wl=$1 cfg=$2
    n=$((n + 1))
    id=$(printf '%04d' $n)
    root=bench.slice/r$n
    K=$CG/$root/kubepods
    pods=/tmp/pods-$n
    mkdir -p $pods $CG/$root
    echo '+cpu +memory +pids' > $CG/$root/cgroup.subtree_control 2>/dev/null || true
    pod $pods stall "$S_UID$id" '{requests: {cpu: "100m", memory: "32Mi"}, limits: {memory: "1Gi"}}'
    pod $pods probe "$P_UID$id" '{requests: {cpu: "100m", memory: "16Mi"}}'
    pod $pods bystander "$B_UID$id" ''
    ev="--eviction-hard="
    case $cfg in
        qosd-pressure) ev="--eviction-hard=memory.available<100Mi --eviction-pressure-hard=memory.full=10%/2s" ;;
        qosd-bytes) ev="--eviction-hard=memory.available<100Mi" ;;
    esac
    QOSD_LOG=info qosd run --pods $pods --cgroup-version v2 --cgroup-root /$root \
        --node-cpu 2 --node-memory ${NODE_KIB}Ki $ev \
        --eviction-backend kill --metrics-address 127.0.0.1:$((9800 + n)) \
        --reconcile-interval 1s --log-format text > /tmp/qosd-$n.log 2>&1 &
    qpid=$!
    S_CG=$K/burstable/pod$S_UID$id P_CG=$K/burstable/pod$P_UID$id B_CG=$K/besteffort/pod$B_UID$id
    if ! wait_for '[ -d $S_CG ] && [ -d $P_CG ] && [ -d $B_CG ]' 60000; then
        res "INFO $cfg $wl: no pod cgroups: $(tail -5 /tmp/qosd-$n.log | tr '\n' '|')"
        kill -TERM $qpid 2>/dev/null
        return
    fi
    if [ $cfg = qosd-pressure ] && ! wait_for 'grep -q "pressure signal watched" /tmp/qosd-$n.log' 30000; then
        res "INFO $cfg $wl: pressure signal not watched: $(tail -5 /tmp/qosd-$n.log | tr '\n' '|')"
    fi
    mkdir $S_CG/app
    echo +memory > $S_CG/cgroup.subtree_control || res "INFO subtree_control failed"
    case $wl in
        file) echo 64M > $S_CG/app/memory.max ;;
        high) echo 48M > $S_CG/app/memory.high ;;
    esac
    sh -c "echo \$\$ > $B_CG/cgroup.procs && exec memhog 24" > /dev/null 2>&1 &
    bpid=$!
    sh -c "echo \$\$ > $P_CG/cgroup.procs && exec latprobe /tmp/probe-$n.json" &
    ppid=$!
    eo=""
    case $cfg in
        oomd-default)
            rm -f /run/systemd/oomd.conf.d/tuned.conf
            systemctl set-property --runtime bench.slice ManagedOOMMemoryPressureLimit=0%
            systemctl restart systemd-oomd.service ;;
        oomd-tuned)
            printf '[OOM]\nDefaultMemoryPressureDurationSec=1s\n' > /run/systemd/oomd.conf.d/tuned.conf
            systemctl set-property --runtime bench.slice ManagedOOMMemoryPressureLimit=10%
            systemctl restart systemd-oomd.service ;;
        earlyoom)
            earlyoom -m 10 -r 1 > /tmp/earlyoom-$n.log 2>&1 &
            eo=$! ;;
    esac
    case $cfg in oomd-*) wait_for 'oomctl > /tmp/oomctl-$n.txt 2>&1' 10000; res "INFO $cfg oomctl $(tr '\n' '|' < /tmp/oomctl-$n.txt)" ;; esac
    k0=$(oomd_kills)
    case $wl in
        file) tmo=60000 cmd="streamread /dev/ram0 128" ;;
        high) tmo=60000 cmd="thrash --anon 80" ;;
        anon) tmo=60000 cmd="memhog 16 32 100 4096" ;;
    esac
    [ $cfg = oomd-default ] && tmo=90000
    # the probe and the bystander settled (their cgroups hold them)
    wait_for 'grep -q . $P_CG/cgroup.procs && grep -q . $B_CG/cgroup.procs' 10000 || res "INFO $cfg $wl: probe or bystander not in place"
    sh -c "echo \$\$ > $S_CG/app/cgroup.procs && exec $cmd" > /dev/null 2>&1 &
    spid=$!
    stallwatch $spid $tmo 10 2000 /proc/pressure/memory $S_CG/memory.pressure > /tmp/watch-$n.json
    # what the staller's exit was (128 + signal), if it exited
    if alive $spid; then
        st=null
        kill -KILL $spid 2>/dev/null
        wait $spid 2>/dev/null
    else
        wait $spid 2>/dev/null
        st=$?
    fi
    pa=false; alive $ppid && pa=true
    ba=false; alive $bpid && ba=true
    kill -TERM $ppid 2>/dev/null
    wait_for '[ -s /tmp/probe-$n.json ]' 5000 || echo '{"samples":0}' > /tmp/probe-$n.json
    # the tools' records of the kill: up to 3 s for the journal to catch up
    k1=$k0
    case $cfg in oomd-*) wait_for '[ $(oomd_kills) -gt $k0 ]' 3000; k1=$(oomd_kills) ;; esac
    qe=$(grep -c 'evicting pod' /tmp/qosd-$n.log || true)
    ek=0
    if [ -n "$eo" ]; then
        kill $eo 2>/dev/null
        wait $eo 2>/dev/null
        ek=$(grep -ci 'sending SIG' /tmp/earlyoom-$n.log || true)
        sed "s/^/LOG $cfg $wl earlyoom: /" /tmp/earlyoom-$n.log | grep -i 'sending\|kill\|avail' | head -20 > "$R"
    fi
    ok=$(awk '/^oom_kill / { n += $2 } END { print n + 0 }' $S_CG/memory.events $S_CG/app/memory.events $P_CG/memory.events $B_CG/memory.events 2>/dev/null)
    case $cfg in oomd-*)
        systemctl stop systemd-oomd.service
        journalctl -u systemd-oomd -o short-monotonic --no-pager 2>/dev/null | tail -n $((k1 - k0 + 3)) | sed "s/^/LOG $cfg $wl oomd: /" > "$R" ;;
    esac
    killer=none
    if [ "$qe" -gt 0 ]; then killer=qosd
    elif [ "$k1" -gt "$k0" ]; then killer=systemd-oomd
    elif [ "$ek" -gt 0 ]; then killer=earlyoom
    elif [ "$ok" -gt 0 ]; then killer=kernel-oom
    # systemd-oomd's kill line is below the VM's log level (warning)
    elif [ "$st" = 137 ] && [ -n "${cfg#oomd-}" ] && [ "${cfg#oomd-}" != "$cfg" ]; then killer=systemd-oomd
    fi
    grep -E 'evict|pressure|WARN|ERROR' /tmp/qosd-$n.log | head -20 | sed "s/^/LOG $cfg $wl qosd: /" > "$R"
    res "RESULT {\"workload\":\"$wl\",\"config\":\"$cfg\",\"run\":$n,\"timeout_ms\":$tmo,\"watch\":$(cat /tmp/watch-$n.json),\"probe\":$(cat /tmp/probe-$n.json),\"staller_exit\":$st,\"first_actor\":\"$killer\",\"qosd_evictions\":$qe,\"oomd_kills\":$((k1 - k0)),\"earlyoom_signals\":$ek,\"oom_kills\":$ok,\"probe_alive\":$pa,\"bystander_alive\":$ba}"
    kill -KILL $bpid $ppid 2>/dev/null
    kill -TERM $qpid 2>/dev/null
    wait_for '! alive $qpid' 10000 || kill -KILL $qpid 2>/dev/null
    wait $qpid 2>/dev/null
    find $CG/$root -depth -type d -exec rmdir {} \; 2>/dev/null
    echo 3 > /proc/sys/vm/drop_caches
}

for wl in $WORKLOADS; do
    for r in $(seq 1 $RUNS); do
        for cfg in $CONFIGS; do
            echo "== $wl $cfg $r $(date +%T)" >&2
            run_one $wl $cfg
        done
    done
done
res "INFO done $(date +%T)"
exit 0
