//! PMIx client: bootstrap of ranks started directly by a PMIx server
//! (`srun --mpi=pmix -n 4 ./app`), without `rwrun`.
//!
//! The server (Slurm's `mpi_pmix_v4` plugin in slurmstepd, or any PMIx v4 server) sets
//! `PMIX_NAMESPACE`, `PMIX_RANK` and `PMIX_SERVER_URI*` for every task. Unlike PMI-2, the
//! wire protocol belongs to the PMIx library, so rankwire loads the client library
//! `libpmix.so.2` at run time (`dlopen`, as it loads libibverbs): one binary starts on
//! machines without PMIx, and only a PMIx launch needs the library. `RANKWIRE_PMIX_LIB`
//! names another file.
//!
//! # Conversation
//! 1. `PMIx_Init` → this process's namespace and rank; `PMIx_Get(PMIX_JOB_SIZE)` and
//!    `PMIx_Get(PMIX_LOCAL_SIZE)` on the namespace's wildcard rank.
//! 2. [`PmixClient::put`] is `PMIx_Put` with global scope (a byte object); values are
//!    committed (`PMIx_Commit`) at the next fence.
//! 3. [`PmixClient::fence`] is `PMIx_Fence_nb` over the whole namespace with data
//!    collection (`PMIX_COLLECT_DATA`). Every rank must pass the same flag (the server
//!    refuses, or one node waits forever, otherwise), and a rank cannot know whether
//!    another put something, so every fence collects; one after which nobody put
//!    anything moves no data. rankwire fences only during setup: the init fence brings
//!    every rank's node record and addresses to every node, as PMI-2 does.
//! 4. [`PmixClient::get_from`] is `PMIx_Get_nb` of a key of the rank that put it, with
//!    `PMIX_OPTIONAL`: from the data the fences brought, without asking the server, so a
//!    key nobody put is "not found" at once (rankwire reads only keys put before a fence,
//!    as PMI-2 requires).
//! 5. `PMIx_Finalize`, or `PMIx_Abort` (the server ends every process of the namespace).
//!
//! # Timeouts
//! Every call that talks to the server is bounded by the bootstrap timeout
//! (`RANKWIRE_BOOTSTRAP_TIMEOUT`): fence and get run through the library's nonblocking
//! calls (with `PMIX_TIMEOUT` too, for servers that honour it); `PMIx_Init`,
//! `PMIx_Finalize` and `PMIx_Abort`, which have no nonblocking form, run on a helper
//! thread that is abandoned at the bound (the library is then never unloaded). A
//! nonblocking call still outstanding at the bound keeps its completion record, with the
//! key, process and attributes the library may still read, allocated until its late
//! callback.
//!
//! # Sources
//! The PMIx Standard v4.1 (chapters "Data Structures and Types", "Initialization and
//! Finalization", "Key/Value Management", "Process Management"): function signatures,
//! `pmix_proc_t`, `pmix_value_t`, `pmix_info_t`, the type, scope and status constants and
//! the attribute names used here. The layouts below are checked against the installed
//! `pmix_common.h` by a test where the headers and a C compiler exist.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Environment variables of the PMIx contract.
pub mod env {
    /// The job's namespace (set by the server for every process).
    pub const PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";
    /// This process's rank in the namespace.
    pub const PMIX_RANK: &str = "PMIX_RANK";
    /// The server's address (one of the `PMIX_SERVER_URI*` variables is set).
    pub const PMIX_SERVER_URI: &[&str] = &[
        "PMIX_SERVER_URI41",
        "PMIX_SERVER_URI4",
        "PMIX_SERVER_URI3",
        "PMIX_SERVER_URI21",
        "PMIX_SERVER_URI2",
    ];
    /// rankwire's override of the PMIx client library to load (a file name or path).
    pub const RANKWIRE_PMIX_LIB: &str = "RANKWIRE_PMIX_LIB";
}

/// Client libraries tried in order when `RANKWIRE_PMIX_LIB` is unset: the soname of
/// PMIx v4 (`libpmix2` on Debian and Ubuntu), then Debian's private directory.
pub const DEFAULT_LIBS: &[&str] = &[
    "libpmix.so.2",
    "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2",
    "libpmix.so",
];

// --- ABI of the PMIx Standard v4 (checked by `layout_matches_the_installed_header`) ---

/// `PMIX_MAX_NSLEN`: longest namespace, in bytes (without the terminating NUL).
const MAX_NSLEN: usize = 255;
/// `PMIX_MAX_KEYLEN`: longest key, in bytes (without the terminating NUL).
const MAX_KEYLEN: usize = 511;

/// `pmix_proc_t`: a namespace and a rank.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Proc {
    nspace: [c_char; MAX_NSLEN + 1],
    rank: u32,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ByteObject {
    bytes: *mut c_char,
    size: usize,
}

