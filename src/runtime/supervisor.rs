//! Supervision of the long-running loops of `qosd run`.
//!
//! Every loop (reconcile, eviction, the fast watcher through the eviction
//! loop, the HTTP server) either beats a [`Heartbeat`] registered with
//! [`Health`] or runs on a thread started by [`spawn_supervised`], which
//! turns a panic into a recorded failure instead of a silently dead thread.
//! [`watch`] checks liveness when it could fail: it sleeps until the
//! earliest heartbeat deadline (or the runtime-unreachable limit) could
//! expire, and is woken at once by a failure (a panic), a new loop or limit,
//! or the runtime going away; heartbeats wake nobody. Once liveness fails
//! (a panic, a loop whose heartbeat is older than its deadline),
//! `/healthz` answers 503 with the reason for a short grace period, so
//! probes see it, and then the process exits with [`EXIT_UNHEALTHY`] so
//! systemd or the kubelet restarts it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use crate::telemetry::health::Health;

/// Exit code of a daemon whose supervisor found a dead or stalled loop.
pub const EXIT_UNHEALTHY: i32 = 70;

/// Environment variable naming a fault-injection point (tests only): the
/// code at that point panics, as a bug there would.
pub const INJECT_PANIC_ENV: &str = "QOSD_INJECT_PANIC";

/// Panic here when `QOSD_INJECT_PANIC` names `point` (read once).
pub(crate) fn inject_panic(point: &str) {
    static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var(INJECT_PANIC_ENV).ok());
    if armed.as_deref() == Some(point) {
        panic!("injected panic at {point} ({INJECT_PANIC_ENV})");
    }
}

/// Environment variable naming a stall-injection point (tests only): the
/// thread at that point blocks for good, as a system call that never
/// returns would.
pub const INJECT_STALL_ENV: &str = "QOSD_INJECT_STALL";

/// Block this thread for good when `QOSD_INJECT_STALL` names `point`.
pub(crate) fn inject_stall(point: &str) {
    static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var(INJECT_STALL_ENV).ok());
    if armed.as_deref() == Some(point) {
        tracing::warn!(point, "injected stall ({INJECT_STALL_ENV})");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// The text of a panic payload.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// Run `f` on a named thread; a panic in it is logged and recorded in
/// `health` (liveness fails), never lost.
pub(crate) fn spawn_supervised<F>(
    name: &'static str,
    health: Option<Arc<Health>>,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
                let msg = panic_message(p.as_ref());
                tracing::error!(thread = name, panic = %msg, "supervised loop panicked");
                if let Some(h) = health {
                    h.fail(format!("{name} panicked: {msg}"));
                }
            }
        })
}

/// Run the never-ending task `fut` on `handle`; if it ends all the same (a
/// panic, or a return), that is logged and liveness fails with the reason.
/// A task cancelled by the runtime's shutdown is not a failure.
pub(crate) fn spawn_task_supervised<F>(
    handle: &tokio::runtime::Handle,
    name: &'static str,
    health: Arc<Health>,
    fut: F,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let task = handle.spawn(fut);
    handle.spawn(async move {
        let why = match task.await {
            Ok(()) => format!("{name} stopped"),
            Err(e) if e.is_panic() => {
                format!(
                    "{name} panicked: {}",
                    panic_message(e.into_panic().as_ref())
                )
            }
            Err(_) => return,
        };
        tracing::error!(task = name, reason = %why, "supervised task ended");
        health.fail(why);
    });
}

/// Longest sleep of the supervisor between checks (a backstop: every
/// deadline it watches is shorter, and a failure wakes it at once).
const MAX_CHECK_EVERY: Duration = Duration::from_secs(60);

/// Block until liveness fails and return why: check, then sleep until the
/// earliest deadline could expire ([`Health::until_unhealthy`], at most
/// `max_wait`) or something wakes the supervisor ([`Health::wait_change`]),
/// and check again. `checks` counts the checks (wake-ups).
pub(crate) fn until_unhealthy(health: &Health, max_wait: Duration, checks: &mut u64) -> String {
    loop {
        // Read before checking: a change between the check and the sleep
        // is not slept through.
        let seen = health.generation();
        *checks += 1;
        if let Err(why) = health.alive() {
            return why;
        }
        let wait = health.until_unhealthy().min(max_wait);
        health.wait_change(seen, wait);
    }
}

