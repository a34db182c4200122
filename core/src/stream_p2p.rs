//! Stream-ordered point-to-point: [`Communicator::send_device_on_stream`] and
//! [`Communicator::recv_device_on_stream`] enqueue a send or a receive of device memory
//! on the caller's CUDA stream and return without waiting, like NCCL's `ncclSend` /
//! `ncclRecv` or MPICH's `MPIX_Send_enqueue` / `MPIX_Recv_enqueue`.
//!
//! How (one proxy thread per runtime, started by the first such call; the pattern of
//! NCCL's proxy and of MPICH's enqueue, with stream memory operations instead of host
//! functions, which may not call CUDA):
//! 1. The call records an event on the stream (the point where the buffer is ready to
//!    read, or free to overwrite), then enqueues `cuStreamWaitValue32(flag ≥ v)` on a
//!    word of pinned, device-mapped host memory ([`MappedFlags`]): work enqueued after
//!    it waits until the operation has completed.
//! 2. The proxy thread waits for the event, posts the operation through the ordinary
//!    nonblocking path (`isend_raw` / `irecv_raw`: every transport, CUDA IPC, staging,
//!    GPUDirect RDMA), drives progress until it completes, and writes `v` into the
//!    flag; the stream proceeds.
//!
//! Operations of one stream therefore run one after the other, in stream order, as
//! blocking calls would: a send and a receive between two ranks must be enqueued in
//! matching order (rank 0 sends then receives, rank 1 receives then sends), or be put
//! on different streams, or a rendezvous send waits forever for its receive (as with
//! NCCL point-to-point outside a group). A failed operation still writes its flag, so
//! that the stream does not hang; its error is logged at once and returned by
//! [`Communicator::wait_stream_ops`] and by the next stream-ordered call. The flag
//! values differ per use, so these calls cannot be captured in a CUDA graph (the call
//! fails if the stream is capturing).
//!
//! From the first operation on, this process's frees and CUDA IPC unmaps (`cuMemFree`,
//! `cuMemFreeHost`, `cuIpcCloseMemHandle`) run on a release thread, and only while no
//! operation's flag is pending ([`rankwire_gpu::host_wait_begin`], whose guard each job
//! holds until its flag is written): those driver calls wait until every stream of the
//! device has passed its queued work, and while one waits the driver holds the other
//! threads' copies and events too, the proxy's included, so one made while a flag is
//! pending would wait for a flag that the proxy can then never write.
//!
//! Known limit (MPS): a stream waiting on its flag holds the hardware work queue it is
//! mapped to, and under MPS a process gets two queues by default
//! (`CUDA_DEVICE_MAX_CONNECTIONS`). With operations waiting on two streams at once,
//! the rest of the process's GPU work queues behind them, the transfers' own copies on
//! the runtime stream included, and nothing completes (both ranks of a ring with sends
//! on one stream and receives on another hung this way at 8 MiB:
//! `benches/results/gpu-2026-12-07/`, where a copy on a third stream stalled behind two
//! waiting streams under MPS, and ran with one waiting stream, without MPS, or with
//! `CUDA_DEVICE_MAX_CONNECTIONS=32`). CUDA warns of this for `cuStreamWaitValue32`:
//! work ordered only through the flag may be scheduled behind the wait. Under MPS, use
//! one stream for these calls, or start the processes with more queues: on an H100 the
//! 4-rank two-stream ring passed with `CUDA_DEVICE_MAX_CONNECTIONS` 4, 8 or 16, while 32
//! made 4 MPS clients fail to create their contexts (`CUDA_ERROR_OUT_OF_MEMORY`).
//!
//! Flags: [`SLOTS`] words; operation `i` uses word `i % SLOTS` with value
//! `i / SLOTS + 1`, and a word is reused only after its previous operation completed,
//! so a wait is never passed by another operation's completion. At most
//! [`MAX_IN_FLIGHT`] operations are outstanding: one more waits on the host (so that
//! the enqueueing thread never blocks inside the driver on a full stream queue).

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rankwire_gpu::{Event, MappedFlags, Stream};

