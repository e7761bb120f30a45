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
        .with_writer(std::io::stderr);
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