/// The union of `pmix_value_t` (24 bytes: its largest member is `pmix_envar_t`).
#[repr(C)]
#[derive(Clone, Copy)]
union ValueData {
    flag: bool,
    uint16: u16,
    uint32: u32,
    integer: c_int,
    bo: ByteObject,
    raw: [u64; 3],
}

/// `pmix_value_t`: a type tag and the union.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Value {
    ty: u16,
    data: ValueData,
}

/// `pmix_info_t`: a key, directives and a value.
#[repr(C)]
pub(crate) struct Info {
    key: [c_char; MAX_KEYLEN + 1],
    flags: u32,
    value: Value,
}

// pmix_data_type_t values.
const PMIX_BOOL: u16 = 1;
const PMIX_INT: u16 = 6;
const PMIX_UINT16: u16 = 13;
const PMIX_UINT32: u16 = 14;
const PMIX_BYTE_OBJECT: u16 = 27;
// pmix_scope_t PMIX_GLOBAL.
const PMIX_GLOBAL: u8 = 3;
// pmix_rank_t PMIX_RANK_WILDCARD.
const PMIX_RANK_WILDCARD: u32 = 0xffff_fffe;
// pmix_status_t values.
const PMIX_SUCCESS: c_int = 0;
const PMIX_ERR_NOT_FOUND: c_int = -46;
const PMIX_ERR_TIMEOUT: c_int = -24;
const PMIX_ERR_UNREACH: c_int = -25;
const PMIX_OPERATION_SUCCEEDED: c_int = -157;
// Attribute names.
const PMIX_JOB_SIZE: &CStr = c"pmix.job.size";
const PMIX_LOCAL_SIZE: &CStr = c"pmix.local.size";
const PMIX_LOCAL_RANK: &CStr = c"pmix.lrank";
const PMIX_COLLECT_DATA: &CStr = c"pmix.collect";
const PMIX_TIMEOUT: &CStr = c"pmix.timeout";
const PMIX_OPTIONAL: &CStr = c"pmix.optional";

type OpCb = extern "C" fn(c_int, *mut c_void);
type ValueCb = extern "C" fn(c_int, *mut Value, *mut c_void);

/// The library's entry points this client uses.
struct Api {
    init: unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int,
    finalize: unsafe extern "C" fn(*const Info, usize) -> c_int,
    abort: unsafe extern "C" fn(c_int, *const c_char, *mut Proc, usize) -> c_int,
    put: unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int,
    commit: unsafe extern "C" fn() -> c_int,
    fence_nb:
        unsafe extern "C" fn(*const Proc, usize, *const Info, usize, OpCb, *mut c_void) -> c_int,
    get_nb: unsafe extern "C" fn(
        *const Proc,
        *const c_char,
        *const Info,
        usize,
        ValueCb,
        *mut c_void,
    ) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    version: unsafe extern "C" fn() -> *const c_char,
    // Keeps the functions above valid; never unloaded (the library's progress thread,
    // or a helper thread abandoned at a bound, may still run in it).
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

/// Why a PMIx operation failed. The `Display` text names PMIx, the operation and the
/// fix where there is one.
#[derive(Debug, thiserror::Error)]
pub enum PmixError {
    /// The client library could not be loaded, or lacks a function this client needs.
    #[error(
        "cannot load the PMIx client library ({tried}): {detail}. Fix: install libpmix2 \
         (Debian/Ubuntu; the library of PMIx v4), set RANKWIRE_PMIX_LIB to the library's path, \
         or start the job with `srun --mpi=pmi2`, which needs no library"
    )]
    Library {
        /// The names tried.
        tried: String,
        /// The loader's last error.
        detail: String,
    },
    /// A PMIx environment variable is missing or malformed.
    #[error("environment variable {var}: {detail}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A PMIx call returned an error status.
    #[error("PMIx {what} failed: {status} ({name})")]
    Status {
        /// The call.
        what: String,
        /// The library's `pmix_status_t`.
        status: i32,
        /// `PMIx_Error_string` of it.
        name: String,
    },
    /// `get` of a key the peer never put (a bug in the calling layer).
    #[error("PMIx get of {key:?} from rank {rank}: not found (was it put and fenced?)")]
    NotFound {
        /// The key.
        key: String,
        /// The rank asked.
        rank: u32,
    },
    /// A fence or get got no completion within the bound.
    #[error(
        "PMIx {what}: no completion from the PMIx server within {timeout_ms} ms (another rank \
         may have died before it; raise RANKWIRE_BOOTSTRAP_TIMEOUT if it is only slow)"
    )]
    Timeout {
        /// The call.
        what: String,
        /// The bound, in milliseconds.
        timeout_ms: u128,
    },
    /// A value of the wrong type came back, or a key cannot be sent.
    #[error("PMIx {what}: {detail}")]
    Malformed {
        /// The call.
        what: String,
        /// What was wrong.
        detail: String,
    },
}