use crate::comm::{Communicator, Source, Tag};
use crate::error::{Error, Result};
use crate::request::Request;

/// Flag words of a runtime's proxy (operation `i` uses word `i % SLOTS`).
pub(crate) const SLOTS: usize = 1024;

/// At most this many stream-ordered operations of a runtime are outstanding; the
/// call that would enqueue one more waits on the host until one completes.
/// Each operation puts two commands on its stream (an event record and a wait on a
/// flag); with thousands enqueued back to back the stream's command queue could fill,
/// and the enqueueing driver call would then block inside the driver until the GPU
/// passes earlier waits. Kept well below the queue's depth, the enqueueing thread never
/// blocks in the driver. (The hang of the 2000-round-trip ping-pong of
/// `rw-gpuapp streamp2p` that first suggested this had another cause: a CUDA IPC
/// mapping closed by the proxy while its stream waited, see
/// `rankwire_gpu::host_wait_begin` and benches/results/gpu-2026-12-06c-h100/.) A flag
/// word is reused only once its previous operation, [`SLOTS`] indices earlier,
/// completed.
pub(crate) const MAX_IN_FLIGHT: u64 = 128;

/// How long finalize waits for operations still in flight before it releases their
/// streams with an error (see `StreamProxy::give_up_at_finalize`).
const STOP_WAIT: Duration = Duration::from_secs(60);

/// Idle passes of the proxy thread that only yield before it sleeps between passes.
const IDLE_SPINS: u32 = 2000;

/// With operations pending and none started or completed for this long, the proxy
/// logs (warn) what it waits for, once per stall: a stream that never reaches an
/// operation, or a peer that never matches one, then has a name in the job's log.
const STALL_REPORT: Duration = Duration::from_secs(10);

/// The operation of a job.
enum Op {
    Send { dest: usize, tag: i32 },
    Recv { source: Source, tag: Tag },
}

/// One stream-ordered operation.
struct Job {
    comm: Communicator,
    op: Op,
    ptr: u64,
    len_bytes: usize,
    /// Recorded on the user's stream where the operation may start.
    start: Event,
    /// That stream's identity ([`Stream::id`], which the driver does not reuse): its
    /// jobs start in order.
    stream: u64,
    /// The operation's index (flag word `index % SLOTS`, value `index / SLOTS + 1`).
    index: u64,
    /// Keeps device-wide releases back until the job is dropped, after its flag was
    /// written (see the module doc).
    _host_wait: rankwire_gpu::HostWait,
}

impl Job {
    fn slot(&self) -> usize {
        (self.index % SLOTS as u64) as usize
    }

    fn value(&self) -> u32 {
        (self.index / SLOTS as u64 + 1) as u32
    }

    fn what(&self) -> String {
        match &self.op {
            Op::Send { dest, tag } => format!(
                "stream-ordered send of {} bytes to rank {dest} tag {tag}",
                self.len_bytes
            ),
            Op::Recv { source, tag } => format!(
                "stream-ordered receive of {} bytes from {source:?} tag {tag:?}",
                self.len_bytes
            ),
        }
    }
}

#[derive(Default)]
struct State {
    /// Enqueued, not yet taken by the proxy thread.
    queue: VecDeque<Job>,
    /// Indices of the operations not completed yet.
    outstanding: BTreeSet<u64>,
    /// Next operation index.
    next: u64,
    /// The first error since [`StreamProxy::take_error`] last ran.
    error: Option<Error>,
    /// Finalize asked the thread to finish.
    stop: bool,
    /// Finalize began: no more operations are taken.
    closed: bool,
    /// The thread is running.
    running: bool,
}

