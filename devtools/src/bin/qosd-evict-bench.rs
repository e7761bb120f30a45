//! Reaction-time benchmark of qosd's fast eviction path, on real cgroups.
//!
//! For each run: a memory hog (this binary re-executed with `--hog`) is
//! started inside a fresh cgroup `<root>/qosd-test-<pid>-bench/pod-<n>` and
//! touches memory at a fixed rate (MiB/s), recording after each 64 KiB
//! chunk a (CLOCK_MONOTONIC, bytes touched) pair in shared memory. qosd's
//! watcher ([`qosd_node::sys::watch`]) watches the cgroup as if it were
//! kubepods with `--capacity-mib` of allocatable memory and a hard
//! threshold `allocatableMemory.available<--threshold-mib`; its callback
//! kills the cgroup's processes with the evictor's kill function.
//!
//! Measured, from the crossing of the line (working set = capacity −
//! threshold), reconstructed from the hog's own timestamps (interpolated
//! between the chunks around the crossing, from the baseline usage read
//! before the hog starts):
//! * `detect_ms`: the watcher's callback runs;
//! * `kill_ms`: the first SIGKILL (or cgroup.kill write) is issued;
//! * `empty_ms`: the cgroup holds no process;
//! * `released_ms`: the cgroup's usage is back at its baseline.
//!
//! With `--sampler`, a separate thread also samples the kernel counter every
//! 100 µs and reports the crossing it saw (`sampler_cross_lag_ms` = how much
//! later than the reconstruction it saw it) and `kill_after_sampled_ms`
//! (kill issued after the sampled crossing). The kernel counter lags the
//! hog's touches by a few charge batches, which the reconstruction cannot
//! model at slow ramps (50 MiB/s): there the sampled figure is the better
//! one; a delayed sampler makes it an underestimate by its delay.
//!
//! Needs root and a memory cgroup hierarchy (v1 `/sys/fs/cgroup/memory`, or
//! v2 `/sys/fs/cgroup` with the memory controller enabled at the root).
//! Creates and removes only its own cgroups; kills only its own hog.
//!
//! Each run uses a kubepods-like cgroup `kp-<n>` holding the hog's pod and a
//! small bystander pod (`--bystander-mib`, default 32); the watcher watches
//! kp-<n> and kills the hog's pod. `--limit-mib N` sets kp-<n>'s memory
//! limit (e.g. at the capacity, so the kernel OOM killer is in the race;
//! default: a safety cap above the hog). The `oom_kill` counters
//! (v1 memory.oom_control, v2 memory.events) are read before and after and
//! sampled (with `--sampler`) to tell who killed first and which pod died.
//! `--no-watcher`: the kernel OOM killer alone. `--random-phase-ms N`: start
//! the ramp after a random delay in [0, N) ms (a poller's phase, e.g. the
//! kubelet-like 10 s poll).
//!
//! `--meminfo-race [--avail-pct 10] [--sample-us 200] [--pause-ms 1500]`:
//! whole-machine mode for a peer (earlyoom) or the kernel OOM killer started
//! outside: the hog ramps (no cgroup of its own) until something kills it;
//! reports the time from MemAvailable crossing avail-pct % of MemTotal to the
//! hog's SIGTERM handler (or its SIGKILL exit) and to memory coming back.
//!
//! Usage: qosd-evict-bench [--rates 200,1000] [--runs 10] [--capacity-mib 512]
//!        [--threshold-mib 100] [--margin-mib 128] [--cgroup-root DIR] [--sampler]
//!        [--no-eventfd] [--min-interval-ms 1] [--max-interval-ms 100] [--rt PRIO]
//!        [--limit-mib N] [--no-watcher] [--bystander-mib 32] [--random-phase-ms N]

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use qosd_model::core::model::CgroupVersion;
use qosd_model::policy::evict::threshold::Signal;
use qosd_node::sys::kill::kill_cgroup_tree;
use qosd_node::sys::watch::{usage_probe, WakeSource, WatchConfig, WatchTarget, Watcher};

const MI: u64 = 1024 * 1024;
const CHUNK: u64 = 64 * 1024;
const PAGE: usize = 4096;
const MAX_RECORDS: usize = 1 << 17;
const SHM_BYTES: usize = 64 + MAX_RECORDS * 16;

/// Where the progress files live: /dev/shm, else /tmp (e.g. in the VM).
fn shm_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Shared progress area: header (ready, go, n) then (t_ns, bytes) records.
struct Shm {
    ptr: *mut u8,
}

unsafe impl Send for Shm {}
unsafe impl Sync for Shm {}

impl Shm {
    fn map(path: &Path, create: bool) -> Shm {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        if create {
            f.set_len(SHM_BYTES as u64).unwrap();
        }
        use std::os::fd::AsRawFd;
        // SAFETY: mapping a file we own, of SHM_BYTES, shared.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SHM_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap progress file");
        Shm {
            ptr: ptr as *mut u8,
        }
    }
    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: in bounds, 8-aligned (page-aligned base), lives as long as self.
        unsafe { &*(self.ptr.add(i * 8) as *const AtomicU64) }
    }
    fn ready(&self) -> &AtomicU64 {
        self.word(0)
    }
    fn go(&self) -> &AtomicU64 {
        self.word(1)
    }
    fn count(&self) -> &AtomicU64 {
        self.word(2)
    }
    fn record(&self, i: usize) -> (u64, u64) {
        (
            self.word(8 + 2 * i).load(Ordering::Acquire),
            self.word(8 + 2 * i + 1).load(Ordering::Acquire),
        )
    }
    fn push(&self, t: u64, bytes: u64) {
        let n = self.count().load(Ordering::Relaxed) as usize;
        if n < MAX_RECORDS {
            self.word(8 + 2 * n).store(t, Ordering::Relaxed);
            self.word(8 + 2 * n + 1).store(bytes, Ordering::Relaxed);
            self.count().store(n as u64 + 1, Ordering::Release);
        }
    }
}

