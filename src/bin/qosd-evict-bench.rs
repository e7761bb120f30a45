//! Reaction-time benchmark of qosd's fast eviction path, on real cgroups.
//!
//! For each run: a memory hog (this binary re-executed with `--hog`) is
//! started inside a fresh cgroup `<root>/qosd-test-<pid>-bench/pod-<n>` and
//! touches memory at a fixed rate (MiB/s), recording after each 64 KiB
//! chunk a (CLOCK_MONOTONIC, bytes touched) pair in shared memory. qosd's
//! watcher ([`qosd::eviction::watch`]) watches the cgroup as if it were
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
//! Usage: qosd-evict-bench [--rates 200,1000] [--runs 10] [--capacity-mib 512]
//!        [--threshold-mib 100] [--margin-mib 128] [--cgroup-root DIR] [--sampler]
//!        [--no-eventfd] [--min-interval-ms 5] [--max-interval-ms 100] [--rt PRIO]

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use qosd::eviction::evictor::kill_cgroup_tree;
use qosd::eviction::threshold::Signal;
use qosd::eviction::watch::{usage_probe, WakeSource, WatchConfig, WatchTarget, Watcher};
use qosd::model::CgroupVersion;

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

fn hog(progress: &Path, rate_mib: u64, total_mib: u64) -> ! {
    let shm = Shm::map(progress, false);
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
        min_interval_ms: 5.0,
        max_interval_ms: 100.0,
        rt: None,
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
            "--min-interval-ms" => o.min_interval_ms = val(&mut i).parse().unwrap_or(5.0),
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
    run: usize,
    detect_ms: f64,
    kill_ms: f64,
    empty_ms: Option<f64>,
    released_ms: Option<f64>,
    wake: String,
    overshoot_mib: f64,
    kernel_overhead_kib: f64,
    sampler_cross_lag_ms: Option<f64>,
    /// With --sampler: kill issued after the sampled kernel counter crossed.
    kill_after_sampled_ms: Option<f64>,
    polls: u64,
    eventfd_wakeups: u64,
}

fn ms(ns: i128) -> f64 {
    (ns as f64 / 1e6 * 1000.0).round() / 1000.0
}

