//! The memory hog on the host: tests/images/memhog.c (the same program as
//! the memhog container image) run as a plain process inside a cgroup.

use std::ffi::CString;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

/// A memhog process started inside a cgroup; SIGKILLed by its PID and
/// reaped on drop.
pub struct Memhog {
    child: Option<Child>,
    stdout: std::io::BufReader<ChildStdout>,
}

impl Memhog {
    /// `memhog <args>` (`["64"]`: hold 64 MiB; see memhog.c) as a process
    /// of the cgroup `dir` (it joins `dir/cgroup.procs` before exec, so all
    /// its memory is charged there); returns once it holds its initial MiB.
    pub fn start_in(dir: &Path, args: &[&str]) -> Memhog {
        let mut cmd = Command::new(super::static_binary("memhog"));
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped());
        in_cgroup(&mut cmd, dir);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("memhog in {}: {e}", dir.display()));
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut hog = Memhog {
            child: Some(child),
            stdout,
        };
        let initial = args.first().copied().unwrap_or("0");
        hog.wait_holding(initial.parse().expect("memhog <initial MiB>"));
        hog
    }

    /// Block until memhog reports holding `mib` MiB ("memhog: <n> MiB").
    pub fn wait_holding(&mut self, mib: u64) {
        let want = format!("memhog: {mib} MiB");
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "memhog exited before holding {mib} MiB");
            if line.trim() == want {
                return;
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Wait for it to end (after someone killed it): its exit status.
    pub fn wait(mut self) -> ExitStatus {
        self.child.take().unwrap().wait().unwrap()
    }
}

/// Make `cmd`'s process join the cgroup `dir` (its `cgroup.procs`) between
/// fork and exec, so everything it does is charged there from the start.
pub fn in_cgroup<'a>(cmd: &'a mut Command, dir: &Path) -> &'a mut Command {
    let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let r = libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1);
            libc::close(fd);
            if r != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

impl Drop for Memhog {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
