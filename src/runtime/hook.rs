//! `evictionHook`: a program run after each eviction (earlyoom's
//! `-N`/`--post-kill` idea), with what happened in its environment:
//!
//! | variable | value |
//! |---|---|
//! | `QOSD_POD_NAMESPACE`, `QOSD_POD_NAME`, `QOSD_POD_UID` | the evicted pod |
//! | `QOSD_QOS_CLASS` | `Guaranteed`, `Burstable`, `BestEffort` |
//! | `QOSD_SIGNAL` | e.g. `memory.available` |
//! | `QOSD_OBSERVED`, `QOSD_THRESHOLD` | in the signal's unit (bytes, inodes, processes) |
//! | `QOSD_THRESHOLD_KIND` | `hard` or `soft` |
//! | `QOSD_BACKEND` | `kill` or `cri` |
//!
//! Each run has its own thread and is killed after the timeout; runs never
//! delay the eviction loop (a run still going when the next eviction comes
//! does not hold it back: the next run starts beside it, up to
//! [`MAX_CONCURRENT`]; beyond that a run is skipped and counted).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs at the same time, at most (a hook that hangs cannot pile up).
pub(crate) const MAX_CONCURRENT: usize = 4;

/// What an eviction hook run is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookEvent {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) qos_class: String,
    pub(crate) signal: String,
    pub(crate) observed: i64,
    pub(crate) threshold: i64,
    pub(crate) threshold_kind: String,
    pub(crate) backend: String,
}

impl HookEvent {
    /// The environment variables of a run.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("QOSD_POD_NAMESPACE", self.namespace.clone()),
            ("QOSD_POD_NAME", self.name.clone()),
            ("QOSD_POD_UID", self.uid.clone()),
            ("QOSD_QOS_CLASS", self.qos_class.clone()),
            ("QOSD_SIGNAL", self.signal.clone()),
            ("QOSD_OBSERVED", self.observed.to_string()),
            ("QOSD_THRESHOLD", self.threshold.to_string()),
            ("QOSD_THRESHOLD_KIND", self.threshold_kind.clone()),
            ("QOSD_BACKEND", self.backend.clone()),
        ]
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookResult {
    Ok,
    Failed,
    Timeout,
    /// Not started: [`MAX_CONCURRENT`] runs still going.
    Skipped,
}

impl HookResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HookResult::Ok => "ok",
            HookResult::Failed => "failed",
            HookResult::Timeout => "timeout",
            HookResult::Skipped => "skipped",
        }
    }
}