/// One process's PMIx client: initialized by [`PmixClient::from_env`], finalized by
/// [`PmixClient::finalize`] (or when dropped).
///
/// Calls block (fence and get at most the timeout). Not thread-safe by itself
/// (`&mut self`); the universe keeps it behind a mutex.
pub struct PmixClient {
    api: Api,
    me: Proc,
    size: u32,
    local_size: Option<u32>,
    local_rank: Option<u32>,
    timeout: Duration,
    /// Puts since the last fence (that fence commits them first).
    dirty: bool,
    finalized: bool,
    version: String,
}

impl std::fmt::Debug for PmixClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmixClient")
            .field("namespace", &self.namespace())
            .field("rank", &self.me.rank)
            .field("size", &self.size)
            .field("version", &self.version)
            .finish()
    }
}

/// Whether the environment says this process was started by a PMIx server.
pub fn offered(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| var(k).is_some_and(|v| !v.trim().is_empty());
    set(env::PMIX_NAMESPACE) && set(env::PMIX_RANK) && env::PMIX_SERVER_URI.iter().any(|v| set(v))
}

fn library_names() -> Vec<String> {
    match crate::settings::raw(env::RANKWIRE_PMIX_LIB) {
        Some(p) if !p.trim().is_empty() => vec![p.trim().to_string()],
        _ => DEFAULT_LIBS.iter().map(|s| s.to_string()).collect(),
    }
}

/// Load the PMIx client library this process would use (`RANKWIRE_PMIX_LIB` or
/// [`DEFAULT_LIBS`]) without initializing it, and return its version string (for
/// `rwrun --doctor`).
///
/// # Errors
/// [`PmixError::Library`] as [`PmixClient::from_env`] gives it.
pub fn probe_library() -> Result<String, PmixError> {
    let api = load(&library_names())?;
    // SAFETY: PMIx_Get_version returns a static string; it needs no PMIx_Init.
    Ok(unsafe { CStr::from_ptr((api.version)()) }
        .to_string_lossy()
        .into_owned())
}

fn load(names: &[String]) -> Result<Api, PmixError> {
    let mut last = String::from("no library named");
    for name in names {
        // SAFETY: loading the PMIx client library runs its initializers, which only
        // register the library's own state.
        let lib = match unsafe { libloading::Library::new(name) } {
            Ok(l) => l,
            Err(e) => {
                // libloading's text is "dlopen failed"; the loader's reason is the source.
                last = match std::error::Error::source(&e) {
                    Some(why) => format!("{e}: {why}"),
                    None => e.to_string(),
                };
                continue;
            }
        };
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol's type is the PMIx Standard's signature of that
                // function; `_lib` below keeps it loaded while `Api` lives.
                match unsafe { lib.get($name) } {
                    Ok(s) => *s,
                    Err(e) => {
                        let why = std::error::Error::source(&e)
                            .map(|w| format!(": {w}"))
                            .unwrap_or_default();
                        return Err(PmixError::Library {
                            tried: name.clone(),
                            detail: format!("{e}{why} (the file is not a PMIx v4 client library)"),
                        });
                    }
                }
            };
        }
        return Ok(Api {
            init: sym!(b"PMIx_Init\0"),
            finalize: sym!(b"PMIx_Finalize\0"),
            abort: sym!(b"PMIx_Abort\0"),
            put: sym!(b"PMIx_Put\0"),
            commit: sym!(b"PMIx_Commit\0"),
            fence_nb: sym!(b"PMIx_Fence_nb\0"),
            get_nb: sym!(b"PMIx_Get_nb\0"),
            error_string: sym!(b"PMIx_Error_string\0"),
            version: sym!(b"PMIx_Get_version\0"),
            _lib: std::mem::ManuallyDrop::new(lib),
        });
    }
    Err(PmixError::Library {
        tried: names.join(", "),
        detail: last,
    })
}

fn set_key(dst: &mut [c_char], key: &CStr) {
    let b = key.to_bytes();
    let n = b.len().min(dst.len() - 1);
    for (d, s) in dst.iter_mut().zip(&b[..n]) {
        *d = *s as c_char;
    }
    dst[n] = 0;
}

fn info(key: &CStr, value: Value) -> Info {
    let mut i = Info {
        key: [0; MAX_KEYLEN + 1],
        flags: 0,
        value,
    };
    set_key(&mut i.key, key);
    i
}

fn value_bool(b: bool) -> Value {
    Value {
        ty: PMIX_BOOL,
        data: ValueData { flag: b },
    }
}

