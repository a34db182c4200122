//! Single copy between processes of one node by cross-memory attach:
//! `process_vm_readv(2)` / `process_vm_writev(2)` (moved here from the core's engine).
//!
//! Host memory needs no registration: [`Cma::register`] names the buffer by this
//! process's pid and the buffer's virtual address ([`RemoteMem::HostCma`]). Whether the
//! kernel allows the copy follows the `ptrace` attach rule (same user, not made
//! non-dumpable, `kernel.yama.ptrace_scope`, a container's seccomp policy); the core
//! finds out once at init with [`cma_probe`] on every same-node peer's
//! [`CMA_PROBE_WORD`] and turns single copy off ([`Cma::set_allowed`]) with
//! `RANKWIRE_CMA=0`.
//!
//! A [`Cma`] is usable on its own, without shared-memory rings (the core's TCP-only
//! runs between ranks of one node still pull large messages this way); the
//! [`crate::ShmTransport`] holds one and answers [`crate::Transport::get`] /
//! [`crate::Transport::put`] / [`crate::Transport::register`] with it.

use std::io::{IoSlice, IoSliceMut};

use nix::sys::uio::{RemoteIoVec, process_vm_readv, process_vm_writev};

use crate::{
    Caps, KindCaps, LocalBuf, MemoryKind, OpStart, Reach, Registration, RemoteMem, TransportError,
};

/// Transport name in errors (the shm transport's).
const NAME: &str = "shm";

/// A word every rank publishes the address of at init, for [`cma_probe`].
pub static CMA_PROBE_WORD: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(CMA_PROBE_MAGIC);
const CMA_PROBE_MAGIC: u64 = 0x7277_636d_615f_6f6b; // "rwcma_ok"

/// Whether this process may read process `pid`'s memory by cross-memory attach: reads
/// the peer's [`CMA_PROBE_WORD`] at `addr` with `process_vm_readv(2)`, which the kernel
/// allows under the same rule as `ptrace` attach (same user and not made non-dumpable,
/// `kernel.yama.ptrace_scope`, a container's seccomp policy).
///
/// # Errors
/// `Ok(false)` when the process is gone (`ESRCH`: a peer that already exited, which the
/// transports report as such); `Err` with the refusal (`EPERM` most often) or a wrong
/// value read, as text.
pub fn cma_probe(pid: u32, addr: u64) -> Result<bool, String> {
    let mut word = [0u8; 8];
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: word.len(),
    }];
    let n = match process_vm_readv(
        nix::unistd::Pid::from_raw(pid as i32),
        &mut [IoSliceMut::new(&mut word)],
        &remote,
    ) {
        Ok(n) => n,
        Err(nix::errno::Errno::ESRCH) => return Ok(false),
        Err(e) => return Err(format!("process_vm_readv refused ({e})")),
    };
    if n != word.len() || u64::from_ne_bytes(word) != CMA_PROBE_MAGIC {
        return Err(format!(
            "process_vm_readv read {n} bytes, not the probe word"
        ));
    }
    Ok(true)
}

/// Declared capabilities of cross-memory attach on its own (a [`Cma`] without
/// shared-memory rings, the core's `cma` selection candidate for the one-sided part of
/// same-node host rendezvous): name `cma`, reach within the node, host memory by
/// one-sided `get` and `put` only (no `send`: it carries no messages, so it is never a
/// route), descriptors from [`Cma::register`] (pid and address; nothing pinned, so
/// `needs_registration` is false). No device or managed memory.
pub fn caps() -> Caps {
    Caps {
        name: "cma",
        reach: Reach::Node,
        host: Some(KindCaps {
            send: false,
            put: true,
            get: true,
            eager_limit_bytes: 0,
            max_frame_payload_bytes: 0,
            max_message_bytes: u64::MAX,
            needs_registration: false,
            register: true,
        }),
        cuda: None,
        cuda_managed: None,
    }
}

/// Cross-memory attach of host memory, for one process: registration by pid and
/// address, reads and writes of peers' [`RemoteMem::HostCma`] buffers. Every operation
/// completes on return ([`OpStart::Done`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cma {
    pid: u32,
    allowed: bool,
}

impl Default for Cma {
    fn default() -> Self {
        Cma::new()
    }
}

impl Cma {
    /// Cross-memory attach for this process, allowed (see [`Cma::set_allowed`]).
    pub fn new() -> Cma {
        Cma {
            pid: std::process::id(),
            allowed: true,
        }
    }

    /// Allow or forbid single copy (`RANKWIRE_CMA=0` forbids it): forbidden, every
    /// operation returns [`TransportError::Unsupported`] and the caps of the owning
    /// transport say `get`/`put` false.
    pub fn set_allowed(&mut self, on: bool) {
        self.allowed = on;
    }

