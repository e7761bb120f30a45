//! Logging set-up: where log lines go and in which format.

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Logs go to stderr; the level comes from `QOSD_LOG` (e.g. `debug`,
/// `qosd=trace`), default `info`.
pub fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("QOSD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| SafeStderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        // Under systemd: `<N>` priority prefixes, no timestamp or colour
        // (journald keeps both) — see telemetry::journald.
        LogFormat::Text if crate::telemetry::journald::stderr_is_journal() => builder
            .with_ansi(false)
            .event_format(crate::telemetry::journald::PriorityPrefix(
                tracing_subscriber::fmt::format()
                    .without_time()
                    .with_ansi(false),
            ))
            .try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Log lines that could not be written (stderr full, closed pipe, journal
/// gone) since start; the daemon reports them as `qosd_errors_total{kind="log_write"}`.
static LOG_WRITE_ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many log writes failed so far.
pub fn log_write_errors() -> u64 {
    LOG_WRITE_ERRORS.load(std::sync::atomic::Ordering::Relaxed)
}

/// stderr for log lines: a failed write (ENOSPC, EPIPE, EBADF, EAGAIN) is
/// counted and dropped, never an error or a panic. Losing a log line must
/// not stop the node's protection.
#[derive(Debug, Clone, Copy, Default)]
pub struct SafeStderr;

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
pub fn stderr_line(line: &str) {
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
}