fn value_int(n: c_int) -> Value {
    Value {
        ty: PMIX_INT,
        data: ValueData { integer: n },
    }
}

/// The longest wait for the server's answer to `PMIx_Abort`.
const ABORT_BOUND: Duration = Duration::from_secs(10);

/// Run `f` on a helper thread and wait at most `bound` for its result; `None` when it
/// did not finish in time (the thread is left to finish or block on its own) or no
/// thread could be started.
fn bounded<T: Send + 'static>(
    bound: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("rankwire-pmix".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.recv_timeout(bound).ok()
}

/// What a nonblocking call's callback hands back to the waiting caller, and the
/// arguments the library may still read until it calls back (`PMIx_Get_nb` keeps the
/// key and attribute pointers).
struct Done {
    state: Mutex<Option<(c_int, Option<Got>)>>,
    cv: Condvar,
    args: Args,
}

/// Arguments of one nonblocking call, at stable addresses inside its [`Done`].
struct Args {
    procs: Box<[Proc]>,
    key: CString,
    infos: Box<[Info]>,
}

// SAFETY: the arguments are plain data (namespaces, a key, attributes holding booleans
// and integers: no pointer into another thread's memory); the state is behind a mutex.
unsafe impl Send for Done {}
// SAFETY: as above; the callback thread only locks `state`.
unsafe impl Sync for Done {}

/// A value copied out of the library's `pmix_value_t` inside the callback.
enum Got {
    Bytes(Vec<u8>),
    Uint(u64),
    Other(u16),
}

impl Done {
    fn complete(&self, status: c_int, got: Option<Got>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *s = Some((status, got));
        self.cv.notify_all();
    }
}

extern "C" fn op_done(status: c_int, cbdata: *mut c_void) {
    // SAFETY: cbdata is the `Arc<Done>` leaked by `PmixClient::wait_for` (one strong
    // count handed to the library, taken back here exactly once).
    let done = unsafe { Arc::from_raw(cbdata as *const Done) };
    done.complete(status, None);
}

extern "C" fn value_done(status: c_int, kv: *mut Value, cbdata: *mut c_void) {
    // SAFETY: as in `op_done`.
    let done = unsafe { Arc::from_raw(cbdata as *const Done) };
    let got = if status == PMIX_SUCCESS && !kv.is_null() {
        // SAFETY: the library passes a valid value for the duration of the callback; the
        // union member read is the one its type tag names.
        unsafe {
            let v = &*kv;
            Some(match v.ty {
                PMIX_BYTE_OBJECT => {
                    let bo = v.data.bo;
                    if bo.bytes.is_null() || bo.size == 0 {
                        Got::Bytes(Vec::new())
                    } else {
                        Got::Bytes(
                            std::slice::from_raw_parts(bo.bytes as *const u8, bo.size).to_vec(),
                        )
                    }
                }
                PMIX_UINT32 => Got::Uint(u64::from(v.data.uint32)),
                PMIX_UINT16 => Got::Uint(u64::from(v.data.uint16)),
                other => Got::Other(other),
            })
        }
    } else {
        None
    };
    done.complete(status, got);
}