/// The proxy of one runtime (see the module doc).
pub(crate) struct StreamProxy {
    state: Mutex<State>,
    /// Signals new jobs and stop (to the thread) and completions (to waiters).
    cv: Condvar,
    /// Never freed: a stream may still wait on a word after the runtime is gone.
    flags: std::mem::ManuallyDrop<MappedFlags>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl StreamProxy {
    /// A proxy with its flag words (no thread yet).
    ///
    /// # Errors
    /// [`Error::Gpu`] when the mapped host memory cannot be had (no GPU support,
    /// no driver).
    pub(crate) fn new() -> Result<StreamProxy> {
        let flags = MappedFlags::new(SLOTS).map_err(|e| {
            Error::Gpu(format!(
                "stream-ordered point-to-point: cannot allocate its flags in mapped host \
                 memory: {e}"
            ))
        })?;
        Ok(StreamProxy {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            flags: std::mem::ManuallyDrop::new(flags),
            thread: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first error of an operation since the last call, if any.
    fn take_error(&self) -> Option<Error> {
        self.lock().error.take()
    }

    /// Enqueue an operation on `stream` (see the module doc).
    ///
    /// # Safety
    /// `ptr` must be device memory valid for `len_bytes` bytes (reads for a send,
    /// writes for a receive) until the operation has completed on the stream.
    unsafe fn enqueue(
        self: &Arc<Self>,
        comm: &Communicator,
        op: Op,
        ptr: u64,
        len_bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        let gpu = |what: &str, e: rankwire_gpu::GpuError| {
            Error::Gpu(format!("stream-ordered point-to-point: {what}: {e}"))
        };
        if stream
            .is_capturing()
            .map_err(|e| gpu("cuStreamIsCapturing", e))?
        {
            return Err(Error::usage(
                "stream-ordered point-to-point cannot be captured in a CUDA graph (its \
                 completion flags change per call); fix: enqueue it outside the capture, \
                 or use the stream-ordered collectives, which can be captured",
            ));
        }
        let start = Event::new(stream.device()).map_err(|e| gpu("cuEventCreate", e))?;
        // Take an index (waiting, on the host, until its word's previous operation is
        // done), then enqueue on the stream without the lock: a driver call may block
        // while the stream's queue is full, until the GPU gets past earlier waits,
        // which needs the proxy to complete operations (and take this lock).
        let index = {
            let mut st = self.lock();
            if st.closed {
                return Err(Error::usage(
                    "a stream-ordered operation after finalize began; fix: enqueue every \
                     operation before finalize",
                ));
            }
            // At most MAX_IN_FLIGHT outstanding, and the next index's flag word free (its
            // previous operation, SLOTS earlier, completed). The index is read after the
            // wait (which lets go of the lock): two waiting threads get different ones.
            while st.outstanding.len() as u64 >= MAX_IN_FLIGHT
                || st
                    .next
                    .checked_sub(SLOTS as u64)
                    .is_some_and(|before| st.outstanding.contains(&before))
            {
                if st.closed {
                    return Err(Error::usage(
                        "a stream-ordered operation after finalize began; fix: enqueue every \
                         operation before finalize",
                    ));
                }
                st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            let index = st.next;
            st.next += 1;
            st.outstanding.insert(index);
            index
        };
        // From here on, frees and IPC unmaps of this process run on the release thread,
        // and none starts until this job is dropped: it would wait for this stream's
        // wait (rankwire_gpu::host_wait_begin).
        let host_wait = rankwire_gpu::host_wait_begin();
        let job = Job {
            comm: comm.clone(),
            op,
            ptr,
            len_bytes,
            start,
            // Streams whose id the driver cannot give share one key: their jobs start
            // in one order (more waiting, never a job started early).
            stream: stream.id().unwrap_or(u64::MAX),
            index,
            _host_wait: host_wait,
        };
        let enqueued = job
            .start
            .record(stream)
            .map_err(|e| gpu("cuEventRecord", e));
        // SAFETY: the word lives for the process (never freed); the proxy writes the
        // value when the operation completes or fails, or at finalize.
        let enqueued = enqueued.and_then(|()| {
            unsafe { stream.wait_value_geq(self.flags.device_addr(job.slot()), job.value()) }
                .map_err(|e| gpu("cuStreamWaitValue32", e))
        });
        if let Err(e) = enqueued {
            // Nothing waits on the word: give the index back as done.
            self.flags.set(job.slot(), job.value());
            self.lock().outstanding.remove(&index);
            self.cv.notify_all();
            return Err(e);
        }
        let mut st = self.lock();
        st.queue.push_back(job);
        let start_thread = !st.running;
        st.running = true;
        drop(st);
        self.cv.notify_all();
        if start_thread {
            let me = self.clone();
            let device = stream.device();
            match std::thread::Builder::new()
                .name("rankwire-stream-proxy".into())
                .spawn(move || me.run(device))
            {
                Ok(h) => *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(h),
                Err(e) => {
                    // Nobody would release the queued operations' streams: do it now.
                    let e = format!("cannot start the stream proxy thread: {e}");
                    // Taken first: `abandon` locks the state for each job.
                    let queued = std::mem::take(&mut self.lock().queue);
                    self.abandon(queued, Vec::new(), &e);
                    self.lock().running = false;
                    return Err(Error::Gpu(e));
                }
            }
        }
        Ok(())
    }

    /// Release the streams of `waiting` and `flying` with the error `why` (their
    /// requests are forgotten: see the callers).
    fn abandon(
        &self,
        waiting: impl IntoIterator<Item = Job>,
        flying: Vec<(Job, Request<'static>)>,
        why: &str,
    ) {
        for j in waiting {
            self.complete(&j, Err(Error::Gpu(why.to_string())));
        }
        for (j, mut r) in flying {
            // A receive that has not matched is withdrawn (nothing writes its buffer
            // later); anything else is forgotten, as the callers say.
            if !r.cancel() {
                std::mem::forget(r);
            }
            self.complete(&j, Err(Error::Gpu(why.to_string())));
        }
    }

    /// Wait until every operation enqueued before this call has completed; the first
    /// error since the last call.
    fn wait_all(&self) -> Result<()> {
        let mut st = self.lock();
        let target = st.next;
        while st.outstanding.first().is_some_and(|&i| i < target) {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The operation completed (or failed, or was given up): release its stream.
    fn complete(&self, job: &Job, result: Result<()>) {
        self.flags.set(job.slot(), job.value());
        let mut st = self.lock();
        st.outstanding.remove(&job.index);
        if let Err(e) = result {
            let e = Error::Gpu(format!("{}: {e}", job.what()));
            tracing::error!("rankwire: {e}");
            st.error.get_or_insert(e);
        }
        drop(st);
        self.cv.notify_all();
    }

    /// The proxy thread: start jobs whose stream reached them, drive them to
    /// completion, release their streams. A panic inside releases every stream it
    /// holds with an error (a stream must never wait forever).
    fn run(self: Arc<Self>, device: i32) {
        let _ = rankwire_gpu::set_current_device(device);
        let mut waiting: VecDeque<Job> = VecDeque::new();
        let mut flying: Vec<(Job, Request<'static>)> = Vec::new();
        let body = std::panic::AssertUnwindSafe(|| self.run_loop(&mut waiting, &mut flying));
        if std::panic::catch_unwind(body).is_err() {
            let queued = std::mem::take(&mut self.lock().queue);
            let why = "the stream proxy thread panicked; its stream was released";
            self.abandon(
                waiting.drain(..).chain(queued),
                std::mem::take(&mut flying),
                why,
            );
            self.lock().running = false;
        }
    }

    fn run_loop(&self, waiting: &mut VecDeque<Job>, flying: &mut Vec<(Job, Request<'static>)>) {
        let mut stop_at: Option<Instant> = None;
        let mut idle_rounds = 0u32;
        let mut last_moved = Instant::now();
        let mut reported = false;
        loop {
            {
                let mut st = self.lock();
                waiting.extend(st.queue.drain(..));
                if st.stop && stop_at.is_none() {
                    stop_at = Some(Instant::now() + STOP_WAIT);
                }
                if waiting.is_empty() && flying.is_empty() {
                    if st.stop {
                        st.running = false;
                        return;
                    }
                    drop(self.cv.wait(st).unwrap_or_else(|p| p.into_inner()));
                    // Idle time is no stall: count from the new work.
                    last_moved = Instant::now();
                    reported = false;
                    continue;
                }
                // Nothing moved for a while (a long kernel before the next operation,
                // a peer that is late): poll less often, up to every millisecond.
                if idle_rounds > IDLE_SPINS {
                    let k = (idle_rounds - IDLE_SPINS).min(7);
                    let d = Duration::from_micros(10 << k).min(Duration::from_millis(1));
                    drop(
                        self.cv
                            .wait_timeout(st, d)
                            .unwrap_or_else(|p| p.into_inner()),
                    );
                }
            }
            if let Some(t) = stop_at
                && Instant::now() > t
            {
                self.give_up_at_finalize(waiting, flying, t);
            }
            let mut moved = false;
            // Start the jobs whose point on the stream was reached, in enqueue order;
            // behind a job not reached yet, its stream's later jobs are not either.
            let mut i = 0;
            let mut blocked: Vec<u64> = Vec::new();
            while i < waiting.len() {
                if blocked.contains(&waiting[i].stream) {
                    i += 1;
                    continue;
                }
                match waiting[i].start.query() {
                    Ok(false) => {
                        blocked.push(waiting[i].stream);
                        i += 1;
                    }
                    Ok(true) => {
                        moved = true;
                        let Some(j) = waiting.remove(i) else { break };
                        match post(&j) {
                            Ok(r) => flying.push((j, r)),
                            Err(e) => self.complete(&j, Err(e)),
                        }
                    }
                    Err(e) => {
                        moved = true;
                        let Some(j) = waiting.remove(i) else { break };
                        self.complete(
                            &j,
                            Err(Error::Gpu(format!(
                                "the stream failed before the operation (cuEventQuery): {e}"
                            ))),
                        );
                    }
                }
            }
            // Drive the posted ones (each test is a progress round).
            let mut k = 0;
            while k < flying.len() {
                let (j, r) = flying.swap_remove(k);
                match r.test() {
                    Ok(result) => {
                        moved = true;
                        self.complete(&j, result.map(|_| ()));
                    }
                    Err(r) => {
                        flying.push((j, r));
                        let last = flying.len() - 1;
                        flying.swap(k, last);
                        k += 1;
                    }
                }
            }
            if moved {
                idle_rounds = 0;
                last_moved = Instant::now();
                reported = false;
            } else {
                if !reported && last_moved.elapsed() > STALL_REPORT {
                    reported = true;
                    tracing::warn!(
                        "rankwire: {}",
                        self.stall_report(waiting, flying, last_moved)
                    );
                }
                idle_rounds = idle_rounds.saturating_add(1);
                if idle_rounds <= IDLE_SPINS {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// What a stalled proxy waits for (see [`STALL_REPORT`]).
    fn stall_report(
        &self,
        waiting: &VecDeque<Job>,
        flying: &[(Job, Request<'static>)],
        since: Instant,
    ) -> String {
        let outstanding = self.lock().outstanding.len();
        let mut s = format!(
            "stream-ordered point-to-point: nothing started or completed for {:.0} s; \
             {outstanding} operations outstanding, {} not yet reached by their stream, {} \
             posted and not complete",
            since.elapsed().as_secs_f64(),
            waiting.len(),
            flying.len()
        );
        if let Some(j) = waiting.front() {
            s.push_str(&format!(
                "; the oldest unreached is #{} ({}; its start event reached: {:?}; flag word \
                 {} = {}, waits for {})",
                j.index,
                j.what(),
                j.start.query().ok(),
                j.slot(),
                self.flags.get(j.slot()),
                j.value()
            ));
        }
        if let Some((j, _)) = flying.iter().min_by_key(|(j, _)| j.index) {
            s.push_str(&format!(
                "; the oldest posted is #{} ({}): its peer has not matched it or its \
                 transfer has not completed",
                j.index,
                j.what()
            ));
        }
        s
    }

    /// Finalize waited [`STOP_WAIT`] since `since`: release what cannot finish.
    /// Operations the stream never reached are released unposted. Receives that have
    /// not matched are cancelled (nothing writes their buffers later). Matched
    /// receives are left to finish (their data is on its way, or the peer's failure
    /// fails them). Sends still pending after another [`STOP_WAIT`] are given up: their
    /// requests are forgotten (nothing writes user memory for a send; a receiver that
    /// matches later reads the buffer, which the program may have freed by then).
    fn give_up_at_finalize(
        &self,
        waiting: &mut VecDeque<Job>,
        flying: &mut Vec<(Job, Request<'static>)>,
        since: Instant,
    ) {
        let why = |what: &str| {
            format!(
                "{what} when the runtime finalized ({} s later); its stream was released",
                STOP_WAIT.as_secs()
            )
        };
        self.abandon(
            waiting.drain(..),
            Vec::new(),
            &why("not reached by its stream"),
        );
        let mut k = 0;
        while k < flying.len() {
            if flying[k].1.cancel() {
                let (j, r) = flying.swap_remove(k);
                drop(r);
                self.complete(&j, Err(Error::Gpu(why("a receive never matched"))));
            } else {
                k += 1;
            }
        }
        if Instant::now() > since + STOP_WAIT {
            let (sends, rest): (Vec<_>, Vec<_>) = std::mem::take(flying)
                .into_iter()
                .partition(|(j, _)| matches!(j.op, Op::Send { .. }));
            *flying = rest;
            self.abandon(Vec::new(), sends, &why("a send never matched"));
        }
    }

    /// Finalize: let the thread finish what is in flight (at most [`STOP_WAIT`]), then
    /// end it.
    fn stop_thread(&self) {
        {
            let mut st = self.lock();
            st.stop = true;
            st.closed = true;
        }
        self.cv.notify_all();
        let h = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

impl crate::runtime::Stoppable for StreamProxy {
    fn stop(&self) {
        self.stop_thread()
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The runtime's proxy, if one was made.
fn proxy_of(c: &Communicator) -> Option<Arc<StreamProxy>> {
    let p = c.inner.stream_proxy.get()?.clone();
    p.as_any().downcast::<StreamProxy>().ok()
}

/// Post `j` through the nonblocking path.
fn post(j: &Job) -> Result<Request<'static>> {
    // SAFETY: the caller of the stream-ordered call guaranteed the device buffer until
    // the operation completes on the stream, which waits for this request.
    unsafe {
        match &j.op {
            Op::Send { dest, tag } => {
                j.comm
                    .isend_raw(j.ptr as *const u8, j.len_bytes, *dest, *tag)
            }
            Op::Recv { source, tag } => {
                j.comm
                    .irecv_raw(j.ptr as *mut u8, j.len_bytes, *source, *tag)
            }
        }
    }
}

impl Communicator {
    /// The runtime's stream proxy, made on first use.
    fn stream_proxy(&self) -> Result<Arc<StreamProxy>> {
        self.check_live()?;
        if let Some(p) = proxy_of(self) {
            return Ok(p);
        }
        let p = Arc::new(StreamProxy::new()?);
        let _ = self.inner.stream_proxy.set(p);
        proxy_of(self).ok_or_else(|| Error::Gpu("stream proxy of another type".into()))
    }

    /// Send `len_bytes` bytes of device memory at `ptr` to rank `dest` with `tag`,
    /// enqueued on `stream` (stream-ordered, like NCCL's `ncclSend`; see
    /// `core/src/stream_p2p.rs`): the send reads the buffer after the work enqueued on
    /// `stream` before the call, and work enqueued after the call waits until the send
    /// has completed. Returns without waiting. Any receive matches it (blocking,
    /// nonblocking or stream-ordered).
    ///
    /// Operations of one stream run in stream order, one after the other: a pair of
    /// ranks that send to each other must enqueue the send on one rank and the receive
    /// on the other first (or use two streams, but not under MPS with its default
    /// `CUDA_DEVICE_MAX_CONNECTIONS`: see the known limit in `core/src/stream_p2p.rs`),
    /// as with blocking sends. At most 128
    /// stream-ordered operations of a process are in flight: the next call waits on the
    /// host until one has completed (so a rank must not enqueue more than 128 receives
    /// whose senders wait for this rank's host).
    ///
    /// # Safety
    /// `ptr` must be device memory of `stream`'s device, valid for reads of
    /// `len_bytes` bytes until the send has completed on the stream (for example until
    /// a later synchronization of `stream`); `stream` must belong to the device's
    /// primary context (see [`rankwire_gpu::Stream::from_raw`]).
    ///
    /// # Errors
    /// [`Error::Usage`] for a rank or tag out of range or a stream being captured into
    /// a CUDA graph, or after finalize began; [`Error::Gpu`] without GPU support or
    /// when the stream operations fail, and for the error of an earlier stream-ordered
    /// operation (reported once; this operation is then not enqueued). An error of
    /// this operation itself comes later, from
    /// [`Communicator::wait_stream_ops`] or the next stream-ordered call; its stream is
    /// released anyway (the data is then not what was sent).
    pub unsafe fn send_device_on_stream(
        &self,
        ptr: u64,
        len_bytes: usize,
        dest: usize,
        tag: i32,
        stream: &Stream,
    ) -> Result<()> {
        self.check_dest_tag(dest, tag)?;
        let p = self.stream_proxy()?;
        // SAFETY: the caller's contract.
        unsafe { p.enqueue(self, Op::Send { dest, tag }, ptr, len_bytes, stream) }
    }

    /// Receive into `len_bytes` bytes of device memory at `ptr` from `source` with
    /// `tag`, enqueued on `stream` (stream-ordered, like NCCL's `ncclRecv`; see
    /// [`Communicator::send_device_on_stream`]): the receive writes the buffer after
    /// the work enqueued on `stream` before the call, and work enqueued after the call
    /// sees the received data. Returns without waiting. The status is not reported; a
    /// message longer than `len_bytes` is a truncation error.
    ///
    /// # Safety
    /// `ptr` must be device memory of `stream`'s device, valid for writes of
    /// `len_bytes` bytes and not accessed otherwise until the receive has completed on
    /// the stream; `stream` as for [`Communicator::send_device_on_stream`].
    ///
    /// # Errors
    /// As [`Communicator::send_device_on_stream`].
    pub unsafe fn recv_device_on_stream(
        &self,
        ptr: u64,
        len_bytes: usize,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
        stream: &Stream,
    ) -> Result<()> {
        let (source, tag) = (source.into(), tag.into());
        self.check_source_tag(source, tag)?;
        let p = self.stream_proxy()?;
        // SAFETY: the caller's contract.
        unsafe { p.enqueue(self, Op::Recv { source, tag }, ptr, len_bytes, stream) }
    }

    /// Wait (on the host) until every stream-ordered send and receive enqueued in this
    /// process before the call has completed, and return the first error of one since
    /// the last report. Does not wait for other work on the streams.
    ///
    /// # Errors
    /// The error of a failed stream-ordered operation ([`Error::Gpu`] naming it and
    /// its cause).
    pub fn wait_stream_ops(&self) -> Result<()> {
        match proxy_of(self) {
            Some(p) => p.wait_all(),
            None => Ok(()),
        }
    }
}
