//! systemd notification (`Type=notify`, `WatchdogSec=`): sd_notify messages
//! for `systemd/qosd.service`. Every function is a no-op (returning `Ok`)
//! when qosd does not run under systemd (`NOTIFY_SOCKET` unset), so the
//! daemon calls them unconditionally.

use std::time::Duration;

use sd_notify::NotifyState;

/// `READY=1` (after the first successful reconcile) with a status line.
pub fn ready(status: &str) -> std::io::Result<()> {
    sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)])
}

/// `WATCHDOG=1`: call at least every [`watchdog_interval`].
pub fn watchdog() -> std::io::Result<()> {
    sd_notify::notify(&[NotifyState::Watchdog])
}

/// `RELOADING=1` before re-reading the config on SIGHUP; send
/// [`ready`] when done.
pub(crate) fn reloading() -> std::io::Result<()> {
    sd_notify::notify(&[NotifyState::Reloading])
}

/// `STOPPING=1` on SIGTERM.
pub fn stopping() -> std::io::Result<()> {
    sd_notify::notify(&[NotifyState::Stopping])
}

/// How often to send [`watchdog`]: half of `WATCHDOG_USEC`, or `None`
/// when the watchdog is off (not under systemd, or no `WatchdogSec=`).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}
