//! Log priorities for journald: when stderr is the journal's stream
//! (`$JOURNAL_STREAM` names stderr's device and inode, as systemd sets it
//! for a service's output), each text log line starts with a `<N>` syslog
//! priority (error 3, warn 4, info 6, debug and trace 7), which journald
//! strips and stores as PRIORITY (`SyslogLevelPrefix=yes`, its default).
//! Nothing else about the format changes.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The `<N>` prefix of a level.
pub(crate) fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// Whether `journal_stream` (`$JOURNAL_STREAM`, `<dev>:<ino>`) names the
/// file with device `dev` and inode `ino`.
pub(crate) fn names_stream(journal_stream: &str, dev: u64, ino: u64) -> bool {
    journal_stream
        .split_once(':')
        .is_some_and(|(d, i)| d.parse() == Ok(dev) && i.parse() == Ok(ino))
}

/// Is our stderr connected to journald?
pub(crate) fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    names_stream(&stream, meta.dev(), meta.ino())
}

/// Wraps an event formatter and puts the syslog priority in front.
pub(crate) struct PriorityPrefix<F>(pub(crate) F);

impl<S, N, F> FormatEvent<S, N> for PriorityPrefix<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_and_stream() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::TRACE), 7);
        assert!(names_stream("8:12345", 8, 12345));
        assert!(!names_stream("8:12345", 8, 1));
        assert!(!names_stream("garbage", 8, 12345));
    }
}