impl PmixClient {
    /// Load the client library and run `PMIx_Init` with the server the environment
    /// names; read the job size and this process's local rank and local size.
    ///
    /// # Errors
    /// [`PmixError::Library`] (library absent: the message names `libpmix2`,
    /// `RANKWIRE_PMIX_LIB` and `srun --mpi=pmi2`), [`PmixError::Env`] without the PMIx
    /// variables, [`PmixError::Status`] if the server refuses, [`PmixError::Timeout`].
    pub fn from_env(timeout: Duration) -> Result<Self, PmixError> {
        let get = |v: &str| std::env::var(v).ok();
        if !offered(get) {
            return Err(PmixError::Env {
                var: env::PMIX_NAMESPACE,
                detail: "PMIX_NAMESPACE, PMIX_RANK or PMIX_SERVER_URI* is not set: the process \
                         was not started by a PMIx server"
                    .into(),
            });
        }
        let api = load(&library_names())?;
        let mut me = Proc {
            nspace: [0; MAX_NSLEN + 1],
            rank: 0,
        };
        let init = api.init;
        let rc = match bounded(timeout, move || {
            // SAFETY: `me` is a valid pmix_proc_t the library fills; no info array.
            let rc = unsafe { init(&mut me, std::ptr::null_mut(), 0) };
            (rc, me)
        }) {
            Some((rc, filled)) => {
                me = filled;
                rc
            }
            None => {
                return Err(PmixError::Timeout {
                    what: "PMIx_Init (connecting to the server in PMIX_SERVER_URI*)".into(),
                    timeout_ms: timeout.as_millis(),
                });
            }
        };
        // SAFETY: PMIx_Get_version returns a static string.
        let version = unsafe { CStr::from_ptr((api.version)()) }
            .to_string_lossy()
            .into_owned();
        let mut c = PmixClient {
            api,
            me,
            size: 0,
            local_size: None,
            local_rank: None,
            timeout,
            dirty: false,
            // Not initialized: nothing to finalize when `init` failed.
            finalized: rc != PMIX_SUCCESS,
            version,
        };
        if rc == PMIX_ERR_UNREACH {
            return Err(c.status(
                "PMIx_Init: the PMIx server named in PMIX_SERVER_URI* cannot be reached (the \
                 step that set these variables has ended, or they were copied into a process \
                 it did not start; to run alone, unset every PMIX_* variable)",
                rc,
            ));
        }
        if rc != PMIX_SUCCESS {
            return Err(c.status(
                "PMIx_Init (connecting to the server in PMIX_SERVER_URI*)",
                rc,
            ));
        }
        let job = c.wildcard();
        c.size = c
            .get_uint(&job, PMIX_JOB_SIZE)?
            .ok_or_else(|| PmixError::Malformed {
                what: "get of pmix.job.size".into(),
                detail: "the server did not give the job size".into(),
            })?;
        c.local_size = c.get_uint(&job, PMIX_LOCAL_SIZE).ok().flatten();
        let me = c.me;
        c.local_rank = c.get_uint(&me, PMIX_LOCAL_RANK).ok().flatten();
        if c.size == 0 || c.me.rank >= c.size {
            return Err(PmixError::Malformed {
                what: "PMIx_Init".into(),
                detail: format!("rank {} is not below the job size {}", c.me.rank, c.size),
            });
        }
        Ok(c)
    }

    /// This process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// Number of processes in the namespace (`PMIX_JOB_SIZE`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Processes of this namespace on this node (`PMIX_LOCAL_SIZE`), where the server
    /// gives it.
    pub fn local_size(&self) -> Option<u32> {
        self.local_size
    }

    /// This process's rank among those on its node (`PMIX_LOCAL_RANK`), where given.
    pub fn local_rank(&self) -> Option<u32> {
        self.local_rank
    }

    /// The namespace (`PMIX_NAMESPACE`), e.g. `slurm.pmix.18.0`.
    pub fn namespace(&self) -> String {
        // SAFETY: the library NUL-terminates the namespace within its array.
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// The library's version string (`PMIx_Get_version`).
    pub fn library_version(&self) -> &str {
        &self.version
    }

    /// Bound every later fence and get by `timeout`.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn wildcard(&self) -> Proc {
        Proc {
            nspace: self.me.nspace,
            rank: PMIX_RANK_WILDCARD,
        }
    }

    fn proc_of(&self, rank: u32) -> Proc {
        Proc {
            nspace: self.me.nspace,
            rank,
        }
    }

    fn status(&self, what: &str, rc: c_int) -> PmixError {
        // SAFETY: PMIx_Error_string returns a static string for any status.
        let p = unsafe { (self.api.error_string)(rc) };
        let name = if p.is_null() {
            "?".into()
        } else {
            // SAFETY: non-null static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        PmixError::Status {
            what: what.into(),
            status: rc,
            name,
        }
    }

    fn timeout_info(&self) -> Info {
        let secs = self.timeout.as_secs().clamp(1, i32::MAX as u64) as c_int;
        info(PMIX_TIMEOUT, value_int(secs))
    }

