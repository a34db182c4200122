//! Bootstrap: how ranks find each other through the launcher's key-value server.
//!
//! [`launch::detect`] decides at `init` which wire-up a process uses: `rwrun`'s server
//! (below), a PMI server when started directly by `srun --mpi=pmi2` ([`pmi`]), a PMIx
//! server when started by `srun --mpi=pmix` ([`pmix`]), or none (a singleton). [`Wireup`] gives the rest of the core one interface to either.
//!
//! `rwrun` runs a rendezvous server (put, get, fence, abort) on an ephemeral TCP port and
//! starts every rank with the environment variables in [`env`](mod@env). Each rank opens a small
//! blocking `std::net` client ([`client::BootstrapClient`]) against it; transports use it
//! through the [`rankwire_transports::Exchange`] trait to publish and learn addresses.
//! [`proto`] defines the messages both sides use.

pub mod client;
pub mod env;
pub mod launch;
pub(crate) mod node;
pub mod pmi;
pub mod pmix;
pub mod proto;

use client::BootstrapClient;
use pmi::PmiClient;
use pmix::PmixClient;

/// The job's key-value store as a rank uses it: `rwrun`'s server or a PMI server.
/// Transports see it through [`rankwire_transports::Exchange`].
#[derive(Debug)]
pub enum Wireup {
    /// `rwrun`'s bootstrap server.
    Rwrun(BootstrapClient),
    /// The resource manager's PMI server (`srun --mpi=pmi2`).
    Pmi(PmiClient),
    /// The resource manager's PMIx server (`srun --mpi=pmix`), through libpmix.
    Pmix(Box<PmixClient>),
}

impl Wireup {
    /// Barrier over every rank of the job (making earlier puts visible).
    ///
    /// # Errors
    /// The underlying client's error, as text naming the layer.
    pub fn fence(&mut self) -> Result<(), String> {
        match self {
            Wireup::Rwrun(c) => c.fence().map_err(|e| e.to_string()),
            Wireup::Pmi(c) => c.fence().map_err(|e| e.to_string()),
            Wireup::Pmix(c) => c.fence().map_err(|e| e.to_string()),
        }
    }

    /// [`Wireup::fence`] calling `between` while it waits (see
    /// [`BootstrapClient::fence_progressing`]), where the server allows it (rwrun's;
    /// PMI-2 and PMIx fences block without it).
    ///
    /// # Errors
    /// As [`Wireup::fence`].
    pub fn fence_progressing(
        &mut self,
        max_interval: std::time::Duration,
        between: impl FnMut() -> bool,
    ) -> Result<(), String> {
        match self {
            Wireup::Rwrun(c) => c
                .fence_progressing(max_interval, between)
                .map_err(|e| e.to_string()),
            other => other.fence(),
        }
    }

    /// Tell the server this rank finalized cleanly.
    ///
    /// # Errors
    /// The underlying client's error, as text.
    pub fn finalize(&mut self) -> Result<(), String> {
        match self {
            Wireup::Rwrun(c) => c.finalize().map_err(|e| e.to_string()),
            Wireup::Pmi(c) => c.finalize().map_err(|e| e.to_string()),
            Wireup::Pmix(c) => c.finalize().map_err(|e| e.to_string()),
        }
    }

    /// Ask the launcher (or resource manager) to end every rank of the job with exit
    /// status `code`.
    ///
    /// # Errors
    /// The underlying client's error, as text.
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), String> {
        match self {
            Wireup::Rwrun(c) => c.abort(code, message).map_err(|e| e.to_string()),
            Wireup::Pmi(c) => c.abort(code, message).map_err(|e| e.to_string()),
            Wireup::Pmix(c) => c.abort(code, message).map_err(|e| e.to_string()),
        }
    }
}

/// The bootstrap client as a [`rankwire_transports::Lookup`] for connections on demand:
/// the TCP transport reads a peer's address at the first frame to it. The client sits in
/// the runtime's `bootstrap` mutex (put there at the end of init).
pub(crate) struct SharedLookup(pub(crate) std::sync::Arc<std::sync::Mutex<Option<Wireup>>>);

impl rankwire_transports::Lookup for SharedLookup {
    fn get(&mut self, owner: u32, key: &str) -> Result<Vec<u8>, String> {
        use rankwire_transports::Exchange as _;
        let mut b = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match b.as_mut() {
            Some(c) => c.get(owner, key),
            None => Err(format!(
                "no bootstrap client to read {key:?} from (before the end of init, or a singleton)"
            )),
        }
    }
}

impl rankwire_transports::Exchange for Wireup {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        match self {
            Wireup::Rwrun(c) => c.put(key, value).map_err(|e| e.to_string()),
            Wireup::Pmi(c) => c.put(key, value).map_err(|e| e.to_string()),
            Wireup::Pmix(c) => c.put(key, value).map_err(|e| e.to_string()),
        }
    }

    fn get(&mut self, owner: u32, key: &str) -> Result<Vec<u8>, String> {
        match self {
            Wireup::Rwrun(c) => c.get(key).map_err(|e| e.to_string()),
            Wireup::Pmi(c) => c.get(key).map_err(|e| e.to_string()),
            Wireup::Pmix(c) => c.get_from(owner, key).map_err(|e| e.to_string()),
        }
    }

    fn get_many(&mut self, keys: &[(u32, String)]) -> Result<Vec<Vec<u8>>, String> {
        match self {
            Wireup::Rwrun(c) => rankwire_transports::Exchange::get_many(c, keys),
            // PMI-1, PMI-2 and PMIx have no bulk get: one get per key (under PMIx from the
            // data the last collecting fence brought to this node, or from the owner's).
            Wireup::Pmi(c) => keys
                .iter()
                .map(|(_, k)| c.get(k).map_err(|e| e.to_string()))
                .collect(),
            Wireup::Pmix(c) => keys
                .iter()
                .map(|(o, k)| c.get_from(*o, k).map_err(|e| e.to_string()))
                .collect(),
        }
    }

    fn fence(&mut self) -> Result<(), String> {
        Wireup::fence(self)
    }
}
