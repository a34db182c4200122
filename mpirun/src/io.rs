//! I/O forwarding: ranks' stdout/stderr to rwrun's, rwrun's stdin to rank 0.
//!
//! # Output
//! One task per rank and stream reads the pipe and cuts the bytes into whole lines
//! ([`LineBuffer`]; bytes, not UTF-8). Chunks of whole lines go through a bounded
//! channel to one writer thread, which writes each chunk with `write_all`, so lines of
//! different ranks never interleave mid-line, and a slow consumer of rwrun's stdout
//! slows the ranks down (back-pressure) instead of blocking rwrun's event loop. When a
//! rank's stream ends without a newline, its last line is forwarded followed by a
//! newline (with or without `--tag-output`), so it is not glued to another rank's line
//! or to rwrun's own messages. A line longer than [`MAX_PARTIAL_LINE`] is forwarded in
//! pieces.
//!
//! When writing rwrun's stdout or stderr fails with `EPIPE` (the reader went away, as
//! in `rwrun ... | head -1`), the writer reports it once per stream on the channel
//! returned by [`start_writer`] (the supervisor then ends the job, like a program
//! killed by SIGPIPE) and drops further output for that stream, so the ranks are never
//! blocked by it. Other write errors only drop that stream's output.
//!
//! # Input
//! A plain thread copies rwrun's stdin to the write end of rank 0's stdin pipe with
//! blocking `read`/`write_all` (partial writes are continued; no size limit). EOF on
//! stdin closes the pipe, so rank 0 sees EOF. If rank 0 goes away, the write fails with
//! EPIPE (SIGPIPE is ignored in rwrun) and copying stops. The thread is never joined:
//! rwrun exits when the ranks are done even if stdin is a terminal that never closes.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

/// A line longer than this many bytes is forwarded in pieces.
pub(crate) const MAX_PARTIAL_LINE: usize = 256 * 1024;

/// Which of rwrun's output streams a chunk goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    /// rwrun's stdout.
    Stdout,
    /// rwrun's stderr.
    Stderr,
}

/// Sending side of the writer thread.
pub(crate) type OutputTx = mpsc::Sender<(Stream, Vec<u8>)>;

/// Reports of the writer thread: this output stream of rwrun hit `EPIPE` (once per
/// stream).
pub(crate) type BrokenRx = mpsc::UnboundedReceiver<Stream>;

/// Start the writer thread. It ends when every [`OutputTx`] is dropped, after writing
/// everything sent; it returns whether a write failed with `EPIPE`.
pub(crate) fn start_writer() -> io::Result<(OutputTx, JoinHandle<bool>, BrokenRx)> {
    let (tx, mut rx) = mpsc::channel::<(Stream, Vec<u8>)>(256);
    let (broken_tx, broken_rx) = mpsc::unbounded_channel();
    let handle = std::thread::Builder::new()
        .name("rwrun-output".into())
        .spawn(move || {
            let stdout = io::stdout();
            let stderr = io::stderr();
            let (mut out_ok, mut err_ok) = (true, true);
            let mut broken = false;
            while let Some((stream, chunk)) = rx.blocking_recv() {
                let idle = rx.is_empty();
                let result = match stream {
                    Stream::Stdout if out_ok => write_chunk(&mut stdout.lock(), &chunk, idle),
                    Stream::Stderr if err_ok => write_chunk(&mut stderr.lock(), &chunk, idle),
                    // This stream failed before: drop its output.
                    _ => continue,
                };
                let Err(e) = result else { continue };
                match stream {
                    Stream::Stdout => out_ok = false,
                    Stream::Stderr => err_ok = false,
                }
                if e.kind() == io::ErrorKind::BrokenPipe {
                    broken = true;
                    let _ = broken_tx.send(stream);
                } else {
                    tracing::debug!("writing rwrun's {stream:?}: {e}; dropping its output");
                }
            }
            if out_ok && let Err(e) = stdout.lock().flush() {
                broken |= e.kind() == io::ErrorKind::BrokenPipe;
            }
            broken
        })?;
    Ok((tx, handle, broken_rx))
}