    /// Start a nonblocking call with `start(callback data)` and wait for its callback at
    /// most the timeout. Returns the status (and value) the callback gave.
    fn wait_for(
        &self,
        what: &str,
        args: Args,
        start: impl FnOnce(&Args, *mut c_void) -> c_int,
    ) -> Result<(c_int, Option<Got>), PmixError> {
        let done = Arc::new(Done {
            state: Mutex::new(None),
            cv: Condvar::new(),
            args,
        });
        let cb = Arc::into_raw(done.clone()) as *mut c_void;
        let rc = start(&done.args, cb);
        if rc != PMIX_SUCCESS {
            // SAFETY: the library did not accept the call, so it will not call back;
            // take back the count handed to it.
            drop(unsafe { Arc::from_raw(cb as *const Done) });
            if rc == PMIX_OPERATION_SUCCEEDED {
                return Ok((PMIX_SUCCESS, None));
            }
            return Err(self.status(what, rc));
        }
        let deadline = std::time::Instant::now() + self.timeout;
        let mut s = done.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = s.take() {
                return Ok(r);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                // The callback's count stays with the library: the record, with the
                // arguments it may still read, outlives a late callback.
                return Err(PmixError::Timeout {
                    what: what.into(),
                    timeout_ms: self.timeout.as_millis(),
                });
            }
            s = done
                .cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// `PMIx_Get_nb` of `key` of process `p`; `optional`: only from data already on this
    /// node (`PMIX_OPTIONAL`), so a missing key is `None` at once.
    fn get_value(
        &self,
        p: &Proc,
        key: &CStr,
        what: &str,
        optional: bool,
    ) -> Result<Option<Got>, PmixError> {
        let mut infos = vec![self.timeout_info()];
        if optional {
            infos.push(info(PMIX_OPTIONAL, value_bool(true)));
        }
        let args = Args {
            procs: Box::new([*p]),
            key: key.to_owned(),
            infos: infos.into_boxed_slice(),
        };
        let (rc, got) = self.wait_for(what, args, |a, cb| {
            // SAFETY: the arguments live in the completion record until the callback
            // (the library keeps the key and attribute pointers); `value_done` matches
            // pmix_value_cbfunc_t.
            unsafe {
                (self.api.get_nb)(
                    a.procs.as_ptr(),
                    a.key.as_ptr(),
                    a.infos.as_ptr(),
                    a.infos.len(),
                    value_done,
                    cb,
                )
            }
        })?;
        match rc {
            PMIX_SUCCESS => Ok(got),
            PMIX_ERR_NOT_FOUND => Ok(None),
            rc => Err(self.failed(what, rc)),
        }
    }

    // A status of a call that waited on others: a timeout is PmixError::Timeout.
    fn failed(&self, what: &str, rc: c_int) -> PmixError {
        if rc == PMIX_ERR_TIMEOUT {
            return PmixError::Timeout {
                what: what.into(),
                timeout_ms: self.timeout.as_millis(),
            };
        }
        self.status(what, rc)
    }

    fn get_uint(&self, p: &Proc, key: &CStr) -> Result<Option<u32>, PmixError> {
        let what = format!("get of {}", key.to_string_lossy());
        match self.get_value(p, key, &what, false)? {
            None => Ok(None),
            Some(Got::Uint(n)) => Ok(u32::try_from(n).ok()),
            Some(Got::Bytes(_)) => Err(PmixError::Malformed {
                what,
                detail: "a byte object where an integer was expected".into(),
            }),
            Some(Got::Other(t)) => Err(PmixError::Malformed {
                what,
                detail: format!("value of PMIx type {t} where an integer was expected"),
            }),
        }
    }

    /// Publish `value` (any bytes) under `key` for every rank (`PMIx_Put`, global
    /// scope); visible to others after the next [`PmixClient::fence`].
    ///
    /// # Errors
    /// [`PmixError::Malformed`] for a key longer than 511 bytes or with a NUL;
    /// [`PmixError::Status`] if the library refuses.
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), PmixError> {
        let k = self.key(key, "put")?;
        let mut v = Value {
            ty: PMIX_BYTE_OBJECT,
            data: ValueData {
                bo: ByteObject {
                    bytes: value.as_ptr() as *mut c_char,
                    size: value.len(),
                },
            },
        };
        // SAFETY: PMIx_Put copies the value (the Standard: "the value is copied"); the
        // byte object points at `value`, alive for the call.
        let rc = unsafe { (self.api.put)(PMIX_GLOBAL, k.as_ptr(), &mut v) };
        if rc != PMIX_SUCCESS {
            return Err(self.status(&format!("put of {key:?}"), rc));
        }
        self.dirty = true;
        Ok(())
    }

    fn key(&self, key: &str, what: &str) -> Result<CString, PmixError> {
        if key.is_empty() || key.len() > MAX_KEYLEN {
            return Err(PmixError::Malformed {
                what: format!("{what} of {key:?}"),
                detail: format!("a key has 1 to {MAX_KEYLEN} bytes"),
            });
        }
        CString::new(key).map_err(|_| PmixError::Malformed {
            what: format!("{what} of {key:?}"),
            detail: "a key cannot hold a NUL byte".into(),
        })
    }