/// The configured hook.
#[derive(Clone)]
pub(crate) struct Hook {
    program: PathBuf,
    timeout: Duration,
    running: Arc<AtomicUsize>,
    on_done: Arc<dyn Fn(HookResult) + Send + Sync>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook")
            .field("program", &self.program)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Hook {
    /// `on_done` is called (on the run's thread) with each run's result.
    pub(crate) fn new(
        program: PathBuf,
        timeout: Duration,
        on_done: Arc<dyn Fn(HookResult) + Send + Sync>,
    ) -> Hook {
        Hook {
            program,
            timeout,
            running: Arc::new(AtomicUsize::new(0)),
            on_done,
        }
    }

    /// Start a run for `ev` and return at once.
    pub(crate) fn fire(&self, ev: HookEvent) {
        if self.running.fetch_add(1, Ordering::SeqCst) >= MAX_CONCURRENT {
            self.running.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(program = %self.program.display(), pod = %ev.uid, "eviction hook not run: {MAX_CONCURRENT} runs still going");
            (self.on_done)(HookResult::Skipped);
            return;
        }
        let hook = self.clone();
        let spawned = std::thread::Builder::new()
            .name("qosd-evict-hook".into())
            .spawn(move || {
                let r = hook.run(&ev);
                hook.running.fetch_sub(1, Ordering::SeqCst);
                (hook.on_done)(r);
            });
        if let Err(e) = spawned {
            self.running.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(error = %e, "eviction hook thread not started");
            (self.on_done)(HookResult::Failed);
        }
    }

    /// Run once, waiting at most the timeout (then SIGKILL).
    pub(crate) fn run(&self, ev: &HookEvent) -> HookResult {
        let mut cmd = Command::new(&self.program);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in ev.env() {
            cmd.env(k, v);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(program = %self.program.display(), error = %e, "eviction hook could not start");
                return HookResult::Failed;
            }
        };
        let deadline = Instant::now() + self.timeout;
        let poll = qosd_model::core::backoff::Backoff::new(
            Duration::from_millis(5),
            Duration::from_millis(100),
        );
        let mut pause = poll.first;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return HookResult::Ok,
                Ok(Some(status)) => {
                    tracing::warn!(program = %self.program.display(), %status, pod = %ev.uid, "eviction hook failed");
                    return HookResult::Failed;
                }
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    tracing::warn!(program = %self.program.display(), timeout = ?self.timeout, pod = %ev.uid, "eviction hook killed after its timeout");
                    return HookResult::Timeout;
                }
                Ok(None) => {
                    std::thread::sleep(pause);
                    pause = poll.next(pause);
                }
                Err(e) => {
                    tracing::warn!(program = %self.program.display(), error = %e, "eviction hook wait failed");
                    return HookResult::Failed;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn event() -> HookEvent {
        HookEvent {
            namespace: "ns".into(),
            name: "hog".into(),
            uid: "u-1".into(),
            qos_class: "BestEffort".into(),
            signal: "memory.available".into(),
            observed: 52428800,
            threshold: 104857600,
            threshold_kind: "hard".into(),
            backend: "kill".into(),
        }
    }

    fn script(dir: &std::path::Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("hook.sh");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn env_reaches_the_program_and_results_are_reported() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        let p = script(
            d.path(),
            &format!(
                "echo \"$QOSD_POD_NAMESPACE/$QOSD_POD_NAME $QOSD_POD_UID $QOSD_QOS_CLASS $QOSD_SIGNAL $QOSD_OBSERVED<$QOSD_THRESHOLD $QOSD_THRESHOLD_KIND $QOSD_BACKEND\" > {}",
                out.display()
            ),
        );
        let results = Arc::new(Mutex::new(Vec::new()));
        let r2 = results.clone();
        let hook = Hook::new(
            p,
            Duration::from_secs(10),
            Arc::new(move |r| r2.lock().unwrap().push(r)),
        );
        assert_eq!(hook.run(&event()), HookResult::Ok);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "ns/hog u-1 BestEffort memory.available 52428800<104857600 hard kill\n"
        );
        let failing = Hook::new(
            script(d.path(), "exit 3"),
            Duration::from_secs(10),
            Arc::new(|_| {}),
        );
        assert_eq!(failing.run(&event()), HookResult::Failed);
        let missing = Hook::new(
            d.path().join("nope"),
            Duration::from_secs(1),
            Arc::new(|_| {}),
        );
        assert_eq!(missing.run(&event()), HookResult::Failed);
        assert!(results.lock().unwrap().is_empty());
    }

    #[test]
    fn a_hanging_hook_is_killed_and_never_blocks_the_caller() {
        let d = tempfile::tempdir().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let hook = Hook::new(
            script(d.path(), "exec sleep 30"),
            Duration::from_millis(200),
            Arc::new(move |r| {
                let _ = tx.lock().unwrap().send(r);
            }),
        );
        // fire() returns before the run ends: the result arrives later.
        hook.fire(event());
        hook.fire(event());
        let got = [
            rx.recv_timeout(Duration::from_secs(20)).unwrap(),
            rx.recv_timeout(Duration::from_secs(20)).unwrap(),
        ];
        assert_eq!(got, [HookResult::Timeout, HookResult::Timeout]);
    }
}