fn one_run(
    o: &Opts,
    version: CgroupVersion,
    parent: &Path,
    rate: u64,
    n: usize,
) -> Result<Run, String> {
    let pod = parent.join(format!("pod-{n}"));
    std::fs::create_dir(&pod).map_err(|e| format!("mkdir {}: {e}", pod.display()))?;
    let mut guard = Guard {
        dirs: vec![pod.clone()],
        child: None,
    };
    let line = (o.capacity_mib - o.threshold_mib) * MI;
    let total_mib = o.capacity_mib - o.threshold_mib + o.margin_mib;
    let limit = (total_mib + 64) * MI;
    let (limit_file, usage_file) = match version {
        CgroupVersion::V1 => ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        CgroupVersion::V2 => ("memory.max", "memory.current"),
    };
    write_file(&pod.join(limit_file), &limit.to_string())
        .map_err(|e| format!("{limit_file}: {e}"))?;

    let progress = shm_dir().join(format!("qosd-evict-bench-{}-{n}", std::process::id()));
    let shm = Shm::map(&progress, true);
    let procs = CString::new(pod.join("cgroup.procs").as_os_str().as_encoded_bytes()).unwrap();
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
    let child = cmd.spawn().map_err(|e| format!("spawn hog: {e}"))?;
    guard.child = Some(child);
    let t0 = std::time::Instant::now();
    while shm.ready().load(Ordering::Acquire) == 0 {
        if t0.elapsed() > Duration::from_secs(5) {
            return Err("hog did not start".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let baseline = read_u64(&pod.join(usage_file));

    let target = WatchTarget {
        signal: Signal::AllocatableMemoryAvailable,
        probe: usage_probe(version, &pod),
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
    let (tx, rx) = mpsc::channel();
    let fired = Arc::new(AtomicBool::new(false));
    let pod2 = pod.clone();
    let f2 = fired.clone();
    let watcher = Watcher::spawn(vec![target], cfg, move |ev| {
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
    .map_err(|e| e.to_string())?;

    // optional kernel-counter sampler
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = o.sampler.then(|| {
        let (p, stop) = (pod.join(usage_file), stop_sampler.clone());
        std::thread::spawn(move || -> Option<u64> {
            use std::os::unix::fs::FileExt;
            let f = std::fs::File::open(&p).ok()?;
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                let n = f.read_at(&mut buf, 0).ok()?;
                let v: u64 = std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()?;
                if v >= line {
                    return Some(mono_ns());
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            None
        })
    });

    shm.go().store(1, Ordering::Release);
    let budget = Duration::from_secs_f64(total_mib as f64 / rate as f64 + 5.0);
    let got = rx.recv_timeout(budget);
    stop_sampler.store(true, Ordering::Relaxed);
    let (t_event, t_kill, t_done, source, ev_avail, killed) =
        got.map_err(|_| "no crossing detected".to_string())?;
    // release: usage back at baseline
    let t_rel_start = std::time::Instant::now();
    let mut t_released = None;
    while t_rel_start.elapsed() < Duration::from_secs(5) {
        // all the hog's memory back (the progress pages, ≤ 2 MiB, stay charged)
        if read_u64(&pod.join(usage_file)) <= baseline + SHM_BYTES as u64 {
            t_released = Some(mono_ns());
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let polls = watcher.stats.polls.load(Ordering::Relaxed);
    let efd = watcher.stats.eventfd_wakeups.load(Ordering::Relaxed);
    watcher.stop();
    if let Some(mut c) = guard.child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let sampler_cross = sampler.and_then(|h| h.join().ok().flatten());

    // Reconstruct the crossing. The kernel charges a little more than the
    // bytes the hog touched (page tables, its progress pages): calibrate
    // with the watcher's own exact sample at the event: overhead = working
    // set seen − baseline − bytes touched by then. The crossing is when
    // baseline + overhead + bytes reached the line, interpolated.
    let count = shm.count().load(Ordering::Acquire) as usize;
    let mut at_event = 0u64;
    let mut at_kill = 0u64;
    for i in 0..count {
        let (t, b) = shm.record(i);
        if t <= t_event {
            at_event = b;
        }
        if t <= t_kill {
            at_kill = b;
        }
    }
    let ws_event = o.capacity_mib * MI - ev_avail.max(0) as u64;
    let overhead = ws_event as i128 - baseline as i128 - at_event as i128;
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
    let cross = cross.ok_or_else(|| {
        let last = if count > 0 { shm.record(count - 1).1 } else { 0 };
        format!(
            "the hog never reached the line: {count} records, last {last} bytes, need {need} (baseline {baseline}), event available {ev_avail}"
        )
    })?;
    killed.map_err(|e| format!("kill: {e}"))?;
    let d = |t: u64| t as i128 - cross as i128;
    Ok(Run {
        rate_mib_s: rate,
        run: n,
        detect_ms: ms(d(t_event)),
        kill_ms: ms(d(t_kill)),
        empty_ms: Some(ms(d(t_done))),
        released_ms: t_released.map(|t| ms(d(t))),
        wake: match source {
            WakeSource::Poll => "poll".into(),
            WakeSource::EventFd => "eventfd".into(),
        },
        overshoot_mib: (at_kill as f64 - need as f64) / MI as f64,
        kernel_overhead_kib: overhead as f64 / 1024.0,
        sampler_cross_lag_ms: sampler_cross.map(|t| ms(d(t))),
        kill_after_sampled_ms: sampler_cross.map(|t| ms(t_kill as i128 - t as i128)),
        polls,
        eventfd_wakeups: efd,
    })
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[idx.min(v.len() - 1)]
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
    let sys = Path::new("/sys/fs/cgroup");
    let version = qosd::cgroup::detect::detect_version(sys).unwrap_or_else(|e| {
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
    for &rate in &o.rates {
        for _ in 0..o.runs {
            n += 1;
            match one_run(&o, version, &parent, rate, n) {
                Ok(r) => {
                    eprintln!(
                        "rate {rate} MiB/s run {n}: detect {:.2} ms, kill {:.2} ms, empty {:?} ms, released {:?} ms ({})",
                        r.detect_ms, r.kill_ms, r.empty_ms, r.released_ms, r.wake
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
        let mut kill: Vec<f64> = rs.iter().map(|r| r.kill_ms).collect();
        let mut rel: Vec<f64> = rs.iter().filter_map(|r| r.released_ms).collect();
        let mut det: Vec<f64> = rs.iter().map(|r| r.detect_ms).collect();
        let mut ks: Vec<f64> = rs.iter().filter_map(|r| r.kill_after_sampled_ms).collect();
        summary.push(serde_json::json!({
            "rate_mib_s": rate,
            "runs": rs.len(),
            "kill_ms": {"median": pct(&mut kill, 50.0), "p99": pct(&mut kill, 99.0), "max": pct(&mut kill, 100.0)},
            "detect_ms": {"median": pct(&mut det, 50.0), "p99": pct(&mut det, 99.0)},
            "released_ms": {"median": pct(&mut rel, 50.0), "p99": pct(&mut rel, 99.0), "max": pct(&mut rel, 100.0)},
            "eventfd_wakes": rs.iter().filter(|r| r.wake == "eventfd").count(),
            "kill_after_sampled_ms": if ks.is_empty() { serde_json::Value::Null } else {
                serde_json::json!({"median": pct(&mut ks, 50.0), "p99": pct(&mut ks, 99.0), "max": pct(&mut ks, 100.0)})
            },
        }));
    }
    let doc = serde_json::json!({
        "cgroup_version": version.as_str(),
        "capacity_mib": o.capacity_mib,
        "threshold_mib": o.threshold_mib,
        "watch": {"min_interval_ms": o.min_interval_ms, "max_interval_ms": o.max_interval_ms, "eventfd": o.eventfd, "rt_priority": o.rt},
        "crossing": "reconstructed from the hog's own (CLOCK_MONOTONIC, bytes) records, interpolated, calibrated by the kernel's extra charge seen at the event",
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
