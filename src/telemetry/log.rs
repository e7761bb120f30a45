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
pub fn init_logging(format: LogFormat) {
    init_logging_at(format, "info");
}

/// Logs go to stderr; the level is `QOSD_LOG` when set, else `level`
/// (the config's `logLevel`).
pub fn init_logging_at(format: LogFormat, level: &str) {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_env("QOSD_LOG")
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
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

/// Change the log level of the running process (SIGHUP `logLevel`).
pub fn set_level(level: &str) {
    let Some(reload) = RELOAD.get() else { return };
    match EnvFilter::try_new(level) {
        Ok(f) => match reload(f) {
            Ok(()) => tracing::info!(level, "log level changed"),
            Err(e) => tracing::warn!(level, error = %e, "log level not changed"),
        },
        Err(e) => tracing::warn!(level, error = %e, "log level not changed"),
    }
}
