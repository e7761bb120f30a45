//! Logging set-up: where log lines go and in which format, and the log
//! level (`logLevel`, reloaded on SIGHUP).

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

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
            .with_ansi(false)
            .event_format(crate::telemetry::journald::PriorityPrefix(
                tracing_subscriber::fmt::format()
                    .without_time()
                    .with_ansi(false),
            ))),
        LogFormat::Text => install!(builder.with_ansi(std::io::stderr().is_terminal())),
    };
}

/// A log filter (`logLevel`, `QOSD_LOG`) qosd accepts: comma-separated
/// `level` or `target=level` items — letters, digits and `_ : = , . -`
/// (and spaces), at most [`MAX_LOG_FILTER`] bytes — then tracing's own
/// parser. Span and field filters (`[span{field=value}]`) are not
/// accepted: the parser panics on some non-ASCII input (it slices inside
/// a multi-byte character) and takes over 10 s on some field patterns
/// (both found by the `config` fuzz target, kept as seeds).
pub(crate) fn log_filter_ok(s: &str) -> Result<(), String> {
    if s.len() > MAX_LOG_FILTER {
        return Err(format!(
            "{} bytes: a log filter is at most {MAX_LOG_FILTER}",
            s.len()
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_:=,.- ".contains(c);
    if let Some(ch) = s.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "{ch:?} is not allowed: a log filter is `level` or `target=level` items \
             separated by commas (letters, digits and `_ : = , . -`)"
        ));
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The longest log filter accepted.
pub(crate) const MAX_LOG_FILTER: usize = 1024;

/// A filter from `QOSD_LOG` or `logLevel`, checked first the way the
/// config checks it (tracing's parser panics on some non-ASCII input).
fn filter(s: &str) -> Result<EnvFilter, String> {
    log_filter_ok(s)?;
    EnvFilter::try_new(s).map_err(|e| e.to_string())
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
        assert!(log_filter_ok(&"a".repeat(MAX_LOG_FILTER + 1)).is_err());
        assert!(log_filter_ok("info\nqosd=debug").is_err());
        assert!(log_filter_ok("qosd=loud").is_err());
        assert!(filter("debug").is_ok());
    }
}