    /// Whether single copy is allowed.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    fn unsupported(what: &'static str) -> TransportError {
        TransportError::Unsupported {
            transport: NAME,
            what,
        }
    }

    fn check(&self, what: &'static str, kind: MemoryKind) -> Result<(), TransportError> {
        if self.allowed && kind == MemoryKind::Host {
            Ok(())
        } else {
            Err(Self::unsupported(what))
        }
    }

    /// The descriptor of host buffer `buf`: this process's pid and the address (no
    /// kernel call; nothing to release).
    ///
    /// # Errors
    /// [`TransportError::Unsupported`] for device memory or when not allowed.
    pub fn register(&self, buf: LocalBuf) -> Result<Registration, TransportError> {
        self.check("register", buf.kind)?;
        Ok(Registration {
            remote: RemoteMem::HostCma {
                pid: self.pid,
                addr: buf.addr,
            },
            handle: 0,
        })
    }

    /// Read `dst.len_bytes` bytes from `src` (a [`RemoteMem::HostCma`] of process
    /// `pid`), `offset_bytes` into it, with `process_vm_readv(2)`, looping over partial
    /// reads. Done on return.
    ///
    /// # Safety
    /// `dst` is valid for writes of `dst.len_bytes` bytes, touched by nobody else during
    /// the call.
    ///
    /// # Errors
    /// [`TransportError::Unsupported`] for device memory, a descriptor of another kind,
    /// or when not allowed; [`TransportError::Os`] with the OS error (`EPERM` when ptrace
    /// rules forbid it, `ESRCH` when the process is gone, `EFAULT` for a bad address).
    pub unsafe fn get(
        &self,
        dst: LocalBuf,
        src: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        self.check("get", dst.kind)?;
        let RemoteMem::HostCma { pid, addr } = *src else {
            return Err(Self::unsupported(
                "get from a descriptor other than HostCma",
            ));
        };
        let len = dst.len_bytes;
        let base = addr.wrapping_add(offset_bytes) as usize;
        let mut done = 0usize;
        while done < len {
            // SAFETY: the caller makes `dst` valid for writes of `len` bytes.
            let d = unsafe {
                std::slice::from_raw_parts_mut((dst.addr as *mut u8).add(done), len - done)
            };
            let remote = [RemoteIoVec {
                base: base.wrapping_add(done),
                len: len - done,
            }];
            let n = process_vm_readv(
                nix::unistd::Pid::from_raw(pid as i32),
                &mut [IoSliceMut::new(d)],
                &remote,
            )
            .map_err(|e| os("process_vm_readv", format!("from pid {pid}: {e}")))?;
            if n == 0 {
                return Err(os(
                    "process_vm_readv",
                    format!("from pid {pid} read 0 bytes"),
                ));
            }
            done += n;
        }
        Ok(OpStart::Done)
    }

    /// Write the local `src` into `dst` (a [`RemoteMem::HostCma`] of process `pid`),
    /// `offset_bytes` into it, with `process_vm_writev(2)`, looping over partial writes.
    /// Done on return.
    ///
    /// # Safety
    /// `src` is valid for reads of `src.len_bytes` bytes and not written during the call.
    ///
    /// # Errors
    /// As [`Cma::get`], for `process_vm_writev`.
    pub unsafe fn put(
        &self,
        src: LocalBuf,
        dst: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        self.check("put", src.kind)?;
        let RemoteMem::HostCma { pid, addr } = *dst else {
            return Err(Self::unsupported(
                "put into a descriptor other than HostCma",
            ));
        };
        // SAFETY: the caller makes `src` valid for reads of its length.
        let s = unsafe { std::slice::from_raw_parts(src.addr as *const u8, src.len_bytes) };
        let base = addr.wrapping_add(offset_bytes) as usize;
        let mut done = 0usize;
        while done < s.len() {
            let remote = [RemoteIoVec {
                base: base.wrapping_add(done),
                len: s.len() - done,
            }];
            let n = process_vm_writev(
                nix::unistd::Pid::from_raw(pid as i32),
                &[IoSlice::new(&s[done..])],
                &remote,
            )
            .map_err(|e| os("process_vm_writev", format!("to pid {pid}: {e}")))?;
            if n == 0 {
                return Err(os(
                    "process_vm_writev",
                    format!("to pid {pid} wrote 0 bytes"),
                ));
            }
            done += n;
        }
        Ok(OpStart::Done)
    }
}

fn os(call: &'static str, reason: String) -> TransportError {
    TransportError::Os {
        transport: NAME,
        call,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(v: &mut [u8]) -> LocalBuf {
        LocalBuf {
            addr: v.as_mut_ptr() as u64,
            len_bytes: v.len(),
            kind: MemoryKind::Host,
        }
    }

    #[test]
    fn reads_and_writes_own_memory_at_an_offset() {
        let c = Cma::new();
        let mut src: Vec<u8> = (0..100u8).collect();
        let reg = c.register(host(&mut src)).unwrap();
        assert_eq!(
            reg.remote,
            RemoteMem::HostCma {
                pid: std::process::id(),
                addr: src.as_ptr() as u64
            }
        );
        let mut dst = vec![0u8; 40];
        // SAFETY: dst is a live, exclusive buffer.
        let r = unsafe { c.get(host(&mut dst), &reg.remote, 10) }.unwrap();
        assert_eq!(r, OpStart::Done);
        assert_eq!(dst, (10..50u8).collect::<Vec<_>>());
        let mut patch = vec![0xaau8; 5];
        // SAFETY: as above.
        unsafe { c.put(host(&mut patch), &reg.remote, 95) }.unwrap();
        assert_eq!(&src[95..], &[0xaa; 5]);
        assert!(cma_probe(std::process::id(), CMA_PROBE_WORD.as_ptr() as u64).unwrap());
    }

    #[test]
    fn forbidden_and_wrong_descriptors_are_unsupported() {
        let mut c = Cma::new();
        let mut b = vec![0u8; 8];
        // SAFETY: b is live and exclusive.
        let e = unsafe { c.get(host(&mut b), &RemoteMem::None, 0) }.unwrap_err();
        assert!(matches!(e, TransportError::Unsupported { .. }), "{e}");
        c.set_allowed(false);
        assert!(matches!(
            c.register(host(&mut b)),
            Err(TransportError::Unsupported { .. })
        ));
        let reg = RemoteMem::HostCma {
            pid: std::process::id(),
            addr: b.as_ptr() as u64,
        };
        // SAFETY: as above.
        let e = unsafe { c.get(host(&mut b), &reg, 0) }.unwrap_err();
        assert!(matches!(e, TransportError::Unsupported { .. }), "{e}");
    }
}
