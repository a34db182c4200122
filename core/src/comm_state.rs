//! The state every clone of a [`crate::Communicator`] shares: context id, members
//! (as world ranks), the translation between world and communicator ranks, the count
//! of collective calls, the collective settings, and the release of the context id
//! when the last handle drops.
//!
//! Point-to-point requests (`crate::request`) and collectives (`crate::coll`) keep an
//! `Arc<CommState>` to report statuses and errors in communicator ranks
//! ([`localize`], [`local_err`]) without naming the communicator's API.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::coll::select::CollConfig;
use crate::error::{Error, MatchError, Result};
use crate::protocol::Status;

/// What a communicator's state runs when its last handle drops: release context id
/// `ctx` of the members (world ranks). Built by the runtime's side
/// (`crate::runtime::Releaser`), so that this file names no runtime.
pub(crate) type Release = Box<dyn FnOnce(u32, Arc<[u32]>) + Send + Sync>;

/// What every clone of a communicator shares.
pub(crate) struct CommState {
    /// Context id of point-to-point traffic; collectives use
    /// `ctx | crate::context_id::COLL_CTX_BIT`.
    pub(crate) ctx: u32,
    /// World rank of each communicator rank.
    pub(crate) group: Arc<[u32]>,
    /// The calling process's rank in `group`.
    pub(crate) rank: usize,
    /// World rank → communicator rank; `None` when they coincide for every member.
    to_local: Option<HashMap<u32, u32>>,
    /// Collective calls started so far (identical on every rank: MPI requires all ranks
    /// to call collectives on a communicator in the same order). Part of every
    /// collective's tag.
    seq: AtomicU64,
    /// Algorithm selection and checking (the runtime's settings, read once per runtime).
    pub(crate) cfg: CollConfig,
    /// Releases the context id when the last handle drops (`None`: the world).
    releaser: Option<Release>,
    /// The peer-memory path of device collectives (decided at the first one).
    pub(crate) peer: std::sync::Mutex<crate::coll::device_peer::PeerSlot>,
    /// Whether every rank reads every other by cross-memory attach, agreed at the first
    /// single-copy allreduce (`coll/single_copy.rs`).
    pub(crate) single_copy: std::sync::OnceLock<bool>,
    /// The node and leader communicators of the node-aware device allreduce
    /// (`coll/device_hier.rs`), decided at the first one; `None` where it does not
    /// apply. Held as `Any` so that this file names no communicator.
    pub(crate) hier: std::sync::OnceLock<Option<Arc<dyn std::any::Any + Send + Sync>>>,
}

impl Drop for CommState {
    fn drop(&mut self) {
        if let Some(r) = self.releaser.take() {
            r(self.ctx, self.group.clone());
        }
    }
}

impl CommState {
    /// State for a communicator of `group` (world ranks) with context `ctx`, or `None`
    /// if world rank `me` is not in the group.
    pub(crate) fn new(ctx: u32, group: Arc<[u32]>, me: u32, cfg: CollConfig) -> Option<CommState> {
        let rank = group.iter().position(|&w| w == me)?;
        let identity = group.iter().enumerate().all(|(i, &w)| i as u32 == w);
        let to_local = (!identity).then(|| {
            group
                .iter()
                .enumerate()
                .map(|(i, &w)| (w, i as u32))
                .collect()
        });
        Some(CommState {
            ctx,
            group,
            rank,
            to_local,
            seq: AtomicU64::new(0),
            cfg,
            releaser: None,
            peer: std::sync::Mutex::new(Default::default()),
            single_copy: std::sync::OnceLock::new(),
            hier: std::sync::OnceLock::new(),
        })
    }

    /// Release the context id through `r` when this state is dropped.
    pub(crate) fn set_releaser(&mut self, r: Release) {
        self.releaser = Some(r);
    }

    /// Number of the next collective call.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether communicator ranks are world ranks (no translation needed).
    pub(crate) fn is_identity(&self) -> bool {
        self.to_local.is_none()
    }

    /// Communicator rank of world rank `w` (unchanged if `w` is not a member, which
    /// matching on this context rules out).
    pub(crate) fn local(&self, w: u32) -> u32 {
        match &self.to_local {
            None => w,
            Some(m) => m.get(&w).copied().unwrap_or(w),
        }
    }
}

/// `r` with ranks translated from world to `st`'s communicator ranks.
pub(crate) fn localize(st: &CommState, r: Result<Status>) -> Result<Status> {
    match r {
        Ok(s) => Ok(Status {
            source: st.local(s.source as u32) as usize,
            ..s
        }),
        Err(e) => Err(local_err(st, e)),
    }
}

/// `e` with ranks translated from world to `st`'s communicator ranks, recorded as the
/// last error handed out (`crate::abort`).
pub(crate) fn local_err(st: &CommState, e: Error) -> Error {
    let e = match e {
        Error::Matching(MatchError::Truncated {
            source_rank,
            tag,
            message_bytes,
            buffer_bytes,
        }) => Error::Matching(MatchError::Truncated {
            source_rank: st.local(source_rank),
            tag,
            message_bytes,
            buffer_bytes,
        }),
        Error::Matching(MatchError::ElementSize {
            source_rank,
            tag,
            message_bytes,
            elem_bytes,
        }) => Error::Matching(MatchError::ElementSize {
            source_rank: st.local(source_rank),
            tag,
            message_bytes,
            elem_bytes,
        }),
        e => e,
    };
    e.noted()
}