/// Watch liveness ([`until_unhealthy`]); once it fails, log why, keep
/// serving the failure for `grace` (probes see 503) and exit with
/// [`EXIT_UNHEALTHY`]. A stalled loop is seen within a millisecond of its
/// deadline, a failure at once.
pub(crate) fn watch(
    health: Arc<Health>,
    grace: Duration,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("qosd-supervisor".into())
        .spawn(move || {
            let why = until_unhealthy(&health, MAX_CHECK_EVERY, &mut 0);
            tracing::error!(reason = %why, grace = ?grace, exit_code = EXIT_UNHEALTHY, "unhealthy: exiting so the service manager restarts qosd");
            std::thread::sleep(grace);
            std::process::exit(EXIT_UNHEALTHY);
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_fails_liveness_with_the_reason() {
        let h = Arc::new(Health::new(Duration::from_secs(60)));
        assert!(h.alive().is_ok());
        spawn_supervised("test-loop", Some(h.clone()), || panic!("boom"))
            .unwrap()
            .join()
            .unwrap();
        let why = h.alive().unwrap_err();
        assert!(why.contains("test-loop panicked: boom"), "{why}");
    }

    #[test]
    fn a_task_that_panics_or_ends_fails_liveness_with_the_reason() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for (fut, want) in [
            (
                Box::pin(async { panic!("watch broke") })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
                "pod watch panicked: watch broke",
            ),
            (Box::pin(async {}), "pod watch stopped"),
        ] {
            let h = Arc::new(Health::new(Duration::from_secs(60)));
            spawn_task_supervised(rt.handle(), "pod watch", h.clone(), fut);
            rt.block_on(async {
                for _ in 0..100 {
                    if h.alive().is_err() {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            });
            let why = h.alive().unwrap_err();
            assert!(why.contains(want), "{why}");
        }
        // A task still running is no failure.
        let h = Arc::new(Health::new(Duration::from_secs(60)));
        spawn_task_supervised(rt.handle(), "pod watch", h.clone(), std::future::pending());
        rt.block_on(async {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        });
        assert!(h.alive().is_ok());
    }

    /// The supervisor sleeps until the earliest deadline could expire, not
    /// on a fixed tick: a loop that beats keeps it asleep, a stalled loop
    /// is found after its deadline, a failure wakes it at once.
    #[test]
    fn supervisor_wakes_at_deadlines_and_on_failure() {
        let h = Arc::new(Health::new(Duration::from_secs(600)));
        // Nothing registered: the main heartbeat's deadline, 600 s away.
        let left = h.until_unhealthy();
        assert!(
            left > Duration::from_secs(590) && left <= Duration::from_millis(600_001),
            "{left:?}"
        );
        let hb = h.register_loop("eviction loop", Duration::from_secs(30));
        let left = h.until_unhealthy();
        assert!(
            left > Duration::from_secs(29) && left <= Duration::from_millis(30_001),
            "{left:?}"
        );

        // A loop that stops beating: found stalled once its deadline is
        // past, after a handful of checks (not one per tick).
        let stall = h.register_loop("stalling loop", Duration::from_millis(200));
        stall.beat();
        let mut checks = 0;
        let why = until_unhealthy(&h, MAX_CHECK_EVERY, &mut checks);
        assert!(why.contains("stalling loop heartbeat"), "{why}");
        assert!(checks <= 3, "{checks} checks for one deadline");
        drop(hb);

        // A failure wakes a supervisor that would otherwise sleep 600 s.
        let h = Arc::new(Health::new(Duration::from_secs(600)));
        let (tx, rx) = std::sync::mpsc::channel();
        let h2 = h.clone();
        std::thread::spawn(move || {
            let mut checks = 0;
            let why = until_unhealthy(&h2, Duration::from_secs(600), &mut checks);
            let _ = tx.send((why, checks));
        });
        std::thread::sleep(Duration::from_millis(50));
        h.fail("eviction loop panicked: boom".into());
        let (why, checks) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a failure wakes the supervisor");
        assert!(why.contains("boom"), "{why}");
        assert!(checks <= 2, "{checks} checks");

        // So does the runtime going away with a limit.
        let h = Arc::new(Health::new(Duration::from_secs(600)));
        h.set_runtime_unhealthy_after(Some(Duration::from_millis(100)));
        let (tx, rx) = std::sync::mpsc::channel();
        let h2 = h.clone();
        std::thread::spawn(move || {
            let _ = tx.send(until_unhealthy(&h2, Duration::from_secs(600), &mut 0));
        });
        std::thread::sleep(Duration::from_millis(50));
        h.set_cri_reachable(false);
        let why = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the runtime limit is watched once the runtime is down");
        assert!(why.contains("container runtime unreachable"), "{why}");
    }

    #[test]
    fn a_stalled_loop_fails_liveness() {
        let h = Health::new(Duration::from_secs(60));
        let hb = h.register_loop("eviction loop", Duration::from_millis(30));
        hb.beat();
        assert!(h.alive().is_ok());
        std::thread::sleep(Duration::from_millis(60));
        let why = h.alive().unwrap_err();
        assert!(why.contains("eviction loop heartbeat"), "{why}");
        hb.beat();
        assert!(h.alive().is_ok());
    }
}
