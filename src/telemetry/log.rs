//! Logging set-up: where log lines go and in which format, and the log
//! level (`logLevel`, reloaded on SIGHUP).

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

pub use qosd_config::{log_filter_ok, LogFormat};

type Reload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

static RELOAD: OnceLock<Reload> = OnceLock::new();

/// Logs go to stderr at level `info` unless `QOSD_LOG` says otherwise
/// (e.g. `debug`, `qosd=trace`).
pub(crate) fn init_logging(format: LogFormat) {
    init_logging_at(format, "info");
}

/// Logs go to stderr; the level is `QOSD_LOG` when set, else `level`
/// (the config's `logLevel`).
pub(crate) fn init_logging_at(format: LogFormat, level: &str) {
    use std::io::IsTerminal;
    let filter = std::env::var("QOSD_LOG")
        .ok()
        .and_then(|f| filter(&f).ok())
        .or_else(|| filter(level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| SafeStderr);
    macro_rules! install {
        ($b:expr) => {{
            let b = $b.with_filter_reloading();
            let h = b.reload_handle();
            let _ = RELOAD.set(Box::new(move |f| h.reload(f).map_err(|e| e.to_string())));
            b.try_init()
        }};
    }
    let _ = match format {
        LogFormat::Json => install!(builder.json().flatten_event(true)),
        // Under systemd: `<N>` priority prefixes, no timestamp or colour
        // (journald keeps both) — see telemetry::journald.
        LogFormat::Text if crate::telemetry::journald::stderr_is_journal() => install!(builder
            .fmt_fields(escaped_fields())
            .with_ansi(false)
            .event_format(crate::telemetry::journald::PriorityPrefix(
                tracing_subscriber::fmt::format()
                    .without_time()
                    .with_ansi(false),
            ))),
        LogFormat::Text => install!(builder
            .fmt_fields(escaped_fields())
            .with_ansi(std::io::stderr().is_terminal())),
    };
}

/// The text format's fields (`key=value`, the message bare) with control
/// characters escaped: a pod name holding a newline or an escape sequence
/// cannot forge a log line or drive the terminal. JSON logs escape by
/// themselves.
pub(crate) fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let v = format!("{value:?}");
        let v = crate::telemetry::text::text_safe(&v);
        if field.name() == "message" {
            write!(w, "{v}")
        } else {
            write!(w, "{}={v}", field.name())
        }
    })
    .delimited(" ")
}

/// How often a state that lasts is logged again (with a count).
pub(crate) const REPEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A failing state logged on change and at most once per [`REPEAT_EVERY`]
/// while it lasts, instead of on every attempt.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    /// Failures since the state began (0: not failing).
    pub(crate) count: u64,
    last_logged: Option<std::time::Instant>,
}

impl Repeats {
    /// One more failure at `now`: `Some(count)` when it is to be logged
    /// (the first, then once per [`REPEAT_EVERY`]).
    pub(crate) fn failed(&mut self, now: std::time::Instant) -> Option<u64> {
        self.count += 1;
        let due = self
            .last_logged
            .is_none_or(|t| now.saturating_duration_since(t) >= REPEAT_EVERY);
        if due {
            self.last_logged = Some(now);
            Some(self.count)
        } else {
            None
        }
    }

    /// The state ended: `Some(count)` of the failures it lasted, if any.
    pub(crate) fn recovered(&mut self) -> Option<u64> {
        let n = std::mem::take(&mut self.count);
        self.last_logged = None;
        (n > 0).then_some(n)
    }
}

/// A filter from `QOSD_LOG` or `logLevel`, checked first the way the
/// config checks it (tracing's parser panics on some non-ASCII input).
fn filter(s: &str) -> Result<EnvFilter, String> {
    log_filter_ok(s)?;
    EnvFilter::try_new(crate_targets(s)).map_err(|e| e.to_string())
}

/// qosd's code lives in four crates; a filter names it as one: `qosd`
/// (every crate) or `qosd::<module>` (the crate that holds the module).
fn crate_targets(s: &str) -> String {
    const MOVED: [(&str, &str); 9] = [
        ("core", "qosd_model"),
        ("policy", "qosd_model"),
        ("sys", "qosd_node"),
        ("cri", "qosd_node"),
        ("kube", "qosd_node"),
        ("manifest", "qosd_node"),
        ("pods", "qosd_node"),
        ("evict", "qosd_node"),
        ("config", "qosd_config"),
    ];
    let mut out: Vec<String> = Vec::new();
    for item in s.split(',') {
        let (target, level) = match item.split_once('=') {
            Some((t, l)) => (t.trim(), Some(l)),
            None => (item.trim(), None),
        };
        let with = |t: &str| match level {
            Some(l) => format!("{t}={l}"),
            None => t.to_string(),
        };
        if target == "qosd" && level.is_some() {
            for c in ["qosd", "qosd_model", "qosd_node", "qosd_config"] {
                out.push(with(c));
            }
            continue;
        }
        let moved = target.strip_prefix("qosd::").and_then(|rest| {
            let head = rest.split("::").next().unwrap_or("");
            MOVED
                .iter()
                .find(|(m, _)| *m == head)
                .map(|(_, krate)| format!("{krate}::{rest}"))
        });
        match moved {
            // Named targets (`qosd::eviction`, `qosd::cri::timing`) keep
            // their name; a module path moves with its crate.
            Some(t) => {
                out.push(with(target));
                out.push(with(&t));
            }
            None => out.push(item.to_string()),
        }
    }
    out.join(",")
}