/// Where the hog's SIGTERM handler records the signal's arrival (shm word 3).
static TERM_WORD: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigterm(_: libc::c_int) {
    let p = TERM_WORD.load(Ordering::Relaxed) as *const AtomicU64;
    if !p.is_null() {
        // SAFETY: points into the shared mapping, which lives until _exit.
        unsafe { (*p).store(mono_ns(), Ordering::Release) };
    }
    // SAFETY: async-signal-safe.
    unsafe { libc::_exit(143) };
}

fn hog(progress: &Path, rate_mib: u64, total_mib: u64) -> ! {
    let shm = Shm::map(progress, false);
    TERM_WORD.store(shm.word(3) as *const AtomicU64 as u64, Ordering::Relaxed);
    // the bench itself may run at -1000 (--meminfo-race): the hog is a fair target
    let _ = std::fs::write("/proc/self/oom_score_adj", "0");
    // SAFETY: installing a handler that only calls async-signal-safe code.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_sigterm as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    let total = (total_mib * MI) as usize;
    // SAFETY: anonymous private mapping, touched below.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert!(mem != libc::MAP_FAILED);
    let mem = mem as *mut u8;
    shm.ready().store(1, Ordering::Release);
    while shm.go().load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_micros(200));
    }
    let rate = rate_mib * MI; // bytes per second
    let start = mono_ns();
    shm.push(start, 0);
    let mut touched: u64 = 0;
    while (touched as usize) < total {
        let now = mono_ns();
        let allowed = ((now - start) as u128 * rate as u128 / 1_000_000_000) as u64;
        if touched + CHUNK > allowed {
            let ahead_ns =
                ((touched + CHUNK - allowed) as u128 * 1_000_000_000 / rate as u128) as u64;
            if ahead_ns > 300_000 {
                std::thread::sleep(Duration::from_nanos(ahead_ns - 200_000));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let end = (touched + CHUNK).min(total as u64);
        let mut off = touched as usize;
        while off < end as usize {
            // SAFETY: within the mapping.
            unsafe { std::ptr::write_volatile(mem.add(off), 1) };
            off += PAGE;
        }
        touched = end;
        shm.push(mono_ns(), touched);
    }
    // hold the memory until killed
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

struct Opts {
    rates: Vec<u64>,
    runs: usize,
    capacity_mib: u64,
    threshold_mib: u64,
    margin_mib: u64,
    cgroup_root: Option<PathBuf>,
    sampler: bool,
    eventfd: bool,
    min_interval_ms: f64,
    max_interval_ms: f64,
    rt: Option<i32>,
    limit_mib: Option<u64>,
    watcher: bool,
    bystander_mib: u64,
    random_phase_ms: f64,
    meminfo_race: bool,
    avail_pct: u64,
    sample_us: u64,
    pause_ms: u64,
}

fn parse_opts(args: &[String]) -> Opts {
    let mut o = Opts {
        rates: vec![200, 1000],
        runs: 10,
        capacity_mib: 512,
        threshold_mib: 100,
        margin_mib: 128,
        cgroup_root: None,
        sampler: false,
        eventfd: true,
        min_interval_ms: 1.0,
        max_interval_ms: 100.0,
        rt: None,
        limit_mib: None,
        watcher: true,
        bystander_mib: 32,
        random_phase_ms: 0.0,
        meminfo_race: false,
        avail_pct: 10,
        sample_us: 200,
        pause_ms: 1500,
    };
    let mut i = 0;
    let val = |i: &mut usize| -> String {
        *i += 1;
        args.get(*i).cloned().unwrap_or_else(|| {
            eprintln!("missing value for {}", args[*i - 1]);
            std::process::exit(2)
        })
    };
    let num = |s: String| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("not a number: {s}");
            std::process::exit(2)
        })
    };
    while i < args.len() {
        match args[i].as_str() {
            "--rates" => o.rates = val(&mut i).split(',').map(|s| num(s.to_string())).collect(),
            "--runs" => o.runs = num(val(&mut i)) as usize,
            "--capacity-mib" => o.capacity_mib = num(val(&mut i)),
            "--threshold-mib" => o.threshold_mib = num(val(&mut i)),
            "--margin-mib" => o.margin_mib = num(val(&mut i)),
            "--cgroup-root" => o.cgroup_root = Some(val(&mut i).into()),
            "--sampler" => o.sampler = true,
            "--no-eventfd" => o.eventfd = false,
            "--rt" => o.rt = Some(num(val(&mut i)) as i32),
            "--limit-mib" => o.limit_mib = Some(num(val(&mut i))),
            "--no-watcher" => o.watcher = false,
            "--bystander-mib" => o.bystander_mib = num(val(&mut i)),
            "--random-phase-ms" => o.random_phase_ms = val(&mut i).parse().unwrap_or(0.0),
            "--meminfo-race" => o.meminfo_race = true,
            "--avail-pct" => o.avail_pct = num(val(&mut i)),
            "--sample-us" => o.sample_us = num(val(&mut i)),
            "--pause-ms" => o.pause_ms = num(val(&mut i)),
            "--min-interval-ms" => o.min_interval_ms = val(&mut i).parse().unwrap_or(1.0),
            "--max-interval-ms" => o.max_interval_ms = val(&mut i).parse().unwrap_or(100.0),
            "-h" | "--help" => {
                println!("see the module documentation in src/bin/qosd-evict-bench.rs");
                std::process::exit(0);
            }
            a => {
                eprintln!("unknown argument {a}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    o
}

/// Removes the bench cgroups (leaf first) and kills the hog if still alive.
struct Guard {
    dirs: Vec<PathBuf>,
    child: Option<std::process::Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in self.dirs.iter().rev() {
            for _ in 0..100 {
                if !d.exists() || std::fs::remove_dir(d).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn write_file(p: &Path, s: &str) -> std::io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(p)?
        .write_all(s.as_bytes())
}

fn read_u64(p: &Path) -> u64 {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[derive(Debug, Default, Clone, serde::Serialize)]
struct Run {
    rate_mib_s: u64,
    /// Ramp achieved over the 200 ms before the crossing.
    achieved_mib_s: Option<f64>,
    run: usize,
    /// Who killed the hog first: "qosd", "kernel-oom", "external" (a
    /// SIGKILL from outside the bench and not the OOM killer: systemd-oomd
    /// with `--no-watcher`) or "none".
    killer: String,
    /// The hog's exit seen by the bench (1 ms polls), after the crossing.
    exit_ms: Option<f64>,
    exit_after_sampled_ms: Option<f64>,
    detect_ms: Option<f64>,
    kill_ms: Option<f64>,
    empty_ms: Option<f64>,
    released_ms: Option<f64>,
    wake: Option<String>,
    overshoot_mib: Option<f64>,
    kernel_overhead_kib: f64,
    sampler_cross_lag_ms: Option<f64>,
    /// Kill issued after the sampled kernel counter crossed.
    kill_after_sampled_ms: Option<f64>,
    /// OOM kills counted in the hog's cgroup during the run.
    oom_kills: u64,
    /// OOM kills counted in the bystander's cgroup (should stay 0).
    bystander_oom_kills: u64,
    /// The kernel's oom_kill counter was seen incremented before qosd's kill.
    oom_first: bool,
    /// The oom_kill counter seen incremented, after the reconstructed crossing.
    oom_ms: Option<f64>,
    oom_after_sampled_ms: Option<f64>,
    /// Signal that ended the hog (9 = SIGKILL).
    hog_signal: Option<i32>,
    bystander_alive: bool,
    /// The hog died and the bystander pod survived.
    victim_correct: bool,
    phase_delay_ms: f64,
    polls: u64,
    eventfd_wakeups: u64,
}

fn ms(ns: i128) -> f64 {
    (ns as f64 / 1e6 * 1000.0).round() / 1000.0
}

/// The ramp the hog really achieved over the 200 ms before `cross` (MiB/s):
/// an emulated VM cannot keep up with the fast ramps.
fn achieved_rate(shm: &Shm, count: usize, cross: u64) -> Option<f64> {
    let from = cross.saturating_sub(200_000_000);
    let (mut a, mut b) = (None, None);
    for i in 0..count {
        let r = shm.record(i);
        if r.0 <= from || a.is_none() {
            a = Some(r);
        }
        if r.0 <= cross {
            b = Some(r);
        } else {
            break;
        }
    }
    let ((t0, b0), (t1, b1)) = (a?, b?);
    (t1 > t0).then(|| ((b1 - b0) as f64 / MI as f64) / ((t1 - t0) as f64 / 1e9))
}

/// Reads the `oom_kill` counter: v1 `memory.oom_control`, v2 `memory.events`.
fn oom_count(version: CgroupVersion, dir: &Path) -> u64 {
    let f = match version {
        CgroupVersion::V1 => "memory.oom_control",
        CgroupVersion::V2 => "memory.events",
    };
    std::fs::read_to_string(dir.join(f))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Small xorshift seeded from the clock and pid (no rand dependency).
fn rand_unit(state: &mut u64) -> f64 {
    if *state == 0 {
        *state = mono_ns() ^ ((std::process::id() as u64) << 32) | 1;
    }
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

/// Starts this binary as a hog in the cgroup whose `cgroup.procs` is given.
fn spawn_hog(
    procs: &Path,
    progress: &Path,
    rate: u64,
    total_mib: u64,
) -> Result<std::process::Child, String> {
    let procs = CString::new(procs.as_os_str().as_encoded_bytes()).unwrap();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "--hog",
        &progress.display().to_string(),
        &rate.to_string(),
        &total_mib.to_string(),
    ]);
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if procs.as_bytes().is_empty() {
                return Ok(());
            }
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let r = libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1);
            libc::close(fd);
            if r != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("spawn hog: {e}"))
}

fn wait_ready(shm: &Shm) -> Result<(), String> {
    let t0 = std::time::Instant::now();
    while shm.ready().load(Ordering::Acquire) == 0 {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err("hog did not start".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn exit_signal(st: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    st.signal()
}

/// Waits up to `d` for the child to exit.
fn wait_exit(c: &mut std::process::Child, d: Duration) -> Option<std::process::ExitStatus> {
    let t0 = std::time::Instant::now();
    loop {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        if t0.elapsed() > d {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// One run: a kubepods-like cgroup `kp-<n>` (limit `--limit-mib`, else a
/// safety cap above the hog) holding two pods: `pod-hog-<n>` (the ramp) and
/// `pod-bys-<n>` (a 32 MiB bystander). The watcher (unless `--no-watcher`)
/// watches kp-<n>; its callback kills pod-hog-<n>.
fn one_run(
    o: &Opts,
    version: CgroupVersion,
    parent: &Path,
    rate: u64,
    n: usize,
    rng: &mut u64,
) -> Result<Run, String> {
    let kp = parent.join(format!("kp-{n}"));
    let pod = kp.join(format!("pod-hog-{n}"));
    let bys = kp.join(format!("pod-bys-{n}"));
    std::fs::create_dir(&kp).map_err(|e| format!("mkdir {}: {e}", kp.display()))?;
    let mut guard = Guard {
        dirs: vec![kp.clone()],
        child: None,
    };
    let mut bys_guard = Guard {
        dirs: vec![],
        child: None,
    };
    if version == CgroupVersion::V2 {
        write_file(&kp.join("cgroup.subtree_control"), "+memory")
            .map_err(|e| format!("enable memory in {}: {e}", kp.display()))?;
    }
    for d in [&pod, &bys] {
        std::fs::create_dir(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
    }
    // leaf first on drop: guard.dirs is removed in reverse order
    guard.dirs.push(pod.clone());
    guard.dirs.push(bys.clone());
    let line = (o.capacity_mib - o.threshold_mib) * MI;
    let total_mib = o.capacity_mib - o.threshold_mib + o.margin_mib;
    let limit = match o.limit_mib {
        Some(l) => l * MI,
        None => (total_mib + o.bystander_mib + 64) * MI,
    };
    let (limit_file, usage_file) = match version {
        CgroupVersion::V1 => ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        CgroupVersion::V2 => ("memory.max", "memory.current"),
    };
    write_file(&kp.join(limit_file), &limit.to_string())
        .map_err(|e| format!("{limit_file}: {e}"))?;

    // the bystander
    let bys_progress = shm_dir().join(format!("qosd-evict-bench-{}-{n}-bys", std::process::id()));
    let bshm = Shm::map(&bys_progress, true);
    if o.bystander_mib > 0 {
        let c = spawn_hog(
            &bys.join("cgroup.procs"),
            &bys_progress,
            1000,
            o.bystander_mib,
        )?;
        bys_guard.child = Some(c);
        wait_ready(&bshm)?;
        bshm.go().store(1, Ordering::Release);
        let t0 = std::time::Instant::now();
        loop {
            let k = bshm.count().load(Ordering::Acquire) as usize;
            if k > 0 && bshm.record(k - 1).1 >= o.bystander_mib * MI {
                break;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err("bystander did not fill".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    let progress = shm_dir().join(format!("qosd-evict-bench-{}-{n}", std::process::id()));
    let shm = Shm::map(&progress, true);
    guard.child = Some(spawn_hog(
        &pod.join("cgroup.procs"),
        &progress,
        rate,
        total_mib,
    )?);
    wait_ready(&shm)?;
    std::thread::sleep(Duration::from_millis(20));
    let baseline = read_u64(&kp.join(usage_file));
    let oom0 = oom_count(version, &pod);
    let bys_oom0 = oom_count(version, &bys);

    let (tx, rx) = mpsc::channel();
    let watcher = if o.watcher {
        let target = WatchTarget {
            signal: Signal::AllocatableMemoryAvailable,
            probe: usage_probe(version, &kp),
            capacity: (o.capacity_mib * MI) as i64,
            threshold: (o.threshold_mib * MI) as i64,
        };
        let cfg = WatchConfig {
            min_interval: Duration::from_secs_f64(o.min_interval_ms / 1000.0),
            max_interval: Duration::from_secs_f64(o.max_interval_ms / 1000.0),
            use_eventfd: o.eventfd,
            rt_priority: o.rt,
            ..Default::default()
        };
        let fired = Arc::new(AtomicBool::new(false));
        let pod2 = pod.clone();
        let f2 = fired.clone();
        Some(
            Watcher::spawn(vec![target], cfg, move |ev| {
                if f2.swap(true, Ordering::SeqCst) {
                    return;
                }
                let t_event = mono_ns();
                let t_kill = mono_ns();
                let r = kill_cgroup_tree(&pod2, Duration::from_secs(5));
                let t_done = mono_ns();
                let _ = tx.send((
                    t_event,
                    t_kill,
                    t_done,
                    ev.source,
                    ev.available,
                    r.map(|k| k.empty_at.is_some()),
                ));
            })
            .map_err(|e| e.to_string())?,
        )
    } else {
        drop(tx);
        None
    };

    // kernel-counter sampler: usage crossing and the oom_kill counter
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = o.sampler.then(|| {
        let (p, stop, pod_s) = (kp.join(usage_file), stop_sampler.clone(), pod.clone());
        std::thread::spawn(move || -> (Option<(u64, u64)>, Option<u64>) {
            use std::os::unix::fs::FileExt;
            let (mut cross, mut oom_at) = (None, None);
            let Ok(f) = std::fs::File::open(&p) else {
                return (None, None);
            };
            let mut buf = [0u8; 64];
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if cross.is_none() {
                    if let Ok(n) = f.read_at(&mut buf, 0) {
                        let v: u64 = std::str::from_utf8(&buf[..n])
                            .ok()
                            .and_then(|s| s.trim().parse().ok())
                            .unwrap_or(0);
                        if v >= line {
                            cross = Some((mono_ns(), v));
                        }
                    }
                }
                if oom_at.is_none() && oom_count(version, &pod_s) > oom0 {
                    oom_at = Some(mono_ns());
                }
                i += 1;
                if cross.is_some() && oom_at.is_some() {
                    break;
                }
                let _ = i;
                std::thread::sleep(Duration::from_micros(100));
            }
            (cross, oom_at)
        })
    });

    let phase = if o.random_phase_ms > 0.0 {
        rand_unit(rng) * o.random_phase_ms
    } else {
        0.0
    };
    std::thread::sleep(Duration::from_secs_f64(phase / 1000.0));
    shm.go().store(1, Ordering::Release);
    let budget = Duration::from_secs_f64(total_mib as f64 / rate as f64 + 5.0);
    let t_start = std::time::Instant::now();
    let mut got = None;
    let mut hog_status = None;
    let mut t_exit = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(1)) {
            Ok(x) => {
                got = Some(x);
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(c) = guard.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                hog_status = Some(st);
                t_exit = Some(mono_ns());
                // the watcher may still be reacting
                got = rx.recv_timeout(Duration::from_millis(100)).ok();
                break;
            }
        }
        if t_start.elapsed() > budget {
            break;
        }
    }
    // release: usage back at baseline
    let t_rel_start = std::time::Instant::now();
    let mut t_released = None;
    while (got.is_some() || hog_status.is_some()) && t_rel_start.elapsed() < Duration::from_secs(5)
    {
        // all the hog's memory back (the progress pages, ≤ 2 MiB, stay charged)
        if read_u64(&kp.join(usage_file)) <= baseline + SHM_BYTES as u64 {
            t_released = Some(mono_ns());
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    std::thread::sleep(Duration::from_millis(5));
    stop_sampler.store(true, Ordering::Relaxed);
    let (polls, efd) = watcher
        .as_ref()
        .map(|w| {
            (
                w.stats.polls.load(Ordering::Relaxed),
                w.stats.eventfd_wakeups.load(Ordering::Relaxed),
            )
        })
        .unwrap_or((0, 0));
    if let Some(w) = watcher {
        w.stop();
    }
    if hog_status.is_none() {
        if let Some(c) = guard.child.as_mut() {
            hog_status = wait_exit(c, Duration::from_secs(5));
        }
    }
    let bystander_alive = match bys_guard.child.as_mut() {
        Some(c) => matches!(c.try_wait(), Ok(None)),
        None => true,
    };
    let oom_kills = oom_count(version, &pod).saturating_sub(oom0);
    let bystander_oom_kills = oom_count(version, &bys).saturating_sub(bys_oom0);
    if let Some(mut c) = guard.child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (sampler_cross, oom_at) = sampler.and_then(|h| h.join().ok()).unwrap_or((None, None));

    // Reconstruct the crossing. The kernel charges a little more than the
    // bytes the hog touched (page tables, its progress pages): calibrate
    // with the watcher's own exact sample at the event (else with the
    // sampler's first reading over the line): overhead = working set seen −
    // baseline − bytes touched by then. The crossing is when baseline +
    // overhead + bytes reached the line, interpolated.
    let count = shm.count().load(Ordering::Acquire) as usize;
    let bytes_at = |t: u64| -> u64 {
        let mut b_at = 0;
        for i in 0..count {
            let (ti, b) = shm.record(i);
            if ti <= t {
                b_at = b;
            } else {
                break;
            }
        }
        b_at
    };
    let calib = match (&got, sampler_cross) {
        (Some((t_event, _, _, _, ev_avail, _)), _) => {
            Some((*t_event, o.capacity_mib * MI - (*ev_avail).max(0) as u64))
        }
        (None, Some((t, v))) => Some((t, v)),
        _ => None,
    };
    let overhead = calib
        .map(|(t, ws)| ws as i128 - baseline as i128 - bytes_at(t) as i128)
        .unwrap_or(0);
    let need = (line as i128 - baseline as i128 - overhead.max(0)).max(0) as u64;
    let mut cross = None;
    for i in 0..count {
        let (t, b) = shm.record(i);
        if b >= need {
            cross = Some(if i == 0 {
                t
            } else {
                let (t0, b0) = shm.record(i - 1);
                t0 + ((t - t0) as u128 * (need - b0) as u128 / (b - b0).max(1) as u128) as u64
            });
            break;
        }
    }
    let _ = std::fs::remove_file(&progress);
    drop(bys_guard);
    let _ = std::fs::remove_file(&bys_progress);
    let cross = cross.ok_or_else(|| {
        let last = if count > 0 { shm.record(count - 1).1 } else { 0 };
        format!(
            "the hog never reached the line: {count} records, last {last} bytes, need {need} (baseline {baseline}), hog status {hog_status:?}"
        )
    })?;
    if let Some((_, _, _, _, _, Err(e))) = &got {
        return Err(format!("kill: {e}"));
    }
    let d = |t: u64| t as i128 - cross as i128;
    let t_kill = got.as_ref().map(|g| g.1);
    let oom_first = match (oom_at, t_kill) {
        (Some(o_), Some(k)) => o_ < k,
        (Some(_), None) => true,
        (None, _) => oom_kills > 0 && t_kill.is_none(),
    };
    let hog_signal = hog_status.as_ref().and_then(exit_signal);
    let killer = if oom_first {
        "kernel-oom"
    } else if t_kill.is_some() {
        "qosd"
    } else if hog_signal == Some(libc::SIGKILL) {
        "external"
    } else {
        "none"
    };
    Ok(Run {
        rate_mib_s: rate,
        achieved_mib_s: achieved_rate(&shm, count, cross).map(|r| r.round()),
        run: n,
        killer: killer.into(),
        exit_ms: t_exit.map(|t| ms(d(t))),
        exit_after_sampled_ms: match (sampler_cross, t_exit) {
            (Some((s, _)), Some(k)) => Some(ms(k as i128 - s as i128)),
            _ => None,
        },
        detect_ms: got.as_ref().map(|g| ms(d(g.0))),
        kill_ms: t_kill.map(|t| ms(d(t))),
        empty_ms: got.as_ref().map(|g| ms(d(g.2))),
        released_ms: t_released.map(|t| ms(d(t))),
        wake: got.as_ref().map(|g| match g.3 {
            WakeSource::Poll => "poll".into(),
            WakeSource::EventFd => "eventfd".into(),
        }),
        overshoot_mib: t_kill.map(|t| (bytes_at(t) as f64 - need as f64) / MI as f64),
        kernel_overhead_kib: overhead as f64 / 1024.0,
        sampler_cross_lag_ms: sampler_cross.map(|(t, _)| ms(d(t))),
        kill_after_sampled_ms: match (sampler_cross, t_kill) {
            (Some((s, _)), Some(k)) => Some(ms(k as i128 - s as i128)),
            _ => None,
        },
        oom_kills,
        bystander_oom_kills,
        oom_first,
        oom_ms: oom_at.map(|t| ms(d(t))),
        oom_after_sampled_ms: match (sampler_cross, oom_at) {
            (Some((s, _)), Some(k)) => Some(ms(k as i128 - s as i128)),
            _ => None,
        },
        hog_signal,
        bystander_alive,
        victim_correct: hog_status.is_some() && bystander_alive && bystander_oom_kills == 0,
        phase_delay_ms: (phase * 1000.0).round() / 1000.0,
        polls,
        eventfd_wakeups: efd,
    })
}

fn meminfo_avail(f: &std::fs::File, buf: &mut [u8]) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let n = f.read_at(buf, 0).ok()?;
    let s = std::str::from_utf8(&buf[..n]).ok()?;
    let l = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn vmstat_oom_kill() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("oom_kill ").and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// `--meminfo-race`: whole-machine memory (for earlyoom or the kernel OOM
/// killer, started outside). The hog ramps in the caller's cgroup until
/// something kills it; a sampler reads /proc/meminfo every `--sample-us`.
/// Measured from MemAvailable crossing `--avail-pct` % of MemTotal
/// (reconstructed from the hog's records, and as sampled) to the hog's
/// SIGTERM handler running (earlyoom's first signal), to the hog's exit
/// being seen, and to MemAvailable recovering.
fn meminfo_race(o: &Opts) {
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    let mf = std::fs::File::open("/proc/meminfo").expect("open /proc/meminfo");
    let mut buf = vec![0u8; 8192];
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            })
        })
        .expect("MemTotal")
        * 1024;
    let line = total * o.avail_pct / 100;
    let mut runs = Vec::new();
    let mut n = 0;
    for &rate in &o.rates {
        for _ in 0..o.runs {
            n += 1;
            let progress = shm_dir().join(format!("qosd-evict-bench-{}-{n}", std::process::id()));
            let shm = Shm::map(&progress, true);
            let hog_mib = total / MI * 95 / 100;
            let mut child = match spawn_hog(Path::new(""), &progress, rate, hog_mib) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("run {n}: {e}");
                    continue;
                }
            };
            let pid = child.id();
            if wait_ready(&shm).is_err() {
                let _ = child.kill();
                let _ = child.wait();
                continue;
            }
            std::thread::sleep(Duration::from_millis(50));
            let a0 = meminfo_avail(&mf, &mut buf).unwrap_or(0);
            let oom0 = vmstat_oom_kill();
            let stop = Arc::new(AtomicBool::new(false));
            let (stop2, sample_us) = (stop.clone(), o.sample_us);
            let sampler = std::thread::spawn(move || {
                let f = std::fs::File::open("/proc/meminfo").unwrap();
                let mut b = vec![0u8; 8192];
                let mut cross = None;
                let mut min_avail = u64::MAX;
                let mut zero_at = None;
                let mut samples = 0u64;
                while !stop2.load(Ordering::Relaxed) {
                    if let Some(v) = meminfo_avail(&f, &mut b) {
                        samples += 1;
                        let t = mono_ns();
                        min_avail = min_avail.min(v);
                        if cross.is_none() && v <= line {
                            cross = Some(t);
                        }
                        if zero_at.is_none() && v < 16 * MI {
                            zero_at = Some(t);
                        }
                    }
                    std::thread::sleep(Duration::from_micros(sample_us));
                }
                (cross, min_avail, zero_at, samples)
            });
            shm.go().store(1, Ordering::Release);
            let budget = Duration::from_secs_f64(hog_mib as f64 / rate as f64 + 10.0);
            let t0 = std::time::Instant::now();
            let mut status = None;
            let mut t_exit = None;
            while t0.elapsed() < budget {
                if let Ok(Some(st)) = child.try_wait() {
                    status = Some(st);
                    t_exit = Some(mono_ns());
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            if status.is_none() {
                let _ = child.kill();
                status = child.wait().ok();
            }
            let mut t_rel = None;
            let tr = std::time::Instant::now();
            while t_exit.is_some() && tr.elapsed() < Duration::from_secs(5) {
                if meminfo_avail(&mf, &mut buf).unwrap_or(0) + 16 * MI >= a0 {
                    t_rel = Some(mono_ns());
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            stop.store(true, Ordering::Relaxed);
            let (s_cross, min_avail, zero_at, samples) =
                sampler.join().unwrap_or((None, 0, None, 0));
            let oom_kills = vmstat_oom_kill().saturating_sub(oom0);
            let t_term = shm.word(3).load(Ordering::Acquire);
            let t_term = (t_term != 0).then_some(t_term);
            // reconstructed crossing: the hog touched (a0 - line) bytes
            let need = a0.saturating_sub(line);
            let count = shm.count().load(Ordering::Acquire) as usize;
            let mut cross = None;
            for i in 0..count {
                let (t, b) = shm.record(i);
                if b >= need {
                    cross = Some(if i == 0 {
                        t
                    } else {
                        let (t0, b0) = shm.record(i - 1);
                        t0 + ((t - t0) as u128 * (need - b0) as u128 / (b - b0).max(1) as u128)
                            as u64
                    });
                    break;
                }
            }
            let _ = std::fs::remove_file(&progress);
            let sig = status.as_ref().and_then(exit_signal);
            let code = status.as_ref().and_then(|s| s.code());
            let killer = if t_term.is_some() {
                "sigterm (earlyoom)"
            } else if sig == Some(9) && oom_kills > 0 {
                "sigkill (kernel oom killer)"
            } else if sig == Some(9) {
                "sigkill (earlyoom)"
            } else {
                "none"
            };
            let rel = |t: Option<u64>, from: Option<u64>| match (t, from) {
                (Some(t), Some(f)) => Some(ms(t as i128 - f as i128)),
                _ => None,
            };
            let kill_at = t_term.or(if sig == Some(9) { t_exit } else { None });
            let r = serde_json::json!({
                "rate_mib_s": rate, "run": n, "hog_pid": pid, "killer": killer,
                "achieved_mib_s": cross.and_then(|c| achieved_rate(&shm, count, c)).map(|r| r.round()),
                "hog_exit_code": code, "hog_signal": sig, "oom_kills": oom_kills,
                "oom_first": oom_kills > 0 && t_term.is_none(),
                "signal_ms": rel(kill_at, cross),
                "signal_after_sampled_ms": rel(kill_at, s_cross),
                "exit_seen_ms": rel(t_exit, cross),
                "released_ms": rel(t_rel, cross),
                "sampler_cross_lag_ms": rel(s_cross, cross),
                "avail_below_16mib_ms": rel(zero_at, cross),
                "baseline_avail_mib": a0 / MI, "min_avail_mib": min_avail / MI,
                "line_mib": line / MI, "samples": samples,
            });
            eprintln!("{r}");
            runs.push(r);
            std::thread::sleep(Duration::from_millis(o.pause_ms));
        }
    }
    let mut summary = Vec::new();
    for &rate in &o.rates {
        let rs: Vec<&serde_json::Value> = runs.iter().filter(|r| r["rate_mib_s"] == rate).collect();
        let col = |k: &str| -> Vec<f64> { rs.iter().filter_map(|r| r[k].as_f64()).collect() };
        let stats = |mut v: Vec<f64>| {
            if v.is_empty() {
                return serde_json::Value::Null;
            }
            serde_json::json!({"n": v.len(), "median": pct(&mut v, 50.0), "p99": pct(&mut v, 99.0), "min": pct(&mut v, 0.0), "max": pct(&mut v, 100.0)})
        };
        summary.push(serde_json::json!({
            "rate_mib_s": rate, "runs": rs.len(),
            "signal_ms": stats(col("signal_ms")),
            "signal_after_sampled_ms": stats(col("signal_after_sampled_ms")),
            "released_ms": stats(col("released_ms")),
            "oom_first": rs.iter().filter(|r| r["oom_first"] == true).count(),
            "sigterm": rs.iter().filter(|r| r["killer"] == "sigterm (earlyoom)").count(),
        }));
    }
    let doc = serde_json::json!({
        "mode": "meminfo-race", "mem_total_mib": total / MI, "avail_pct": o.avail_pct,
        "line_mib": line / MI, "sample_us": o.sample_us,
        "crossing": "reconstructed: the hog's records reach (MemAvailable at start - line) bytes; sampled: first /proc/meminfo read at or below the line",
        "summary": summary, "runs": runs,
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap());
}
fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[idx.min(v.len() - 1)]
}

fn stats(mut v: Vec<f64>) -> serde_json::Value {
    if v.is_empty() {
        return serde_json::Value::Null;
    }
    serde_json::json!({"n": v.len(), "median": pct(&mut v, 50.0), "p99": pct(&mut v, 99.0), "min": pct(&mut v, 0.0), "max": pct(&mut v, 100.0)})
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--hog") {
        hog(
            Path::new(&args[1]),
            args[2].parse().unwrap(),
            args[3].parse().unwrap(),
        );
    }
    let o = parse_opts(&args);
    if o.meminfo_race {
        meminfo_race(&o);
        return;
    }
    let sys = Path::new("/sys/fs/cgroup");
    let version = qosd_node::sys::detect::detect_version(sys).unwrap_or_else(|e| {
        eprintln!("cannot detect the cgroup version: {e}");
        std::process::exit(1)
    });
    let root = o.cgroup_root.clone().unwrap_or_else(|| match version {
        CgroupVersion::V1 => sys.join("memory"),
        CgroupVersion::V2 => sys.to_path_buf(),
    });
    let parent = root.join(format!("qosd-test-{}-bench", std::process::id()));
    if let Err(e) = std::fs::create_dir(&parent) {
        eprintln!(
            "cannot create {}: {e} (needs root and a memory cgroup)",
            parent.display()
        );
        std::process::exit(1);
    }
    let guard = Guard {
        dirs: vec![parent.clone()],
        child: None,
    };
    if version == CgroupVersion::V2 {
        if let Err(e) = write_file(&parent.join("cgroup.subtree_control"), "+memory") {
            eprintln!("cannot enable memory in {}: {e}", parent.display());
            drop(guard);
            std::process::exit(1);
        }
    }
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    let mut n = 0;
    let mut rng = 0u64;
    for &rate in &o.rates {
        for _ in 0..o.runs {
            n += 1;
            match one_run(&o, version, &parent, rate, n, &mut rng) {
                Ok(r) => {
                    eprintln!(
                        "rate {rate} MiB/s run {n}: killer {}, kill {:?} ms, released {:?} ms, oom {:?} ms (kills {}), victim ok {} ({:?})",
                        r.killer, r.kill_ms, r.released_ms, r.oom_ms, r.oom_kills, r.victim_correct, r.wake
                    );
                    runs.push(r);
                }
                Err(e) => {
                    eprintln!("rate {rate} MiB/s run {n}: FAILED: {e}");
                    failures.push(format!("rate {rate} run {n}: {e}"));
                }
            }
        }
    }
    let mut summary = Vec::new();
    for &rate in &o.rates {
        let rs: Vec<&Run> = runs.iter().filter(|r| r.rate_mib_s == rate).collect();
        let col = |f: &dyn Fn(&Run) -> Option<f64>| -> Vec<f64> {
            rs.iter().filter_map(|r| f(r)).collect()
        };
        summary.push(serde_json::json!({
            "rate_mib_s": rate,
            "runs": rs.len(),
            "kill_ms": stats(col(&|r| r.kill_ms)),
            "detect_ms": stats(col(&|r| r.detect_ms)),
            "released_ms": stats(col(&|r| r.released_ms)),
            "kill_after_sampled_ms": stats(col(&|r| r.kill_after_sampled_ms)),
            "oom_ms": stats(col(&|r| r.oom_ms)),
            "oom_after_sampled_ms": stats(col(&|r| r.oom_after_sampled_ms)),
            "eventfd_wakes": rs.iter().filter(|r| r.wake.as_deref() == Some("eventfd")).count(),
            "killer_qosd": rs.iter().filter(|r| r.killer == "qosd").count(),
            "killer_kernel_oom": rs.iter().filter(|r| r.killer == "kernel-oom").count(),
            "killer_external": rs.iter().filter(|r| r.killer == "external").count(),
            "exit_ms": stats(col(&|r| r.exit_ms)),
            "exit_after_sampled_ms": stats(col(&|r| r.exit_after_sampled_ms)),
            "runs_with_oom_kill": rs.iter().filter(|r| r.oom_kills > 0).count(),
            "victim_correct": rs.iter().filter(|r| r.victim_correct).count(),
        }));
    }
    let doc = serde_json::json!({
        "cgroup_version": version.as_str(),
        "capacity_mib": o.capacity_mib,
        "threshold_mib": o.threshold_mib,
        "limit_mib": o.limit_mib,
        "bystander_mib": o.bystander_mib,
        "watcher": o.watcher,
        "random_phase_ms": o.random_phase_ms,
        "watch": {"min_interval_ms": o.min_interval_ms, "max_interval_ms": o.max_interval_ms, "eventfd": o.eventfd, "rt_priority": o.rt},
        "crossing": "reconstructed from the hog's own (CLOCK_MONOTONIC, bytes) records, interpolated, calibrated by the kernel's extra charge seen at the event (else at the sampler's first reading over the line)",
        "summary": summary,
        "runs": runs,
        "failures": failures,
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap());
    drop(guard);
    if !failures.is_empty() {
        std::process::exit(1);
    }
}
