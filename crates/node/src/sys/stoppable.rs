//! A watcher thread that sleeps in `poll(2)` and is stopped from outside:
//! a flag it checks, and an eventfd it polls so the stop wakes it at once.
//! Shared by the fast memory watcher ([`super::watch`]) and the pressure
//! watcher ([`super::pressure`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::sys::eventfd::{EfdFlags, EventFd};

/// What the thread watches for a stop: the flag, and the eventfd to poll.
#[derive(Clone)]
pub(crate) struct StopSignal {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) waker: Arc<EventFd>,
}

impl StopSignal {
    pub(crate) fn new() -> nix::Result<StopSignal> {
        Ok(StopSignal {
            stop: Arc::new(AtomicBool::new(false)),
            waker: Arc::new(EventFd::from_flags(
                EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
            )?),
        })
    }
}

/// The running thread: stopped and joined by [`StoppableThread::shutdown`]
/// or when dropped.
pub(crate) struct StoppableThread {
    signal: StopSignal,
    handle: Option<JoinHandle<()>>,
}

impl StoppableThread {
    pub(crate) fn spawn(
        name: &str,
        signal: StopSignal,
        f: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<StoppableThread> {
        let handle = std::thread::Builder::new().name(name.into()).spawn(f)?;
        Ok(StoppableThread {
            signal,
            handle: Some(handle),
        })
    }

    /// Whether the thread is still running (it ends only when stopped, or
    /// when it panicked).
    pub(crate) fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Set the flag, wake the thread and wait for it.
    pub(crate) fn shutdown(&mut self) {
        self.signal.stop.store(true, Ordering::Relaxed);
        let _ = self.signal.waker.write(1);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for StoppableThread {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutdown_wakes_a_thread_polling_the_waker_and_joins_it() {
        let sig = StopSignal::new().unwrap();
        let s = sig.clone();
        let mut t = StoppableThread::spawn("test-stoppable", sig, move || {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            use std::os::fd::AsFd;
            while !s.stop.load(Ordering::Relaxed) {
                let mut fds = [PollFd::new(s.waker.as_fd(), PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::NONE);
            }
        })
        .unwrap();
        assert!(t.is_running());
        t.shutdown();
        assert!(!t.is_running());
    }
}
