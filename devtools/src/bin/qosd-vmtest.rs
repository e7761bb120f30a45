//! qosd-vmtest: drives qosd's cgroup layer inside the cgroup v2 test VM
//! (tests/vm/, docs/cgroup-v2-vm.md). Not installed, not for operators.
//!
//! * `qosd-vmtest apply --base DIR [--enable-from DIR] [--dry-run] PLAN.json`
//!   applies a plan (`[{"file": ..., "value": ..., "level"?: "node|qos|pod"}]`)
//!   and prints the report as JSON (`written`, `unchanged`, `errors`, ...).
//! * `qosd-vmtest kill DIR [--deadline-ms N]` kills every process in a cgroup
//!   (v2 `cgroup.kill`, else SIGKILL loop).
//! * `qosd-vmtest scenario-v2 [--root /sys/fs/cgroup]` runs the applier
//!   scenario against the real cgroup v2 tree with checks; prints `CHECK ok`
//!   lines and `MEASURE` lines; exit 0 when every check passed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use qosd_model::core::model::{CgroupLevel, CgroupWrite};
use qosd_node::sys::apply::{self, Applier, ApplyReport, Mode};
use qosd_node::sys::cgroupfs::{self as fs, CgroupFsError};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("apply") => cmd_apply(&args[1..]),
        Some("kill") => cmd_kill(&args[1..]),
        Some("scenario-v2") => scenario_v2(&args[1..]),
        _ => Err("usage: qosd-vmtest apply|kill|scenario-v2 ... (see source)".into()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qosd-vmtest: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}

type R<T> = Result<T, String>;

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn parse_level(s: Option<&str>) -> R<CgroupLevel> {
    Ok(match s.unwrap_or("pod") {
        "node" => CgroupLevel::Node,
        "qos" => CgroupLevel::Qos,
        "pod" => CgroupLevel::Pod,
        other => return Err(format!("bad level {other:?}")),
    })
}

fn report_json(r: &ApplyReport) -> serde_json::Value {
    serde_json::json!({
        "writes": r.written.iter().zip(&r.previous).map(|(w, p)| serde_json::json!({
            "file": w.file, "value": w.value, "previous": p,
        })).collect::<Vec<_>>(),
        "unchanged": r.unchanged,
        "errors": r.errors.iter().map(|e| serde_json::json!({
            "file": e.file, "value": e.value, "error": e.error.to_string(),
        })).collect::<Vec<_>>(),
        "created_dirs": r.created_dirs,
        "enabled_controllers": r.enabled_controllers.iter().map(|(f, v)| serde_json::json!({"file": f, "value": v})).collect::<Vec<_>>(),
    })
}

fn cmd_apply(args: &[String]) -> R<()> {
    let base = flag(args, "--base").ok_or("--base DIR required")?;
    let plan_path = args.last().ok_or("PLAN.json required")?;
    let text = std::fs::read_to_string(plan_path).map_err(|e| format!("{plan_path}: {e}"))?;
    let items: Vec<serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| format!("{plan_path}: {e}"))?;
    let mut writes = Vec::new();
    for it in items {
        let file = PathBuf::from(it["file"].as_str().ok_or("entry without file")?);
        let dir = file.parent().ok_or("file without dir")?.to_path_buf();
        writes.push(CgroupWrite {
            value: it["value"]
                .as_str()
                .ok_or("entry without value")?
                .to_string(),
            cgroup: String::new(),
            level: parse_level(it["level"].as_str())?,
            file,
            dir,
        });
    }
    let mode = if args.iter().any(|a| a == "--dry-run") {
        Mode::DryRun
    } else {
        Mode::Real
    };
    let mut a = Applier::new(mode, PathBuf::from(base));
    if let Some(top) = flag(args, "--enable-from") {
        a = a.enable_v2_controllers_from(PathBuf::from(top));
    }
    let r = a.apply(&writes);
    println!("{}", report_json(&r));
    if r.errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{} write(s) failed", r.errors.len()))
    }
}

fn cmd_kill(args: &[String]) -> R<()> {
    let dir = args.first().ok_or("DIR required")?;
    let ms: u64 = flag(args, "--deadline-ms")
        .map(|s| s.parse().map_err(|e| format!("--deadline-ms: {e}")))
        .transpose()?
        .unwrap_or(1000);
    qosd_node::sys::kill::kill_cgroup_tree(Path::new(dir), Duration::from_millis(ms))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------- scenario

struct Checks {
    failed: usize,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            println!("CHECK ok: {what}");
        } else {
            println!("CHECK FAILED: {what}");
            self.failed += 1;
        }
    }
}

