//! [`RequestSet`]: a set of nonblocking operations completed together, kept as the
//! runtime's ids instead of one [`Request`] per operation (see the type's doc).

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;

use crate::comm::{Communicator, Source, Tag};
use crate::comm_state::CommState;
use crate::engine::SendStart;
use crate::error::{Error, Result};
use crate::protocol::{ReqId, Status, Taken};
use crate::request::Request;
use crate::runtime::Inner;

/// What an entry of a [`RequestSet`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A pending receive: `id` is the runtime's request id.
    Recv,
    /// A pending send: `id` is the runtime's request id.
    Send,
    /// Completed as it started (an eager send a transport took at once): `id` is the
    /// index of its status in `RequestSet::ready`.
    Ready,
    /// Completed before it joined the set ([`RequestSet::push`] of a finished request):
    /// its wait fails as a finished [`Request`]'s does.
    Finished,
}

/// One operation of a [`RequestSet`]: 16 bytes.
#[derive(Clone, Copy)]
struct Entry {
    id: u64,
    /// 0: statuses in world ranks (the communicator's ranks are the world's); k > 0:
    /// translated to the ranks of `RequestSet::comms[k - 1]`.
    comm: u32,
    kind: Kind,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 16);

impl Kind {
    /// Whether the runtime still holds the operation (a receive or a send).
    #[inline]
    fn is_pending(self) -> bool {
        matches!(self, Kind::Recv | Kind::Send)
    }
}

impl Entry {
    /// The outcome of an operation that completed before the wait (`Ready`, its status
    /// in `ready`, or `Finished`); not for pending ones.
    fn settled_outcome(&self, ready: &[Status]) -> Result<Status> {
        match self.kind {
            Kind::Ready => Ok(ready[self.id as usize]),
            _ => Err(crate::request::finished_request()),
        }
    }
}

/// A set of nonblocking point-to-point operations of one runtime, completed together
/// by [`RequestSet::wait_all`]: the array of requests of a C program's
/// `MPI_Isend`/`MPI_Irecv` loop and its `MPI_Waitall` (MPI 4.1 §3.7.5). Borrows every
/// buffer it was given for `'a`, as a [`Request`] does.
///
/// The set is meant for windows of many small operations (a halo exchange's faces,
/// `osu_mbw_mr`). It costs less per operation than a `Vec<Request>` with
/// [`crate::wait_all`]: a [`Request`] is a 64-byte value holding a reference-counted
/// handle to its runtime, so `reqs.push(comm.irecv(..)?)` costs an atomic increment
/// and a later decrement of that count and two copies of the `Result<Request>` through
/// the caller's stack, whose wide loads of just-written narrow stores stall
/// store-to-load forwarding (perf on the windowed bandwidth test: about a third of the
/// benchmark loop's own time). A set holds one handle for all its operations and
/// appends a 16-byte entry per operation in place; [`RequestSet::wait_all`] takes each
/// success from the runtime's request slot straight into the status vector. Measured
/// on a 2-core VM, 1–64 B windows of 64: 1.12–1.40× the messages per second of the same
/// loop with `Vec<Request>` (medians of 6-, 8- and 12-round alternations,
/// benches/results/2026-12-07s56_host).
///
/// ```no_run
/// # fn main() -> rankwire::Result<()> {
/// let universe = rankwire::init()?;
/// let world = universe.world();
/// let mut bufs = vec![[0u8; 8]; 64];
/// let mut reqs = rankwire::RequestSet::with_capacity(64);
/// for b in bufs.iter_mut() {
///     reqs.irecv(&world, b, 0, 2)?;
/// }
/// let statuses = reqs.wait_all()?; // one status per receive, in posting order
/// assert_eq!(statuses.len(), 64);
/// # Ok(())
/// # }
/// ```
///
/// [`RequestSet::wait_all`] returns the statuses or the first error;
/// [`RequestSet::wait_all_results`] each operation's result. To test for completion
/// while computing, or to wait for any one operation, use [`Request`]s
/// ([`crate::test_all`], [`crate::wait_any`]).
///
/// Dropping a set with operations not waited for withdraws each receive that has not
/// matched and waits for the rest, as dropping their [`Request`]s would: a send whose
/// receiver withdrew (dropped) its receive then waits until the receiver posts another
/// (`RANKWIRE_WATCHDOG` ends such a wait with the pending requests named). Do not
/// `mem::forget` a set with pending operations (the runtime would keep using the
/// buffers after the borrow ends).
#[must_use = "the operations of a request set must be waited for (RequestSet::wait_all)"]
pub struct RequestSet<'a> {
    /// The runtime of every pending operation (set by the first one).
    inner: Option<Arc<Inner>>,
    entries: Vec<Entry>,
    /// Statuses of the operations that completed as they started (`Kind::Ready`).
    ready: Vec<Status>,
    /// Communicators whose ranks are not the world's (`Entry::comm`), each once.
    comms: Vec<Arc<CommState>>,
    _buf: PhantomData<&'a mut [u8]>,
}

