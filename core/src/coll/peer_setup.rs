//! The collective setup of a communicator's peer-memory path
//! ([`crate::coll::device_peer`]): one host allgather of every rank's node, GPU, MPS
//! state and workspace export, the common verdict, the mappings, and one allreduce of
//! whether every rank mapped every peer. Kept apart from `device_peer.rs` so that
//! the communicator's shared state can hold a group without naming the API.

use std::sync::{Arc, Mutex};

use rankwire_gpu::peer::{MAX_PEERS, PeerWorkspace};

use crate::coll::device_peer::{
    self, INFO_BYTES, PeerGroup, PeerSetting, PeerSlot, RankInfo, info_bytes, info_from,
};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// The peer group of this communicator for buffers on `device`, set up
    /// collectively on the first call; `None` where the path is not used. Every rank
    /// must call it at the same point (the first call runs two host collectives).
    ///
    /// # Errors
    /// Those of the host allgather and allreduce of the setup.
    pub(crate) fn peer_group(&self, device: i32) -> Result<Option<Arc<Mutex<PeerGroup>>>> {
        let (mode, scratch) = device_peer::setup_settings();
        let p = self.size();
        // Off still takes part in the setup exchange (once): the ranks must agree.
        if !(2..=MAX_PEERS).contains(&p) {
            return Ok(None);
        }
        let mut slot = self.st.peer.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            PeerSlot::Ready(g) => {
                let same = g.lock().unwrap_or_else(|e| e.into_inner()).device() == device;
                return Ok(same.then(|| g.clone()));
            }
            PeerSlot::Unusable(_) => return Ok(None),
            PeerSlot::Unset => {}
        }
        match self.peer_setup(device, mode, scratch)? {
            Ok(g) => {
                tracing::info!(
                    "device collectives on this communicator of {p} ranks use peer memory"
                );
                let g = Arc::new(Mutex::new(g));
                *slot = PeerSlot::Ready(g.clone());
                Ok(Some(g))
            }
            Err(why) => {
                tracing::info!("device collectives use the host schedules: {why}");
                *slot = PeerSlot::Unusable(why);
                Ok(None)
            }
        }
    }

    /// Why this communicator's device collectives do not use peer memory (`None`:
    /// they do). Before the first device collective: "not decided".
    pub fn peer_memory_status(&self) -> Option<String> {
        match &*self.st.peer.lock().unwrap_or_else(|e| e.into_inner()) {
            PeerSlot::Unset => Some("not decided: no device collective ran yet".into()),
            PeerSlot::Unusable(why) => Some(why.clone()),
            PeerSlot::Ready(_) => None,
        }
    }

    fn peer_setup(
        &self,
        device: i32,
        mode: PeerSetting,
        scratch: usize,
    ) -> Result<std::result::Result<PeerGroup, String>> {
        let (p, me) = (self.size(), self.rank());
        let ws = if mode == PeerSetting::Off {
            Err(rankwire_gpu::GpuError::NotBuilt)
        } else {
            PeerWorkspace::new(device, scratch)
        };
        let mine: RankInfo = device_peer::local_info(device, ws.as_ref().ok(), mode, scratch);
        let mut all = vec![0u8; INFO_BYTES * p];
        self.allgather(&info_bytes(&mine), &mut all)?;
        let infos: Vec<RankInfo> = all.chunks_exact(INFO_BYTES).map(info_from).collect();
        let (sharing, sms) = match device_peer::verdict(&infos, mode) {
            Ok(v) => v,
            Err(why) => return Ok(Err(why)),
        };
        let opened = match ws {
            Ok(ws) => {
                device_peer::open_group(me, device, ws, &infos, self.st.group.clone(), sharing, sms)
            }
            Err(e) => Err(format!("rank {me}: workspace: {e}")),
        };
        let ok = [u32::from(opened.is_ok())];
        let mut all_ok = [0u32];
        self.allreduce(&ok, &mut all_ok, crate::coll::ops::Op::Min)?;
        Ok(match (opened, all_ok[0]) {
            (Ok(g), 1) => Ok(g),
            (Err(why), _) => Err(why),
            (Ok(_), _) => Err(
                "another rank could not map a peer's workspace (no peer access \
                               between its GPUs, or the GPU is not visible to it)"
                    .into(),
            ),
        })
    }
}