// Write one chunk; flush when nothing else is queued.
fn write_chunk(w: &mut impl Write, chunk: &[u8], flush: bool) -> io::Result<()> {
    w.write_all(chunk)?;
    if flush {
        w.flush()?;
    }
    Ok(())
}

/// Wait for the writer thread, at most `bound` if given. Returns whether a write failed
/// with `EPIPE` (false when the thread did not finish in time).
pub(crate) fn join_writer(handle: JoinHandle<bool>, bound: Option<Duration>) -> bool {
    if let Some(bound) = bound {
        let deadline = std::time::Instant::now() + bound;
        while !handle.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !handle.is_finished() {
            return false;
        }
    }
    handle.join().unwrap_or(false)
}

/// Forward one rank's stream (`fd`, the read end of its pipe) until EOF, or until `stop`
/// becomes true (then whatever is already in the pipe is still forwarded).
pub(crate) async fn forward(
    rank: u32,
    stream: Stream,
    fd: OwnedFd,
    tag: bool,
    out: OutputTx,
    mut stop: watch::Receiver<bool>,
) {
    let mut reader = match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("rank {rank}: cannot forward {stream:?}: {e}");
            return;
        }
    };
    let mut lines = LineBuffer::new(tag.then(|| format!("[{rank}] ").into_bytes()));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            biased;
            r = reader.read(&mut buf) => Some(r),
            () = async { let _ = stop.wait_for(|s| *s).await; } => None,
        };
        let n = match read {
            Some(Ok(n)) => n,
            Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Some(Err(e)) => {
                tracing::debug!("rank {rank} {stream:?}: {e}");
                0
            }
            None => {
                // Forward what is already buffered in the pipe, without waiting for more.
                tracing::debug!("rank {rank} {stream:?}: stopped waiting for EOF");
                loop {
                    match reader.try_read(&mut buf) {
                        Ok(n) if n > 0 => {
                            if let Some(chunk) = lines.push(&buf[..n])
                                && out.send((stream, chunk)).await.is_err()
                            {
                                return;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        _ => break,
                    }
                }
                0
            }
        };
        if n == 0 {
            break;
        }
        if let Some(chunk) = lines.push(&buf[..n])
            && out.send((stream, chunk)).await.is_err()
        {
            return;
        }
    }
    if let Some(chunk) = lines.finish() {
        let _ = out.send((stream, chunk)).await;
    }
}

/// Start copying rwrun's stdin into `rank0_stdin` (the write end of rank 0's stdin pipe)
/// on a detached thread.
pub(crate) fn start_stdin_copy(rank0_stdin: OwnedFd) -> io::Result<()> {
    std::thread::Builder::new()
        .name("rwrun-stdin".into())
        .spawn(move || {
            let mut to_rank = std::fs::File::from(rank0_stdin);
            match copy_stdin(&mut to_rank) {
                Ok(n) => tracing::debug!("stdin: forwarded {n} bytes to rank 0; EOF"),
                Err(e) => tracing::debug!("stdin: stopped forwarding to rank 0: {e}"),
            }
            // Dropping `to_rank` closes the pipe: rank 0 reads EOF.
        })?;
    Ok(())
}

fn copy_stdin(to_rank: &mut std::fs::File) -> io::Result<u64> {
    let stdin = io::stdin();
    let mut stdin = stdin.lock();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Inherited non-blocking stdin: wait for data instead of spinning.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_readable(io::stdin().as_raw_fd());
                continue;
            }
            // EIO: background process reading its terminal (SIGTTIN is ignored).
            Err(e) => return Err(e),
        };
        // write_all continues after partial writes and retries EINTR; EPIPE ends it.
        to_rank.write_all(&buf[..n])?;
        total += n as u64;
    }
}

fn wait_readable(fd: i32) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, -1) };
}

/// Cuts a byte stream into chunks of whole lines, optionally prefixing each line.
#[derive(Debug)]
pub(crate) struct LineBuffer {
    prefix: Option<Vec<u8>>,
    pending: Vec<u8>,
    at_line_start: bool,
}

