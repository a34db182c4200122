//! The few raw syscalls of the TCP transport, each wrapped once.
//!
//! - `epoll_create1` / `epoll_ctl` / `epoll_wait` (level-triggered readiness, see the
//!   module doc of `tcp` for why not mio),
//! - `recv` into the spare capacity of a `Vec<u8>` (so large payloads land in their
//!   final buffer without zero-filling it first),
//! - `sendmsg` with an iovec list and `MSG_NOSIGNAL | MSG_DONTWAIT` (writev semantics
//!   without SIGPIPE, through nix's safe wrapper).
//!
//! Everything else goes through std, socket2 or nix safe APIs.

use std::io;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{MsgFlags, SockaddrStorage};

/// Interest in reading (and noticing a peer's FIN / a socket error).
pub(crate) const INTEREST_READ: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
/// Interest in reading and writing (only while an out-queue is non-empty).
pub(crate) const INTEREST_READ_WRITE: u32 = INTEREST_READ | libc::EPOLLOUT as u32;

/// An owned, level-triggered epoll instance. Each registered fd carries a `u64` token
/// (the peer's rank).
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

/// One readiness report: the token given at registration and the `EPOLL*` bits.
pub(crate) type Ready = libc::epoll_event;

impl Epoll {
    /// `epoll_create1(EPOLL_CLOEXEC)`.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative return is a fresh fd
        // that nothing else owns, so wrapping it in OwnedFd (which closes it) is sound.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above; `fd` is valid and exclusively ours.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The epoll fd itself: readable while any registered fd is ready (level-triggered),
    /// so it can be waited on together with other fds.
    pub(crate) fn raw(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    /// `epoll_ctl(EPOLL_CTL_ADD)`, level-triggered.
    pub(crate) fn add(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    /// `epoll_ctl(EPOLL_CTL_MOD)`.
    pub(crate) fn modify(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    /// `epoll_ctl(EPOLL_CTL_DEL)`.
    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest,
            u64: token,
        };
        // SAFETY: `ev` is a valid, live epoll_event for the duration of the call (the
        // kernel copies it); `self.fd` is our epoll fd; a bad `fd` is reported as EBADF.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `epoll_wait` for up to `timeout_ms` (0: just look; -1: forever). Fills the front of
    /// `buf` and returns how many entries are valid. `EINTR` returns `Ok(0)`.
    pub(crate) fn wait(&self, buf: &mut [Ready], timeout_ms: i32) -> io::Result<usize> {
        let max = buf.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `buf` is a valid, writable array of `max` initialised epoll_event
        // structs that outlives the call; the kernel writes at most `max` of them.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), buf.as_mut_ptr(), max, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(n as usize)
    }
}

/// A zeroed readiness buffer of `n` entries for [`Epoll::wait`].
pub(crate) fn ready_buf(n: usize) -> Vec<Ready> {
    vec![libc::epoll_event { events: 0, u64: 0 }; n]
}

/// `(events, token)` of one readiness report (copies out of the packed struct).
pub(crate) fn ready_parts(r: &Ready) -> (u32, u64) {
    (r.events, r.u64)
}

/// Nonblocking `recv` of at most `max` bytes appended to `buf` (into its spare
/// capacity, reserving as needed). Returns the byte count; `Ok(0)` is end of stream.
/// `EINTR` is retried.
pub(crate) fn recv_append(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let spare = buf.spare_capacity_mut();
    let want = max.min(spare.len());
    loop {
        // SAFETY: `spare` points at `want` writable (possibly uninitialised) bytes owned
        // by `buf`; recv writes at most `want` bytes there and returns how many it wrote.
        let n = unsafe {
            libc::recv(
                fd,
                spare.as_mut_ptr().cast::<libc::c_void>(),
                want,
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        // SAFETY: the kernel initialised exactly `n <= want <= spare.len()` bytes right
        // after the current length.
        unsafe { buf.set_len(buf.len() + n) };
        return Ok(n);
    }
}

/// Nonblocking `recv` of up to `len` bytes into raw memory at `dst`.
///
/// # Safety
/// `dst` is valid for writes of `len` bytes and nothing else accesses them meanwhile.
pub(crate) unsafe fn recv_raw(fd: RawFd, dst: *mut u8, len: usize) -> io::Result<usize> {
    loop {
        // SAFETY: forwarded to the caller; recv writes at most `len` bytes at `dst`.
        let n = unsafe { libc::recv(fd, dst.cast::<libc::c_void>(), len, libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n as usize);
    }
}

/// Nonblocking gather write (`sendmsg` with `MSG_NOSIGNAL | MSG_DONTWAIT`): like
/// `writev`, but a peer that has gone away yields `EPIPE` instead of killing the process
/// with SIGPIPE. Returns the bytes written; `EINTR` is retried.
pub(crate) fn send_vectored(fd: RawFd, iov: &[IoSlice<'_>]) -> io::Result<usize> {
    loop {
        match nix::sys::socket::sendmsg::<SockaddrStorage>(
            fd,
            iov,
            &[],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        ) {
            Ok(n) => return Ok(n),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn recv_append_and_send_vectored_roundtrip() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let n = send_vectored(
            a.as_raw_fd(),
            &[IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cde")],
        )
        .unwrap();
        assert_eq!(n, 5);
        let mut got = b"x".to_vec();
        let mut total = 0;
        while total < 5 {
            match recv_append(b.as_raw_fd(), &mut got, 10) {
                Ok(n) => total += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, b"xabcde");
        // Nothing more: WouldBlock, not a hang.
        let e = recv_append(b.as_raw_fd(), &mut got, 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(a);
        // EOF after the peer closed.
        loop {
            match recv_append(b.as_raw_fd(), &mut got, 10) {
                Ok(0) => break,
                Ok(_) => panic!("unexpected data"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn epoll_reports_readable_level_triggered() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let ep = Epoll::new().unwrap();
        ep.add(b.as_raw_fd(), 7, INTEREST_READ).unwrap();
        let mut buf = ready_buf(4);
        assert_eq!(ep.wait(&mut buf, 0).unwrap(), 0);
        a.write_all(b"hi").unwrap();
        assert_eq!(ep.wait(&mut buf, 1000).unwrap(), 1);
        let (ev, tok) = ready_parts(&buf[0]);
        assert_eq!(tok, 7);
        assert_ne!(ev & libc::EPOLLIN as u32, 0);
        // Level-triggered: still reported while unread.
        assert_eq!(ep.wait(&mut buf, 0).unwrap(), 1);
        ep.delete(b.as_raw_fd()).unwrap();
        assert_eq!(ep.wait(&mut buf, 0).unwrap(), 0);
    }
}
