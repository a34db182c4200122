//! The node-aware allreduce on device buffers for communicators that span several
//! nodes: a reduce to the first rank of each node (peer-memory kernels where the node's
//! ranks can use them), an allreduce among those node leaders (the host schedules
//! across nodes: CUDA IPC cannot reach another node), and a broadcast inside each node —
//! the shape of NCCL's and MVAPICH2-GDR's node-aware allreduce. Only one rank per node
//! moves data between nodes, instead of every rank in the flat schedules. The steps
//! themselves are in `coll/device.rs` (`node_aware_allreduce`); this file decides and
//! keeps the communicators.
//!
//! # When it runs
//! The blocking [`Communicator::allreduce_device`] and
//! [`Communicator::allreduce_device_in_place`], on a communicator whose ranks sit on at
//! least two nodes with at least one node holding two or more ranks, unless
//! `RANKWIRE_COLL_CHECK` is on or `RANKWIRE_ALLREDUCE_ALGO` forces an algorithm. The
//! first such call decides, collectively (`split_shared`, two host allreduces, a split
//! of the node leaders), from the communicator alone — never from a rank's buffers — so
//! every rank takes the same branch; the node and leader communicators are kept (two
//! context ids) and never take this path themselves. Nonblocking, persistent and
//! stream-ordered forms keep the flat schedules (a nonblocking call may start before
//! its peers arrive; the three steps here wait for each other).
//!
//! # Errors
//! A step that fails on some ranks leaves the others waiting in the next step (as a
//! failed flat schedule leaves its partners): the error is returned where it happened,
//! and with the default error handling it ends the job.
//!
//! # Numerics
//! Every rank receives the leaders' result through the broadcast, so the result is
//! bitwise identical on every rank. The combination order differs from the flat
//! schedules (node partial sums first).
//!
//! # Testing on one node
//! `RANKWIRE_TEST_GPU_HIER_SPLIT=k` (tests only) makes the decision treat ranks
//! `k·i .. k·i + k − 1` as node `i`, so that the three steps and their composition run
//! on a one-GPU machine.

use std::sync::{Arc, OnceLock};

use crate::coll::ops::Op;
use crate::comm::Communicator;
use crate::comm_state::CommState;
use crate::error::{Error, Result};

/// The communicators of a node-aware allreduce, as shared states (a `Communicator`
/// would hold the runtime, and the world's state would then keep its own runtime
/// alive).
pub(crate) struct Hier {
    /// The ranks of this rank's node (rank 0 of it is the node's leader).
    node: Arc<CommState>,
    /// The node leaders; `Some` on leaders only.
    leaders: Option<Arc<CommState>>,
    /// How many nodes.
    nodes: usize,
}

impl Hier {
    /// The node communicator, on `c`'s runtime.
    pub(crate) fn node(&self, c: &Communicator) -> Communicator {
        Communicator {
            inner: c.inner.clone(),
            st: self.node.clone(),
        }
    }

    /// The leaders' communicator, on leaders only.
    pub(crate) fn leaders(&self, c: &Communicator) -> Option<Communicator> {
        self.leaders.as_ref().map(|st| Communicator {
            inner: c.inner.clone(),
            st: st.clone(),
        })
    }
}

/// `RANKWIRE_TEST_GPU_HIER_SPLIT`: ranks per fake node, tests only (read once; not in
/// the settings table: `RANKWIRE_TEST_*` are never warned about).
fn test_split() -> Option<usize> {
    static SPLIT: OnceLock<Option<usize>> = OnceLock::new();
    *SPLIT.get_or_init(|| {
        std::env::var("RANKWIRE_TEST_GPU_HIER_SPLIT")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&k| k > 0)
    })
}

impl Communicator {
    /// Whether the blocking device allreduce of this communicator is node-aware (see
    /// `coll/device_hier.rs` in the source): `Some((node_rank, node_size, nodes))` —
    /// this rank's rank among the ranks of its node, their number, and the number of
    /// nodes — or `None`: one node, one rank per node, `RANKWIRE_COLL_CHECK` on, or a
    /// forced `RANKWIRE_ALLREDUCE_ALGO` (the flat schedules). Needs no GPU.
    ///
    /// Collective: every rank must call it, at the same point of its collective calls
    /// (the first call on a communicator decides, with host collectives; later calls
    /// read the kept answer). Where it applies, the communicator keeps two more context
    /// ids (its node's and its leaders').
    ///
    /// # Errors
    /// Those of the host collectives of the decision: [`Error::Connection`] if a peer
    /// died, [`Error::Usage`] if context ids ran out.
    pub fn device_allreduce_hierarchy(&self) -> Result<Option<(usize, usize, usize)>> {
        Ok(self
            .node_aware()?
            .map(|h| (h.node.rank, h.node.group.len(), h.nodes)))
    }

    /// The node-aware hierarchy of this communicator's blocking device allreduce, or
    /// `None` (see the module doc). Collective on the first call.
    ///
    /// # Errors
    /// As [`Communicator::device_allreduce_hierarchy`].
    pub(crate) fn node_aware(&self) -> Result<Option<Arc<Hier>>> {
        if self.st.cfg.check || self.st.cfg.allreduce_forced() {
            return Ok(None);
        }
        let kept = match self.st.hier.get() {
            Some(kept) => kept,
            None => {
                let h = self.build_hierarchy()?;
                self.st
                    .hier
                    .get_or_init(|| h.map(|a| a as Arc<dyn std::any::Any + Send + Sync>))
            }
        };
        Ok(kept.clone().and_then(|a| a.downcast::<Hier>().ok()))
    }

    fn build_hierarchy(&self) -> Result<Option<Arc<Hier>>> {
        // Two nodes, one with two ranks: at least three ranks.
        if self.size() < 3 {
            return Ok(None);
        }
        let node = match test_split() {
            Some(k) => self
                .split(Some((self.rank() / k) as u32), 0)?
                .ok_or_else(|| Error::usage("node-aware allreduce: no node communicator"))?,
            None => self.split_shared()?,
        };
        let mut nodes = [0u64];
        self.allreduce(&[u64::from(node.rank() == 0)], &mut nodes, Op::Sum)?;
        let mut largest = [0u64];
        self.allreduce(&[node.size() as u64], &mut largest, Op::Max)?;
        if nodes[0] < 2 || largest[0] < 2 {
            return Ok(None);
        }
        let leaders = self.split((node.rank() == 0).then_some(0), 0)?;
        // The node and leader communicators never take this path themselves (one node,
        // or one rank per node; and under the test switch they would split again).
        let _ = node.st.hier.set(None);
        if let Some(l) = &leaders {
            let _ = l.st.hier.set(None);
        }
        tracing::info!(
            "device allreduce on this communicator of {} ranks is node-aware: {} nodes, up \
             to {} ranks per node",
            self.size(),
            nodes[0],
            largest[0]
        );
        Ok(Some(Arc::new(Hier {
            node: node.st.clone(),
            leaders: leaders.map(|l| l.st.clone()),
            nodes: nodes[0] as usize,
        })))
    }
}