impl LineBuffer {
    /// A buffer that prefixes each line with `prefix` (if any).
    pub(crate) fn new(prefix: Option<Vec<u8>>) -> Self {
        LineBuffer {
            prefix,
            pending: Vec::new(),
            at_line_start: true,
        }
    }

    /// Add bytes; returns the whole lines now complete (or a long partial line), ready
    /// to write.
    pub(crate) fn push(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        self.pending.extend_from_slice(data);
        let cut = match self.pending.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None if self.pending.len() >= MAX_PARTIAL_LINE => self.pending.len(),
            None => return None,
        };
        let rest = self.pending.split_off(cut);
        let ready = std::mem::replace(&mut self.pending, rest);
        Some(self.format(ready))
    }

    /// At EOF: the last partial line followed by a newline, if the stream did not end
    /// with one (also after a long line forwarded in pieces).
    pub(crate) fn finish(&mut self) -> Option<Vec<u8>> {
        let ready = std::mem::take(&mut self.pending);
        let mut out = if ready.is_empty() {
            Vec::new()
        } else {
            self.format(ready)
        };
        if !self.at_line_start {
            out.push(b'\n');
            self.at_line_start = true;
        }
        (!out.is_empty()).then_some(out)
    }

    fn format(&mut self, chunk: Vec<u8>) -> Vec<u8> {
        let Some(prefix) = &self.prefix else {
            if let Some(&last) = chunk.last() {
                self.at_line_start = last == b'\n';
            }
            return chunk;
        };
        let lines = chunk.iter().filter(|&&b| b == b'\n').count() + 1;
        let mut out = Vec::with_capacity(chunk.len() + lines * prefix.len());
        for line in chunk.split_inclusive(|&b| b == b'\n') {
            if self.at_line_start {
                out.extend_from_slice(prefix);
            }
            out.extend_from_slice(line);
            self.at_line_start = line.ends_with(b"\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_passes_bytes_through_in_whole_lines() {
        let mut lb = LineBuffer::new(None);
        assert_eq!(lb.push(b"ab"), None);
        assert_eq!(
            lb.push(b"c\nd\0\xffe\nf"),
            Some(b"abc\nd\0\xffe\n".to_vec())
        );
        assert_eq!(lb.push(b"g"), None);
        assert_eq!(lb.finish(), Some(b"fg\n".to_vec()));
        assert_eq!(lb.finish(), None);
        // A stream ending with a newline gets none added.
        let mut lb = LineBuffer::new(None);
        assert_eq!(lb.push(b"x\n"), Some(b"x\n".to_vec()));
        assert_eq!(lb.finish(), None);
    }

    #[test]
    fn tagged_prefixes_every_line() {
        let mut lb = LineBuffer::new(Some(b"[3] ".to_vec()));
        assert_eq!(
            lb.push(b"a\nb\n\nc"),
            Some(b"[3] a\n[3] b\n[3] \n".to_vec())
        );
        assert_eq!(lb.push(b"d\n"), Some(b"[3] cd\n".to_vec()));
        assert_eq!(lb.push(b"tail"), None);
        assert_eq!(lb.finish(), Some(b"[3] tail\n".to_vec()));
    }

    #[test]
    fn long_lines_go_out_in_pieces_with_one_prefix() {
        let mut lb = LineBuffer::new(Some(b"[0] ".to_vec()));
        let big = vec![b'x'; MAX_PARTIAL_LINE];
        let first = lb.push(&big).unwrap();
        assert!(first.starts_with(b"[0] xxx") && first.len() == MAX_PARTIAL_LINE + 4);
        assert_eq!(lb.push(b"yy\nz\n"), Some(b"yy\n[0] z\n".to_vec()));
        // EOF right after a piece: the line is ended.
        let mut lb = LineBuffer::new(None);
        assert_eq!(lb.push(&big).map(|v| v.len()), Some(MAX_PARTIAL_LINE));
        assert_eq!(lb.finish(), Some(b"\n".to_vec()));
    }
}