impl Default for RequestSet<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RequestSet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSet")
            .field("operations", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl<'a> RequestSet<'a> {
    /// An empty set.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty set with room for `n` operations before it allocates.
    pub fn with_capacity(n: usize) -> Self {
        RequestSet {
            inner: None,
            entries: Vec::with_capacity(n),
            ready: Vec::new(),
            comms: Vec::new(),
            _buf: PhantomData,
        }
    }

    /// Number of operations in the set (not yet waited for).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the set holds no operation.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Start a nonblocking send of `buf` to rank `dest` of `comm` with `tag`
    /// (MPI_Isend) and add it to the set.
    ///
    /// # Errors
    /// As [`Communicator::isend`] ([`Error::Usage`] for an invalid rank or tag);
    /// [`Error::Usage`] when `comm` belongs to another runtime than the set's other
    /// operations. Nothing is added then.
    #[inline]
    pub fn isend<T: Pod>(
        &mut self,
        comm: &Communicator,
        buf: &'a [T],
        dest: usize,
        tag: i32,
    ) -> Result<()> {
        self.check_runtime(comm)?;
        let start = comm.post_send(bytemuck::cast_slice(buf), dest, tag, false)?;
        match start {
            // A send's status names its destination, in `comm`'s ranks.
            SendStart::Done(st) => self.add_ready(Status { source: dest, ..st }),
            SendStart::Queued(id) => self.add_pending(comm, id, Kind::Send),
        }
        Ok(())
    }

    /// Post a nonblocking receive into `buf` from `source` with `tag` on `comm`
    /// (MPI_Irecv) and add it to the set. Its status names the sender by its rank in
    /// `comm`.
    ///
    /// # Errors
    /// As [`Communicator::irecv`] ([`Error::Usage`] for an invalid source or tag);
    /// [`Error::Usage`] when `comm` belongs to another runtime than the set's other
    /// operations. Nothing is added then.
    #[inline]
    pub fn irecv<T: Pod>(
        &mut self,
        comm: &Communicator,
        buf: &'a mut [T],
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<()> {
        self.check_runtime(comm)?;
        let id = comm.post_recv(bytemuck::cast_slice_mut(buf), source.into(), tag.into())?;
        self.add_pending(comm, id, Kind::Recv);
        Ok(())
    }

    /// Add `req` (any point-to-point request: host or device memory, synchronous,
    /// matched) to the set; it is completed with the others, its status or error in the
    /// ranks of its communicator. A receive withdrawn by [`Request::cancel`] is
    /// accepted and makes [`RequestSet::wait_all`] fail with [`Error::Usage`], as
    /// waiting for it alone would.
    ///
    /// # Errors
    /// [`Error::Usage`] when `req` is pending in another runtime than the set's other
    /// operations (only possible where one process runs two runtimes, which
    /// [`crate::init`] does not allow). `req` is then dropped: a receive that has not
    /// matched is withdrawn, anything else waited for (which blocks until it completes).
    pub fn push(&mut self, mut req: Request<'a>) -> Result<()> {
        if let Some(st) = req.completed_at_post() {
            req.mark_consumed();
            self.add_ready(st);
            return Ok(());
        }
        if let (Some(mine), Some(its)) = (&self.inner, req.pending_runtime())
            && !Arc::ptr_eq(mine, its)
        {
            // `req` is dropped here: its drop withdraws or waits for it.
            return Err(other_runtime());
        }
        let Some(p) = req.take_pending() else {
            // Finished already (a withdrawn receive): fails its wait, as it would alone.
            self.entries.push(Entry {
                id: 0,
                comm: 0,
                kind: Kind::Finished,
            });
            return Ok(());
        };
        self.inner.get_or_insert(p.inner);
        let comm = match &p.comm {
            Some(c) => self.comm_index(c),
            None => 0,
        };
        self.entries.push(Entry {
            id: p.id,
            comm,
            kind: if p.is_recv { Kind::Recv } else { Kind::Send },
        });
        Ok(())
    }

    /// Wait for every operation of the set (MPI_Waitall). Returns the statuses, one per
    /// operation in the order they were added: a receive's names its sender, a send's
    /// its destination, in the ranks of the operation's communicator; `len_bytes` in
    /// bytes.
    ///
    /// The runtime is locked once for the whole wait, and each progress round takes a
    /// window of arrivals (as [`crate::wait_all`]).
    ///
    /// # Errors
    /// The first failure in the order the operations were added, after all of them
    /// have completed (the others' results are dropped), as [`crate::wait_all`]; ranks
    /// in it are the operation's communicator's. Among them: [`Error::Matching`] with
    /// [`crate::MatchError::Truncated`] (a receive buffer shorter than its message) or
    /// [`crate::MatchError::Cancelled`] (an operation withdrawn by
    /// [`Communicator::cancel_pending`]), [`Error::Connection`] (the peer failed), and
    /// [`Error::Usage`] for a receive withdrawn by [`Request::cancel`] before it was
    /// pushed.
    pub fn wait_all(mut self) -> Result<Vec<Status>> {
        let mut out = Vec::with_capacity(self.entries.len());
        let mut first_err = None;
        self.wait_each(&mut out, true, |out, o| match o {
            Ok(st) => out.push(st),
            Err(err) => {
                first_err.get_or_insert(err);
            }
        });
        match first_err {
            Some(err) => Err(err),
            None => Ok(out),
        }
    }

    /// Wait for every operation of the set and return each one's result, in the order
    /// they were added (MPI_Waitall with MPI_ERR_IN_STATUS; as
    /// [`crate::wait_all_results`]): a truncated receive's error does not hide the other
    /// operations' statuses. Statuses and errors in the ranks of each operation's
    /// communicator; `len_bytes` in bytes. The runtime is locked once for the wait.
    pub fn wait_all_results(mut self) -> Vec<Result<Status>> {
        let mut out = Vec::with_capacity(self.entries.len());
        self.wait_each(&mut Vec::new(), false, |_, o| out.push(o));
        out
    }

    /// Wait for every operation and hand each outcome, in the order added, to `sink`
    /// with `statuses`; with `fast`, a success in world ranks is instead pushed onto
    /// `statuses` by the runtime straight from its request slot. Empties the set.
    #[inline]
    fn wait_each(
        &mut self,
        statuses: &mut Vec<Status>,
        fast: bool,
        mut sink: impl FnMut(&mut Vec<Status>, Result<Status>),
    ) {
        let (entries, ready, comms) = (&self.entries, &self.ready, &self.comms);
        let n = entries.len();
        match &self.inner {
            Some(inner) if entries.iter().any(|x| x.kind.is_pending()) => {
                let mut e = inner.lock();
                for x in entries.iter().filter(|x| x.kind == Kind::Send) {
                    e.proto.help(x.id);
                }
                let mut next = 0;
                inner.wait_with(e, |e| {
                    while let Some(x) = entries.get(next) {
                        // The common case first: a success in world ranks, its status
                        // copied straight from the request's slot.
                        if fast && x.comm == 0 && x.kind.is_pending() {
                            match e.proto.take_ok_into(x.id, statuses) {
                                Taken::Pushed => {
                                    next += 1;
                                    continue;
                                }
                                Taken::Pending => {
                                    if x.kind == Kind::Send {
                                        e.proto.help(x.id);
                                    }
                                    e.want_completions(n - next);
                                    return None;
                                }
                                Taken::Other => {}
                            }
                        }
                        let Some(outcome) = take_outcome(e, x, ready, comms) else {
                            e.want_completions(n - next);
                            return None;
                        };
                        sink(statuses, outcome);
                        next += 1;
                    }
                    e.want_completions(1);
                    Some(())
                });
            }
            // Nothing pending in a runtime: one pass, no runtime call.
            _ => {
                for x in entries {
                    sink(statuses, x.settled_outcome(ready));
                }
            }
        }
        // Every operation completed: nothing left for the drop.
        self.entries.clear();
    }

    /// Add an operation that completed with `st` (in its communicator's ranks).
    #[inline]
    fn add_ready(&mut self, st: Status) {
        if self.ready.len() == self.ready.capacity() {
            // Room for a window of sends at once (none before the first).
            self.ready.reserve(self.entries.capacity().max(8));
        }
        self.entries.push(Entry {
            id: self.ready.len() as u64,
            comm: 0,
            kind: Kind::Ready,
        });
        self.ready.push(st);
    }

    /// [`Error::Usage`] unless `comm` belongs to the set's runtime (or the set has none
    /// yet); takes the runtime for the set.
    #[inline]
    fn check_runtime(&mut self, comm: &Communicator) -> Result<()> {
        match &self.inner {
            Some(i) if Arc::ptr_eq(i, &comm.inner) => Ok(()),
            Some(_) => Err(other_runtime()),
            None => {
                self.inner = Some(comm.inner.clone());
                Ok(())
            }
        }
    }

    /// Add the pending operation `id` of `comm` (whose runtime is the set's).
    #[inline]
    fn add_pending(&mut self, comm: &Communicator, id: ReqId, kind: Kind) {
        let c = if comm.st.is_identity() {
            0
        } else {
            self.comm_index(&comm.st)
        };
        self.entries.push(Entry { id, comm: c, kind });
    }

    /// The `Entry::comm` of communicator state `st` (added once).
    #[cold]
    fn comm_index(&mut self, st: &Arc<CommState>) -> u32 {
        let k = match self.comms.iter().position(|c| Arc::ptr_eq(c, st)) {
            Some(k) => k,
            None => {
                self.comms.push(st.clone());
                self.comms.len() - 1
            }
        };
        k as u32 + 1
    }
}

impl Drop for RequestSet<'_> {
    fn drop(&mut self) {
        let Some(inner) = self.inner.as_ref() else {
            return;
        };
        // As dropping each one's `Request`: a receive not matched yet is withdrawn,
        // everything else waited for (its buffer is then free).
        for x in &self.entries {
            match x.kind {
                Kind::Recv => {
                    if !inner.cancel_recv(x.id) {
                        let _ = inner.wait_request_quietly(x.id);
                    }
                }
                Kind::Send => {
                    let _ = inner.wait_request_quietly(x.id);
                }
                Kind::Ready | Kind::Finished => {}
            }
        }
    }
}

/// The outcome of operation `x` of a set (its statuses of sends completed at post in
/// `ready`, its communicators in `comms`) once settled, in its communicator's ranks;
/// `None` while it is pending (a pending send is offered help with its copy first).
fn take_outcome(
    e: &mut crate::engine::Engine,
    x: &Entry,
    ready: &[Status],
    comms: &[Arc<CommState>],
) -> Option<Result<Status>> {
    match x.kind {
        Kind::Recv | Kind::Send => match e.proto.take_settled(x.id) {
            Some(o) => Some(match x.comm {
                0 => o,
                k => crate::comm_state::localize(&comms[k as usize - 1], o),
            }),
            None => {
                if x.kind == Kind::Send {
                    e.proto.help(x.id);
                }
                None
            }
        },
        Kind::Ready | Kind::Finished => Some(x.settled_outcome(ready)),
    }
}

/// The error of an operation added to a set of another runtime.
#[cold]
fn other_runtime() -> Error {
    Error::usage(
        "a request set holds operations of one runtime (Universe); this one belongs to \
         another: wait for the set first, or use a second set",
    )
}
