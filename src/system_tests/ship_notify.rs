//! sd_notify helpers on a real NOTIFY_SOCKET datagram socket. Alone in its
//! test binary because it sets environment variables.

use std::time::Duration;

use crate::telemetry::notify;

const T: Duration = Duration::from_secs(5);

/// The sd_notify helpers send the messages systemd expects on a real
/// NOTIFY_SOCKET datagram socket, and are silent no-ops without one.
#[test]
fn systemd_notify_messages() {
    use std::os::unix::net::UnixDatagram;
    // Without systemd: Ok and nothing happens.
    std::env::remove_var("NOTIFY_SOCKET");
    notify::ready("no systemd").unwrap();
    assert_eq!(notify::watchdog_interval(), None);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    std::env::set_var("NOTIFY_SOCKET", &path);
    std::env::set_var("WATCHDOG_USEC", "30000000");
    std::env::set_var("WATCHDOG_PID", std::process::id().to_string());
    let recv = || {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    };
    notify::ready("reconciled 3 pods").unwrap();
    let m = recv();
    assert!(m.lines().any(|l| l == "READY=1"), "{m:?}");
    assert!(m.lines().any(|l| l == "STATUS=reconciled 3 pods"), "{m:?}");
    notify::watchdog().unwrap();
    assert_eq!(recv().trim(), "WATCHDOG=1");
    notify::stopping().unwrap();
    assert_eq!(recv().trim(), "STOPPING=1");
    assert_eq!(notify::watchdog_interval(), Some(Duration::from_secs(15)));
    for v in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        std::env::remove_var(v);
    }
}