    /// Read the value rank `rank` put under `key` (fetched from its server where no
    /// fence collected it).
    ///
    /// # Errors
    /// [`PmixError::NotFound`] if that rank never put it; [`PmixError::Timeout`];
    /// [`PmixError::Status`].
    pub fn get_from(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, PmixError> {
        let k = self.key(key, "get")?;
        let p = self.proc_of(rank);
        let what = format!("get of {key:?} from rank {rank}");
        match self.get_value(&p, &k, &what, true)? {
            Some(Got::Bytes(b)) => Ok(b),
            None => Err(PmixError::NotFound {
                key: key.into(),
                rank,
            }),
            Some(_) => Err(PmixError::Malformed {
                what,
                detail: "not a byte object (put by something other than rankwire?)".into(),
            }),
        }
    }

    /// Collective over every process of the namespace: commits this rank's puts, returns
    /// once all have called it, and (where this rank put anything since the last fence)
    /// collects every rank's data locally.
    ///
    /// # Errors
    /// [`PmixError::Timeout`] if some rank never arrives; [`PmixError::Status`].
    pub fn fence(&mut self) -> Result<(), PmixError> {
        if self.dirty {
            // SAFETY: no arguments.
            let rc = unsafe { (self.api.commit)() };
            if rc != PMIX_SUCCESS {
                return Err(self.status("commit", rc));
            }
        }
        // Always collect: see the module doc.
        let args = Args {
            procs: Box::new([self.wildcard()]),
            key: CString::default(),
            infos: Box::new([
                info(PMIX_COLLECT_DATA, value_bool(true)),
                self.timeout_info(),
            ]),
        };
        let (rc, _) = self.wait_for("fence", args, |a, cb| {
            // SAFETY: the arguments live in the completion record until the callback;
            // `op_done` matches pmix_op_cbfunc_t.
            unsafe {
                (self.api.fence_nb)(
                    a.procs.as_ptr(),
                    a.procs.len(),
                    a.infos.as_ptr(),
                    a.infos.len(),
                    op_done,
                    cb,
                )
            }
        })?;
        if rc != PMIX_SUCCESS {
            return Err(self.failed("fence", rc));
        }
        self.dirty = false;
        Ok(())
    }

    /// `PMIx_Finalize`. Calling it again does nothing.
    ///
    /// # Errors
    /// [`PmixError::Status`].
    pub fn finalize(&mut self) -> Result<(), PmixError> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        let finalize = self.api.finalize;
        // SAFETY: initialized and not yet finalized; no info array.
        match bounded(self.timeout, move || unsafe {
            finalize(std::ptr::null(), 0)
        }) {
            Some(PMIX_SUCCESS) => Ok(()),
            Some(rc) => Err(self.status("finalize", rc)),
            None => Err(PmixError::Timeout {
                what: "PMIx_Finalize".into(),
                timeout_ms: self.timeout.as_millis(),
            }),
        }
    }

    /// Ask the server to end every process of the namespace (`PMIx_Abort` with no
    /// process list), with exit status `code` and `message` for its log.
    ///
    /// # Errors
    /// [`PmixError::Status`] if the request was refused.
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), PmixError> {
        let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
        let abort = self.api.abort;
        // The server usually ends this process before answering; the caller exits anyway.
        let bound = self.timeout.min(ABORT_BOUND);
        // SAFETY: a NUL-terminated message (moved into the thread); NULL/0 = the whole
        // namespace.
        match bounded(bound, move || unsafe {
            abort(code, msg.as_ptr(), std::ptr::null_mut(), 0)
        }) {
            Some(PMIX_SUCCESS) => Ok(()),
            Some(rc) => Err(self.status("abort", rc)),
            None => Err(PmixError::Timeout {
                what: "PMIx_Abort".into(),
                timeout_ms: bound.as_millis(),
            }),
        }
    }
}

