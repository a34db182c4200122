//! The reaper: a tiny forked helper that kills the ranks' process groups if rwrun dies
//! without cleaning up (SIGKILL, a crash).
//!
//! `PR_SET_PDEATHSIG` kills each rank when rwrun dies, but not the processes a rank
//! started (the flag is not inherited across fork). The reaper is forked before any
//! thread exists, sits in its own process group ignoring the usual termination signals,
//! and reads process group ids from a pipe whose write end only rwrun holds. When the
//! pipe reaches EOF without the "job cleaned up" word (0), rwrun is gone: the reaper
//! sends SIGKILL to every group it was told about and exits. On a normal exit rwrun
//! writes 0 and the reaper just exits.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::IntoRawFd;
use std::time::{Duration, Instant};

/// Handle on the reaper process.
#[derive(Debug)]
pub(crate) struct Reaper {
    pid: libc::pid_t,
    pipe: File,
}

impl Reaper {
    /// Fork the reaper.
    ///
    /// # Safety
    /// Must be called while the process has only one thread (before the tokio runtime,
    /// the output thread or anything else starts): the child keeps running Rust code
    /// after `fork`.
    ///
    /// # Errors
    /// Creating the pipe or forking failed; rwrun then runs without a reaper.
    pub(crate) unsafe fn start() -> io::Result<Reaper> {
        let (read_end, write_end) = crate::spawn::cloexec_pipe()?;
        // SAFETY: the caller guarantees a single-threaded process, so the child may run
        // arbitrary code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(write_end);
            // SAFETY: we are the single-threaded child; `run_child` never returns.
            unsafe { run_child(read_end.into_raw_fd()) }
        }
        drop(read_end);
        Ok(Reaper {
            pid,
            pipe: File::from(write_end),
        })
    }

    /// Remember the process group `pgid` (a rank's).
    pub(crate) fn add_group(&mut self, pgid: i32) {
        if let Err(e) = self.pipe.write_all(&pgid.to_be_bytes()) {
            tracing::debug!("reaper: cannot pass group {pgid}: {e}");
        }
    }

    /// The job is cleaned up: let the reaper exit without killing, and reap it.
    pub(crate) fn disarm(mut self) {
        let _ = self.pipe.write_all(&0i32.to_be_bytes());
        drop(self.pipe);
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            let mut status = 0;
            // SAFETY: plain system call on our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r != 0 || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

// The reaper's whole life (the process was single-threaded at fork, so allocating is
// fine here).
unsafe fn run_child(fd: i32) -> ! {
    // SAFETY (whole block): single-threaded child; plain system calls on its own
    // descriptors and dispositions.
    unsafe {
        libc::setpgid(0, 0);
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Move the pipe out of the way, then drop rwrun's stdio (a consumer waiting for
        // EOF on rwrun's stdout would wait for the reaper too) and every other
        // inherited descriptor.
        let keep = libc::fcntl(fd, libc::F_DUPFD, 100);
        if keep < 0 {
            libc::_exit(0);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for target in 0..3 {
                libc::dup2(null, target);
            }
        }
        close_all_except(keep);
        libc::prctl(
            libc::PR_SET_NAME,
            c"rwrun-reaper".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );

        // rwrun's pid, for its job id (`rw<pid><8 hex>`, see spawn.rs).
        let parent = libc::getppid();
        let mut groups: Vec<i32> = Vec::new();
        let mut word = [0u8; 4];
        let mut have = 0usize;
        loop {
            let n = libc::read(
                keep,
                word.as_mut_ptr().add(have) as *mut libc::c_void,
                4 - have,
            );
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break; // EOF (or error): rwrun is gone.
            }
            have += n as usize;
            if have < 4 {
                continue;
            }
            have = 0;
            let pgid = i32::from_be_bytes(word);
            if pgid == 0 {
                libc::_exit(0);
            }
            groups.push(pgid);
        }
        for &g in &groups {
            libc::killpg(g, libc::SIGKILL);
        }
        // Ranks killed while setting up shared memory may leave segment names behind
        // (rwrun's own cleanup never ran): remove this job's.
        std::thread::sleep(Duration::from_millis(20));
        remove_job_segments(parent);
        libc::_exit(0)
    }
}

/// Remove `/dev/shm/rankwire-rw<pid><8 hex>-*`: the segments of the job of the rwrun
/// with process id `pid`.
fn remove_job_segments(pid: i32) {
    let prefix = format!("rankwire-rw{pid}");
    crate::job::remove_shm_where(|name| is_job_segment(name, &prefix));
}

/// Whether `name` is `<prefix><8 hex digits>-…`.
fn is_job_segment(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() > 9
            && rest.as_bytes()[..8].iter().all(u8::is_ascii_hexdigit)
            && rest.as_bytes()[8] == b'-'
    })
}

unsafe fn close_all_except(keep: i32) {
    // SAFETY: closing descriptors of this single-threaded child.
    unsafe {
        let max = u32::MAX as libc::c_long;
        let ok = libc::syscall(libc::SYS_close_range, 3, keep - 1, 0) == 0
            && libc::syscall(libc::SYS_close_range, keep + 1, max, 0) == 0;
        if !ok {
            for fd in 3..4096 {
                if fd != keep {
                    libc::close(fd);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_job_segment;

    #[test]
    fn job_segment_names_match_exactly_one_rwrun() {
        assert!(is_job_segment(
            "rankwire-rw1234abcdef01-0-shm",
            "rankwire-rw1234"
        ));
        // Another rwrun whose pid starts with the same digits.
        assert!(!is_job_segment(
            "rankwire-rw12345bcdef012-0-shm",
            "rankwire-rw1234"
        ));
        assert!(!is_job_segment(
            "rankwire-rw1234abcdef0-0-shm",
            "rankwire-rw1234"
        ));
        assert!(!is_job_segment(
            "rankwire-slurm-1-0-5-0-shm",
            "rankwire-rw1234"
        ));
    }
}
