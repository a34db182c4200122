//! The few Linux calls the shared-memory transport makes beyond `shm_open`/`mmap`: the
//! cross-process futex doorbell and peer liveness (pidfd, with `kill(pid, 0)` as the
//! fallback on kernels without `pidfd_open`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// `futex(FUTEX_WAIT)` on a word in shared memory (not `FUTEX_PRIVATE_FLAG`: waker and
/// waiter are different processes): sleep while `*word == expected`, at most `timeout`.
/// Returns on a wake-up, a changed word (`EAGAIN`), the timeout or a signal; the caller
/// re-checks its condition either way, so the result carries no information.
pub(super) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call (a reference);
    // `ts` outlives the call; the kernel only reads both. FUTEX_WAIT ignores the last two
    // arguments.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc == -1 {
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => {}
            _ => tracing::debug!("shm: futex(FUTEX_WAIT): {e}"),
        }
    }
}

/// `futex(FUTEX_WAKE)`: wake every waiter on `word` (there is at most one, the ring
/// owner's progress thread).
pub(super) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32 (a reference); FUTEX_WAKE does not access
    // memory through the pointer, it only uses it as the wait-queue key.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc == -1 {
        tracing::debug!("shm: futex(FUTEX_WAKE): {}", io::Error::last_os_error());
    }
}

/// How the liveness of a peer process is watched.
#[derive(Debug)]
pub(super) enum Watch {
    /// A pidfd: readable once the process has exited (zombies count as exited; pid reuse
    /// cannot fool it).
    Pidfd(OwnedFd),
    /// `kill(pid, 0)`: for kernels without `pidfd_open` (< 5.3). A zombie still counts
    /// as alive until it is reaped.
    Pid(libc::pid_t),
    /// The process was already gone at setup.
    Gone,
}

impl Watch {
    /// Start watching `pid`.
    pub(super) fn new(pid: libc::pid_t) -> Watch {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this fd to us; nothing else owns it.
            return Watch::Pidfd(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Watch::Gone,
            _ if pid_gone(pid) => Watch::Gone,
            _ => Watch::Pid(pid),
        }
    }
}

/// For each watch, whether its process has exited (one `poll(2)` over all pidfds).
pub(super) fn exited(watches: &[&Watch]) -> Vec<bool> {
    let mut out: Vec<bool> = watches.iter().map(|w| matches!(w, Watch::Gone)).collect();
    let mut fds = Vec::new();
    let mut idx = Vec::new();
    for (i, w) in watches.iter().enumerate() {
        match w {
            Watch::Pidfd(fd) => {
                fds.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                idx.push(i);
            }
            Watch::Pid(pid) => out[i] = pid_gone(*pid),
            Watch::Gone => {}
        }
    }
    if fds.is_empty() {
        return out;
    }
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call; timeout 0
    // never blocks.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    if n < 0 {
        tracing::debug!("shm: poll(pidfds): {}", io::Error::last_os_error());
        return out;
    }
    for (pfd, &i) in fds.iter().zip(&idx) {
        if pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            out[i] = true;
        }
    }
    out
}

/// `kill(pid, 0)` says the process does not exist (`ESRCH`). `EPERM` means it exists.
fn pid_gone(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks existence and permission; nothing is delivered.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn futex_times_out_and_wakes() {
        let w = AtomicU32::new(0);
        let t0 = Instant::now();
        futex_wait(&w, 0, Duration::from_millis(20));
        assert!(t0.elapsed() >= Duration::from_millis(15));
        // A changed word returns at once.
        let t0 = Instant::now();
        futex_wait(&w, 1, Duration::from_secs(5));
        assert!(t0.elapsed() < Duration::from_secs(1));

        let w = Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            let t0 = Instant::now();
            while w2.load(Ordering::Acquire) == 0 && t0.elapsed() < Duration::from_secs(5) {
                futex_wait(&w2, 0, Duration::from_secs(5));
            }
            t0.elapsed()
        });
        std::thread::sleep(Duration::from_millis(30));
        w.store(1, Ordering::Release);
        futex_wake(&w);
        assert!(h.join().unwrap() < Duration::from_secs(4));
    }

    #[test]
    fn liveness_of_self_and_of_an_exited_child() {
        let me = Watch::new(std::process::id() as libc::pid_t);
        assert_eq!(exited(&[&me]), vec![false]);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let w = Watch::new(child.id() as libc::pid_t);
        assert_eq!(exited(&[&me, &w]), vec![false, false]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(exited(&[&me, &w]), vec![false, true]);
        assert!(matches!(Watch::new(i32::MAX - 1), Watch::Gone));
    }
}
