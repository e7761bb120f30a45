//! The stop deadline: once `qosd run` is asked to stop (SIGTERM, SIGINT),
//! the process ends within [`STOP_DEADLINE`] whatever its loops are doing.
//!
//! The loops stop through `Control` messages that an async task forwards
//! from the signals; a loop blocked in a system call (a start-up or a reload
//! stuck on a file or a peer that never answers) or a runtime whose workers
//! are all blocked would never see them, and SIGTERM would be ignored. So
//! the signal also writes one byte to a pipe (async-signal-safe) that a
//! plain thread waits on; that thread gives the orderly stop the deadline
//! and then ends the process with [`super::supervisor::EXIT_UNHEALTHY`].
//! The thread sleeps in `read(2)` until a stop is asked: no idle cost.

use std::io::Read;
use std::os::fd::IntoRawFd;
use std::time::Duration;

/// How long an orderly stop may take once asked for: well inside the
/// kubelet's default termination grace (30 s) and systemd's stop timeout.
pub(crate) const STOP_DEADLINE: Duration = Duration::from_secs(15);

/// Arm the deadline for SIGTERM and SIGINT (call once, when the daemon's own
/// handlers are installed: before that, the default action ends the
/// process at once).
pub(crate) fn arm(deadline: Duration) -> std::io::Result<()> {
    let (read_end, write_end) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    // The write end lives as long as the process: the handlers use it.
    let fd = write_end.into_raw_fd();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let action = move || {
            // SAFETY: write(2) is async-signal-safe; `fd` stays open for the
            // life of the process and the buffer is a static byte.
            unsafe {
                libc::write(fd, b"s".as_ptr().cast(), 1);
            }
        };
        // SAFETY: the action only calls write(2) (async-signal-safe), and
        // registering beside tokio's own handler keeps both (the registry
        // runs every action registered for the signal).
        unsafe { signal_hook_registry::register(sig, action) }?;
    }
    std::thread::Builder::new()
        .name("qosd-stop-guard".into())
        .spawn(move || {
            let mut f = std::fs::File::from(read_end);
            let mut b = [0u8; 1];
            if matches!(f.read(&mut b), Ok(1)) {
                std::thread::sleep(deadline);
                tracing::error!(
                    deadline_s = deadline.as_secs(),
                    "did not stop within the deadline after a stop signal (a loop is blocked); exiting"
                );
                std::process::exit(super::supervisor::EXIT_UNHEALTHY);
            }
        })?;
    Ok(())
}