/// Change the log level of the running process (SIGHUP `logLevel`).
pub(crate) fn set_level(level: &str) {
    let Some(reload) = RELOAD.get() else { return };
    match filter(level) {
        Ok(f) => match reload(f) {
            Ok(()) => tracing::info!(level, "log level changed"),
            Err(e) => tracing::warn!(level, error = %e, "log level not changed"),
        },
        Err(e) => tracing::warn!(level, error = %e, "log level not changed"),
    }
}

/// Log lines that could not be written (stderr full, closed pipe, journal
/// gone) since start; the daemon reports them as `qosd_errors_total{kind="log_write"}`.
static LOG_WRITE_ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many log writes failed so far.
pub(crate) fn log_write_errors() -> u64 {
    LOG_WRITE_ERRORS.load(std::sync::atomic::Ordering::Relaxed)
}

/// stderr for log lines: a failed write (ENOSPC, EPIPE, EBADF, EAGAIN) is
/// counted and dropped, never an error or a panic. Losing a log line must
/// not stop the node's protection.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SafeStderr;

impl std::io::Write for SafeStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if std::io::stderr().lock().write_all(buf).is_err() {
            LOG_WRITE_ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// `eprintln!` that never panics: a line for the operator on stderr
/// (failures are counted like log lines).
pub(crate) fn stderr_line(line: &str) {
    use std::io::Write;
    let mut w = SafeStderr;
    let _ = w.write(format!("{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_lasting_failure_is_logged_first_then_once_a_minute_then_on_recovery() {
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_millis(s * 2500);
        let mut r = Repeats::default();
        assert_eq!(r.recovered(), None, "nothing to report without failures");
        assert_eq!(r.failed(at(0)), Some(1));
        // 2.5 s apart: silent until a minute has passed since the last line.
        let logged: Vec<u64> = (1..=50).filter_map(|i| r.failed(at(i))).collect();
        assert_eq!(logged, vec![25, 49], "once a minute, with the count");
        assert_eq!(r.recovered(), Some(51));
        assert_eq!(r.failed(at(52)), Some(1), "a new state is logged at once");
    }

    #[test]
    fn failed_writes_are_counted_not_fatal() {
        // fd 2 of this test process is redirected to a closed pipe for the
        // duration of the write, then restored.
        let saved = nix::unistd::dup(std::io::stderr()).unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        drop(r);
        nix::unistd::dup2_stderr(&w).unwrap();
        let before = log_write_errors();
        let n = SafeStderr.write(b"lost line\n").unwrap();
        stderr_line("also lost");
        nix::unistd::dup2_stderr(&saved).unwrap();
        assert_eq!(n, 10);
        assert!(log_write_errors() >= before + 2);
    }

    #[test]
    fn log_filters_are_checked_before_tracing_parses_them() {
        for ok in ["info", "qosd=debug,warn", "qosd::kube=trace", "off"] {
            assert!(log_filter_ok(ok).is_ok(), "{ok}");
        }
        // tracing-subscriber's directive parser panics on this one (a
        // multi-byte character where it slices by bytes): refused first.
        let e = log_filter_ok("0,,        \u{3090}       [%             !    ,,,,,").unwrap_err();
        assert!(e.contains("is not allowed"), "{e}");
        // ... and spends over 10 s on this span/field filter: refused too.
        let slow = "0< :[c{v9crdpp2222S44444444=44..........................44ppppppsreeppl}";
        assert!(log_filter_ok(slow).is_err());
        assert!(log_filter_ok(&"a".repeat(qosd_config::MAX_LOG_FILTER + 1)).is_err());
    }

    #[test]
    fn filters_name_qosd_as_one_crate() {
        assert_eq!(
            crate_targets("info,qosd=debug"),
            "info,qosd=debug,qosd_model=debug,qosd_node=debug,qosd_config=debug"
        );
        assert_eq!(
            crate_targets("warn,qosd::sys::watch=trace"),
            "warn,qosd::sys::watch=trace,qosd_node::sys::watch=trace"
        );
        assert_eq!(crate_targets("qosd::runtime=debug"), "qosd::runtime=debug");
        assert_eq!(crate_targets("debug"), "debug");
        assert!(log_filter_ok("info\nqosd=debug").is_err());
        assert!(log_filter_ok("qosd=loud").is_err());
        assert!(filter("debug").is_ok());
    }
}

#[cfg(test)]
mod escape_tests {
    use std::sync::{Arc, Mutex};

    #[derive(Clone)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn text_log_lines_escape_control_characters() {
        let buf = Buf(Arc::new(Mutex::new(Vec::new())));
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .fmt_fields(super::escaped_fields())
            .with_ansi(false)
            .without_time()
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::with_default(sub, || {
            let name = "evil\u{1b}[31m\nINFO forged line";
            tracing::info!(pod = %name, uid = ?name, "evicting {name}");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.matches('\n').count(), 1, "one event, one line: {out:?}");
        assert!(!out.contains('\u{1b}'), "{out:?}");
        assert!(
            out.contains("evicting evil\\u{1b}[31m\\nINFO forged line"),
            "{out:?}"
        );
        assert!(
            out.contains("pod=evil\\u{1b}[31m\\nINFO forged line"),
            "{out:?}"
        );
    }
}