fn w(dir: &Path, file: &str, value: &str, level: CgroupLevel) -> CgroupWrite {
    CgroupWrite {
        file: dir.join(file),
        value: value.to_string(),
        dir: dir.to_path_buf(),
        cgroup: String::new(),
        level,
    }
}

fn read(p: &Path) -> String {
    fs::read(p).unwrap_or_else(|e| format!("<{e}>"))
}

/// Removes the test prefix leaf first, whatever happens (also on panic).
struct Cleanup {
    dirs: Vec<PathBuf>,
    children: Vec<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in &self.dirs {
            if let Ok(order) = fs::walk_leaf_first(d) {
                for x in order {
                    let _ = std::fs::remove_dir(&x);
                }
            }
        }
    }
}

fn spawn_sleeper_in(cg: &Path) -> R<Child> {
    let child = Command::new("sleep")
        .arg("1000")
        .spawn()
        .map_err(|e| format!("spawn sleep: {e}"))?;
    fs::write(&cg.join("cgroup.procs"), &child.id().to_string()).map_err(|e| e.to_string())?;
    Ok(child)
}

fn scenario_v2(args: &[String]) -> R<()> {
    let root = PathBuf::from(flag(args, "--root").unwrap_or_else(|| "/sys/fs/cgroup".into()));
    if !fs::is_v2_dir(&root) {
        return Err(format!("{} is not a cgroup v2 mount", root.display()));
    }
    let prefix = root.join(format!("qosd-test-{}", std::process::id()));
    let noctl = root.join(format!("qosd-test-{}-noctl", std::process::id()));
    let mut guard = Cleanup {
        dirs: vec![prefix.clone(), noctl.clone()],
        children: Vec::new(),
    };
    std::fs::create_dir(&prefix).map_err(|e| format!("mkdir {}: {e}", prefix.display()))?;
    let mut c = Checks { failed: 0 };

    let kp = prefix.join("kubepods");
    let bu = kp.join("burstable");
    let be = kp.join("besteffort");
    let pod1 = bu.join("pod11111111-1111-1111-1111-111111111111");
    let pod2 = kp.join("pod22222222-2222-2222-2222-222222222222");
    let pod3 = be.join("pod33333333-3333-3333-3333-333333333333");
    let plan = vec![
        w(&kp, "cpu.weight", "79", CgroupLevel::Node),
        w(&kp, "memory.max", "805306368", CgroupLevel::Node),
        w(&kp, "pids.max", "max", CgroupLevel::Node),
        w(&bu, "cpu.weight", "10", CgroupLevel::Qos),
        w(&bu, "memory.max", "max", CgroupLevel::Qos),
        w(&be, "cpu.weight", "1", CgroupLevel::Qos),
        w(&pod1, "cpu.weight", "10", CgroupLevel::Pod),
        w(&pod1, "cpu.max", "50000 100000", CgroupLevel::Pod),
        w(&pod1, "memory.max", "268435456", CgroupLevel::Pod),
        w(&pod2, "cpu.weight", "40", CgroupLevel::Pod),
        w(&pod2, "cpu.max", "100000 100000", CgroupLevel::Pod),
        w(&pod2, "memory.max", "134217728", CgroupLevel::Pod),
        w(&pod3, "cpu.weight", "1", CgroupLevel::Pod),
        w(&pod3, "cpu.max", "max", CgroupLevel::Pod),
        w(&pod3, "memory.max", "max", CgroupLevel::Pod),
    ];
    let mut applier = Applier::new(Mode::Real, kp.clone()).enable_v2_controllers_from(root.clone());

    // 1. First pass creates the tree, enables controllers, writes.
    let t = Instant::now();
    let r = applier.apply(&plan);
    let first = t.elapsed();
    for e in &r.errors {
        println!("  error: {e}");
    }
    c.check(r.errors.is_empty(), "first pass: no errors");
    c.check(
        r.created_dirs.contains(&pod1),
        "first pass: pod cgroup created",
    );
    c.check(
        read(&prefix.join("cgroup.subtree_control")).contains("memory"),
        "controllers enabled in the prefix's subtree_control",
    );
    let all_ok = plan
        .iter()
        .all(|x| apply::values_equal(&x.file, &read(&x.file), &x.value));
    c.check(all_ok, "every planned value reads back (normalised)");
    c.check(
        read(&pod1.join("cpu.max")) == "50000 100000",
        "pod1 cpu.max = 50000 100000",
    );
    c.check(
        read(&pod2.join("memory.max")) == "134217728",
        "pod2 memory.max = 128Mi",
    );
    c.check(
        read(&pod3.join("cpu.max")) == "max 100000",
        "pod3 cpu.max = max 100000",
    );
    println!(
        "MEASURE first_pass writes={} created={} time_us={}",
        r.write_count(),
        r.created_dirs.len(),
        first.as_micros()
    );

    // 2. Steady state: zero writes.
    let t = Instant::now();
    let r = applier.apply(&plan);
    let steady = t.elapsed();
    c.check(
        r.write_count() == 0 && r.errors.is_empty() && r.unchanged == plan.len(),
        &format!(
            "second pass: zero writes ({} writes, {} unchanged)",
            r.write_count(),
            r.unchanged
        ),
    );
    println!(
        "MEASURE steady_pass files={} time_us={} per_file_us={:.1}",
        plan.len(),
        steady.as_micros(),
        steady.as_micros() as f64 / plan.len() as f64
    );

    // 3. Drift is corrected with exactly one write.
    fs::write(&bu.join("cpu.weight"), "500").map_err(|e| e.to_string())?;
    let r = applier.apply(&plan);
    c.check(
        r.write_count() == 1 && r.written[0].file == bu.join("cpu.weight"),
        "drift: exactly one corrective write",
    );
    c.check(
        read(&bu.join("cpu.weight")) == "10",
        "drift: value restored",
    );
    c.check(
        r.previous.first().and_then(|p| p.as_deref()) == Some("500"),
        "drift: previous value reported",
    );

    // 4. Ordering: lowering goes child first, raising parent first.
    let lower = vec![
        w(&kp, "memory.max", "536870912", CgroupLevel::Node),
        w(&pod1, "memory.max", "134217728", CgroupLevel::Pod),
    ];
    let r = applier.apply(&lower);
    let order: Vec<_> = r.written.iter().map(|x| x.dir.clone()).collect();
    c.check(
        order == vec![pod1.clone(), kp.clone()],
        "lowering: child before parent",
    );
    let r = applier.apply(&plan);
    let order: Vec<_> = r.written.iter().map(|x| x.dir.clone()).collect();
    c.check(
        order == vec![kp.clone(), pod1.clone()],
        "raising: parent before child",
    );

    // 5. Dry run reports and writes nothing.
    fs::write(&pod2.join("cpu.weight"), "77").map_err(|e| e.to_string())?;
    let mut dry = Applier::new(Mode::DryRun, kp.clone());
    let r = dry.apply(&plan);
    c.check(
        r.write_count() == 1 && read(&pod2.join("cpu.weight")) == "77",
        "dry run: one would-be write, nothing written",
    );
    applier.apply(&plan);

    // 6. Missing controller: a clear typed error, no file created.
    std::fs::create_dir(&noctl).map_err(|e| e.to_string())?;
    let nkp = noctl.join("kubepods");
    std::fs::create_dir(&nkp).map_err(|e| e.to_string())?;
    let r = Applier::new(Mode::Real, nkp.clone()).apply(&[w(
        &nkp,
        "memory.max",
        "104857600",
        CgroupLevel::Node,
    )]);
    let msg = r.errors.first().map(|e| e.to_string()).unwrap_or_default();
    println!("  missing-controller error: {msg}");
    c.check(
        matches!(
            r.errors.first().map(|e| &e.error),
            Some(CgroupFsError::ControllerNotEnabled { controller, .. }) if controller == "memory"
        ) && msg.contains("not enabled in parent's cgroup.subtree_control"),
        "missing controller: ControllerNotEnabled(memory)",
    );
    // The raw O_CREAT gotcha, for the record.
    let creat = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(nkp.join("memory.max"));
    println!(
        "  (for the record: open with O_CREAT gives {:?})",
        creat.err().map(|e| e.kind())
    );
    let direct = fs::write(&nkp.join("memory.max"), "104857600");
    c.check(
        matches!(direct, Err(CgroupFsError::ControllerNotEnabled { .. })),
        "fs::write without O_CREAT: ControllerNotEnabled",
    );
    let r = Applier::new(Mode::Real, nkp.clone())
        .enable_v2_controllers_from(root.clone())
        .apply(&[w(&nkp, "memory.max", "104857600", CgroupLevel::Node)]);
    c.check(
        r.errors.is_empty() && read(&nkp.join("memory.max")) == "104857600",
        "with enabling on: controller enabled and value written",
    );

    // 7. cgroup.kill of a pod with a process in a container cgroup.
    let ctr = pod1.join("ctr1");
    std::fs::create_dir(&ctr).map_err(|e| e.to_string())?;
    let child = spawn_sleeper_in(&ctr)?;
    let pid = child.id() as i32;
    guard.children.push(child);
    c.check(
        fs::list_pids(&ctr).map_err(|e| e.to_string())? == vec![pid],
        "sleeper in ctr1",
    );
    // Orphan removal refuses a pod with processes.
    let live: BTreeSet<String> = ["22222222-2222-2222-2222-222222222222".to_string()].into();
    let orphans =
        apply::scan_orphans(std::slice::from_ref(&kp), &live).map_err(|e| e.to_string())?;
    let odirs: Vec<_> = orphans.iter().map(|o| o.dir.clone()).collect();
    c.check(
        odirs == vec![pod3.clone(), pod1.clone()],
        &format!("orphan scan finds pod1 and pod3: {odirs:?}"),
    );
    let refused = apply::remove_cgroup_tree_if_empty(&pod1, std::slice::from_ref(&kp));
    c.check(
        matches!(refused, Err(CgroupFsError::NotEmpty { .. })) && pod1.is_dir(),
        "orphan with a live process is not removed",
    );
    let t = Instant::now();
    let k = qosd_node::sys::kill::kill_cgroup_tree(&pod1, Duration::from_secs(2)).map(|_| ());
    let kill_time = t.elapsed();
    c.check(k.is_ok(), &format!("cgroup.kill: pod emptied ({k:?})"));
    println!(
        "MEASURE cgroup_kill_until_empty_us={}",
        kill_time.as_micros()
    );
    let status = guard.children.pop().map(|mut ch| ch.wait());
    c.check(
        matches!(&status, Some(Ok(s)) if !s.success()),
        &format!("sleeper was killed: {status:?}"),
    );
    // v1-style SIGKILL loop works on a v2 tree too.
    let child = spawn_sleeper_in(&ctr)?;
    guard.children.push(child);
    let kills =
        qosd_node::sys::kill::sigkill_tree(&pod1, Duration::from_secs(2)).map(|r| r.signalled);
    c.check(
        matches!(kills, Ok(n) if n >= 1),
        &format!("SIGKILL loop: {kills:?}"),
    );
    if let Some(mut ch) = guard.children.pop() {
        let _ = ch.wait();
    }
    let removed = apply::remove_cgroup_tree_if_empty(&pod1, std::slice::from_ref(&kp))
        .map_err(|e| e.to_string())?;
    c.check(
        removed == vec![ctr.clone(), pod1.clone()] && !pod1.exists(),
        "empty orphan removed leaf first",
    );
    c.check(
        apply::remove_cgroup_tree_if_empty(&prefix, std::slice::from_ref(&kp)).is_err(),
        "never removes outside the base",
    );

    // 8. Cost of a write: flip a value N times through the applier.
    let n = 200;
    let t = Instant::now();
    for i in 0..n {
        let v = if i % 2 == 0 { "20" } else { "30" };
        let r = applier.apply(&[w(&pod2, "cpu.weight", v, CgroupLevel::Pod)]);
        if r.write_count() != 1 {
            c.check(false, "write loop: one write each");
            break;
        }
    }
    println!(
        "MEASURE applier_write_us={:.1} (read+compare+write, {} iterations)",
        t.elapsed().as_micros() as f64 / n as f64,
        n
    );

    drop(guard);
    c.check(
        !prefix.exists() && !noctl.exists(),
        "cleanup removed the test prefix",
    );
    if c.failed == 0 {
        println!("SCENARIO v2 PASSED");
        Ok(())
    } else {
        Err(format!("{} check(s) failed", c.failed))
    }
}
