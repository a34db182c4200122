//! Hierarchical allreduce on device buffers for communicators that span several nodes:
//! a reduce to the first rank of each node (peer-memory kernels where the node's ranks
//! can use them), an allreduce among those node leaders (the host schedules across
//! nodes: CUDA IPC cannot reach another node), and a broadcast inside each node — the
//! shape of NCCL's and MVAPICH2-GDR's node-aware allreduce. Only one rank per node
//! moves data between nodes, instead of every rank in the flat schedules.
//!
//! # When it runs
//! The blocking [`Communicator::allreduce_device`] and
//! [`Communicator::allreduce_device_in_place`], on a communicator whose ranks sit on at
//! least two nodes with at least one node holding two or more ranks, when the
//! communicator's own peer-memory path does not apply (it needs all ranks on one node).
//! The first such call decides, collectively (`split_shared`, two host allreduces, a
//! split of the node leaders); the node and leader communicators are kept for later
//! calls. Nonblocking, persistent and stream-ordered forms keep the flat schedules
//! (MPI lets a nonblocking call start before its peers arrive; the three steps here
//! wait for each other).
//!
//! # Numerics
//! Every rank receives the leaders' result through the broadcast, so the result is
//! bitwise identical on every rank. The combination order differs from the flat
//! schedules (node partial sums first), as NCCL's hierarchy does.
//!
//! # Testing on one node
//! `RANKWIRE_TEST_GPU_HIER_SPLIT=k` (tests only) makes the hierarchy treat ranks
//! `k·i .. k·i + k − 1` as node `i` and take it even on one node, so that the three
//! steps and their composition run on a one-GPU machine.

use std::sync::Arc;

use crate::coll::device::DevRaw;
use crate::coll::ops::{Datatype, Op};
use crate::comm::Communicator;
use crate::error::Result;

/// The communicators of a node-aware allreduce.
pub(crate) struct Hier {
    /// The ranks of this rank's node (rank 0 of it is the node's leader).
    node: Communicator,
    /// The node leaders; `Some` on leaders only.
    leaders: Option<Communicator>,
    /// How many nodes.
    nodes: usize,
}

/// `RANKWIRE_TEST_GPU_HIER_SPLIT`: ranks per fake node, tests only. It applies to
/// communicators of three or more ranks only, so that the node and leader
/// communicators (two ranks each in the tests) take their usual paths.
pub(crate) fn test_split_for(size: usize) -> Option<usize> {
    test_split().filter(|_| size >= 3)
}

fn test_split() -> Option<usize> {
    // A test switch: not in the settings table (RANKWIRE_TEST_* are never warned about).
    std::env::var("RANKWIRE_TEST_GPU_HIER_SPLIT")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&k| k > 0)
}

impl Hier {
    /// Allreduce of `bytes` at `send` into `recv` (`send == recv`: in place) through the
    /// node and leader communicators.
    ///
    /// # Safety
    /// Both ranges must be live device memory for the whole call.
    pub(crate) unsafe fn allreduce(
        &self,
        send: u64,
        recv: u64,
        bytes: usize,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        let leader = self.node.rank() == 0;
        if send == recv {
            self.node
                .reduce_device_in_place(&mut DevRaw(recv, bytes), dtype, op, 0)?;
        } else {
            let out = if leader { bytes } else { 0 };
            self.node
                .reduce_device(&DevRaw(send, bytes), &mut DevRaw(recv, out), dtype, op, 0)?;
        }
        if let Some(l) = &self.leaders {
            l.allreduce_device_in_place(&mut DevRaw(recv, bytes), dtype, op)?;
        }
        self.node.bcast_device(&mut DevRaw(recv, bytes), 0)
    }
}

impl Communicator {
    /// Whether the blocking device allreduce of this communicator is node-aware (see
    /// `coll/device_hier.rs` in the source): `Some((node_rank, node_size, nodes))` —
    /// this rank's rank among the ranks of its node, their number, and the number of
    /// nodes — or `None` (one node, or one rank per node: the flat schedules). Decided
    /// collectively on the first call (of this or of a device allreduce that needs it):
    /// every rank must call it at the same point. Needs no GPU.
    ///
    /// # Errors
    /// Those of the host collectives of the decision ([`Error::Connection`] if a peer
    /// died).
    ///
    /// [`Error::Connection`]: crate::Error::Connection
    pub fn device_allreduce_hierarchy(&self) -> Result<Option<(usize, usize, usize)>> {
        Ok(self
            .device_hierarchy()?
            .map(|h| (h.node.rank(), h.node.size(), h.nodes)))
    }

    /// The node-aware hierarchy of this communicator's device allreduce (see the module
    /// doc), decided collectively on the first call; `None` where it does not apply.
    /// Every rank must call it at the same point.
    ///
    /// # Errors
    /// Those of the host collectives of the decision.
    pub(crate) fn device_hierarchy(&self) -> Result<Option<Arc<Hier>>> {
        if let Some(h) = self.st.hier.get() {
            return Ok(h.clone().and_then(|a| a.downcast::<Hier>().ok()));
        }
        let h = self.build_hierarchy()?;
        let stored = self
            .st
            .hier
            .get_or_init(|| h.clone().map(|a| a as Arc<dyn std::any::Any + Send + Sync>));
        Ok(stored.clone().and_then(|a| a.downcast::<Hier>().ok()))
    }

    fn build_hierarchy(&self) -> Result<Option<Arc<Hier>>> {
        // Two nodes, one with two ranks: at least three ranks.
        if self.size() < 3 {
            return Ok(None);
        }
        let node = match test_split_for(self.size()) {
            Some(k) => self
                .split(Some((self.rank() / k) as u32), 0)?
                .ok_or_else(|| crate::error::Error::usage("hierarchy: no node communicator"))?,
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
        tracing::info!(
            "device allreduce on this communicator of {} ranks is node-aware: {} nodes, up \
             to {} ranks per node",
            self.size(),
            nodes[0],
            largest[0]
        );
        Ok(Some(Arc::new(Hier {
            node,
            leaders,
            nodes: nodes[0] as usize,
        })))
    }
}