impl Drop for PmixClient {
    fn drop(&mut self) {
        // A client dropped unfinalized (an init error after PMIx_Init) still says goodbye,
        // so the server does not report a lost connection.
        let _ = self.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_needs_namespace_rank_and_server() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!offered(env(&[])));
        assert!(!offered(env(&[
            ("PMIX_RANK", "0"),
            ("PMIX_NAMESPACE", "x")
        ])));
        // An empty server address is no server.
        assert!(!offered(env(&[
            ("PMIX_RANK", "0"),
            ("PMIX_NAMESPACE", "x"),
            ("PMIX_SERVER_URI41", " "),
        ])));
        assert!(offered(env(&[
            ("PMIX_RANK", "0"),
            ("PMIX_NAMESPACE", "slurm.pmix.1.0"),
            ("PMIX_SERVER_URI41", "pmix-server.1;tcp4://127.0.0.1:1"),
        ])));
    }

    #[test]
    fn missing_library_names_the_package_and_the_alternative() {
        let e = match load(&["/nonexistent/libpmix.so.2".into()]) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a missing file loaded"),
        };
        for want in [
            "libpmix2",
            "RANKWIRE_PMIX_LIB",
            "srun --mpi=pmi2",
            "/nonexistent",
        ] {
            assert!(e.contains(want), "{want:?} missing from: {e}");
        }
    }

    #[test]
    fn bounded_calls_return_or_give_up_at_the_bound() {
        assert_eq!(bounded(Duration::from_secs(5), || 7), Some(7));
        let t0 = std::time::Instant::now();
        let r = bounded(Duration::from_millis(100), || {
            std::thread::sleep(Duration::from_secs(2));
            1
        });
        assert_eq!(r, None);
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }

    #[test]
    fn keys_are_bounded() {
        let api = match load(
            &DEFAULT_LIBS
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        ) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("skipped: no PMIx client library here ({e})");
                return;
            }
        };
        let c = PmixClient {
            api,
            me: Proc {
                nspace: [0; MAX_NSLEN + 1],
                rank: 0,
            },
            size: 1,
            local_size: None,
            local_rank: None,
            timeout: Duration::from_secs(1),
            dirty: false,
            finalized: true,
            version: String::new(),
        };
        assert!(c.key("", "put").is_err());
        assert!(c.key(&"k".repeat(MAX_KEYLEN + 1), "put").is_err());
        assert!(c.key("a\0b", "put").is_err());
        assert!(c.key(&"k".repeat(MAX_KEYLEN), "put").is_ok());
    }

    /// The Rust layouts above against the installed `pmix_common.h` (skips, saying so,
    /// without the headers or a C compiler).
    #[test]
    fn layout_matches_the_installed_header() {
        let inc = "/usr/lib/x86_64-linux-gnu/pmix2/include";
        let inc = std::env::var("RANKWIRE_PMIX_INCLUDE").unwrap_or_else(|_| inc.into());
        if !std::path::Path::new(&inc).join("pmix_common.h").exists() {
            eprintln!("skipped: no PMIx headers in {inc} (package libpmix-dev)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("rw-pmix-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("l.c");
        std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <stddef.h>
#include <pmix_common.h>
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu\n",
    sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank),
    sizeof(pmix_value_t), offsetof(pmix_value_t, data),
    sizeof(pmix_info_t), offsetof(pmix_info_t, flags), offsetof(pmix_info_t, value),
    sizeof(pmix_byte_object_t), (size_t)PMIX_MAX_KEYLEN);
  printf("%d %d %d %d %d %d %u %d %d %d\n", PMIX_BOOL, PMIX_INT, PMIX_UINT16, PMIX_UINT32,
    PMIX_BYTE_OBJECT, PMIX_GLOBAL, PMIX_RANK_WILDCARD, PMIX_SUCCESS, PMIX_ERR_NOT_FOUND,
    PMIX_OPERATION_SUCCEEDED);
  printf("%s %s %s %s %s %d\n", PMIX_JOB_SIZE, PMIX_LOCAL_SIZE, PMIX_LOCAL_RANK,
    PMIX_COLLECT_DATA, PMIX_TIMEOUT, PMIX_MAX_NSLEN);
  printf("%d %d %s\n", PMIX_ERR_TIMEOUT, PMIX_ERR_UNREACH, PMIX_OPTIONAL);
  return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("l");
        let cc = std::process::Command::new("cc")
            .arg(format!("-I{inc}"))
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output();
        let Ok(cc) = cc else {
            eprintln!("skipped: no C compiler (cc)");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        };
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = std::process::Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let want0 = format!(
            "{} {} {} {} {} {} {} {} {}",
            std::mem::size_of::<Proc>(),
            std::mem::offset_of!(Proc, rank),
            std::mem::size_of::<Value>(),
            std::mem::offset_of!(Value, data),
            std::mem::size_of::<Info>(),
            std::mem::offset_of!(Info, flags),
            std::mem::offset_of!(Info, value),
            std::mem::size_of::<ByteObject>(),
            MAX_KEYLEN
        );
        assert_eq!(lines[0], want0, "struct layouts");
        let want1 = format!(
            "{PMIX_BOOL} {PMIX_INT} {PMIX_UINT16} {PMIX_UINT32} {PMIX_BYTE_OBJECT} {PMIX_GLOBAL} \
             {PMIX_RANK_WILDCARD} {PMIX_SUCCESS} {PMIX_ERR_NOT_FOUND} {PMIX_OPERATION_SUCCEEDED}"
        );
        assert_eq!(lines[1], want1, "constants");
        let want2 = format!(
            "{} {} {} {} {} {MAX_NSLEN}",
            PMIX_JOB_SIZE.to_string_lossy(),
            PMIX_LOCAL_SIZE.to_string_lossy(),
            PMIX_LOCAL_RANK.to_string_lossy(),
            PMIX_COLLECT_DATA.to_string_lossy(),
            PMIX_TIMEOUT.to_string_lossy()
        );
        assert_eq!(lines[2], want2, "attribute names");
        let want3 = format!(
            "{PMIX_ERR_TIMEOUT} {PMIX_ERR_UNREACH} {}",
            PMIX_OPTIONAL.to_string_lossy()
        );
        assert_eq!(lines[3], want3, "statuses and PMIX_OPTIONAL");
    }
}
