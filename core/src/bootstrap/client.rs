//! Rank-side bootstrap client: a small blocking `std::net` client against `rwrun`'s
//! key-value server.
//!
//! # Lifecycle
//! 1. [`BootstrapClient::connect`] (or [`BootstrapClient::from_env`]) opens a TCP
//!    connection to `RANKWIRE_BOOTSTRAP_ADDR`, retrying until the timeout (the server may
//!    still be starting), sends [`Request::Hello`] with the job id, the job secret and
//!    the rank, and waits for [`Response::Ok`].
//! 2. Transports publish and learn addresses with [`BootstrapClient::put`],
//!    [`BootstrapClient::get`] and [`BootstrapClient::fence`] (also through
//!    [`rankwire_transports::Exchange`]).
//! 3. [`BootstrapClient::finalize`] at the end, or [`BootstrapClient::abort`] to end the
//!    whole job with an exit status.
//!
//! Independently, [`spawn_launcher_watch`] opens a second connection that the server
//! never answers; when it hits EOF the launcher is gone and the rank exits.
//!
//! # Timeouts
//! Every request has a bound: reads and writes time out after
//! [`BootstrapClient::timeout`], by default [`DEFAULT_TIMEOUT`] or the number of seconds
//! in the environment variable [`TIMEOUT_ENV`]. A request that timed out leaves the
//! connection in an unknown state (the answer may still arrive), so every later request
//! on that client fails with [`BootstrapError::Poisoned`].
//!
//! The wire format and the conversation are in [`super::proto`].

use super::proto::{self, Request, Response};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Default bound on one request (`get` and `fence` may wait this long for other ranks).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Environment variable overriding [`DEFAULT_TIMEOUT`], in whole or fractional seconds
/// (for example `RANKWIRE_BOOTSTRAP_TIMEOUT=300`).
pub const TIMEOUT_ENV: &str = "RANKWIRE_BOOTSTRAP_TIMEOUT";

/// Bound on connecting the watch connection of [`spawn_launcher_watch`].
const WATCH_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a bootstrap operation failed. Every variant names the server address.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// No TCP connection to the launcher's server could be made before the timeout.
    /// Likely cause: `rwrun` is gone or the address in `RANKWIRE_BOOTSTRAP_ADDR` is stale.
    /// Fix: start the program with `rwrun -n N prog`.
    #[error(
        "cannot connect to the rwrun bootstrap server at {addr} (tried for {waited_ms} ms): {source}"
    )]
    Connect {
        /// Server address as given.
        addr: String,
        /// How long connecting was retried, in milliseconds.
        waited_ms: u128,
        /// The last connect error.
        #[source]
        source: io::Error,
    },
    /// The server answered [`Response::Error`]: wrong job id or secret, rank out of
    /// range, or a refused request. Likely cause: an environment copied from another job.
    #[error("the rwrun bootstrap server at {addr} refused {what}: {message}")]
    Refused {
        /// Server address.
        addr: String,
        /// The request that was refused (`hello`, `put`, ...).
        what: &'static str,
        /// The server's reason.
        message: String,
    },
    /// Reading or writing the connection failed (the launcher closed it or died).
    #[error("bootstrap {what} with {addr} failed: {source}")]
    Io {
        /// Server address.
        addr: String,
        /// The request in progress.
        what: &'static str,
        /// The OS error (`UnexpectedEof` when the launcher closed the connection).
        #[source]
        source: io::Error,
    },
    /// No answer within the timeout. Likely cause for `get`/`fence`: another rank never
    /// reached the matching call (it crashed, hangs, or the ranks disagree on keys).
    /// Raise the bound with `RANKWIRE_BOOTSTRAP_TIMEOUT` (seconds) if the job is just slow.
    #[error("bootstrap {what} with {addr} timed out after {timeout_ms} ms")]
    Timeout {
        /// Server address.
        addr: String,
        /// The request that timed out.
        what: &'static str,
        /// The bound that expired, in milliseconds.
        timeout_ms: u128,
    },
    /// The server sent something the protocol does not allow here (a bug on one side,
    /// or not an rwrun server at that address).
    #[error("bootstrap protocol error with {addr} during {what}: {detail}")]
    Protocol {
        /// Server address.
        addr: String,
        /// The request in progress.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// An earlier request on this client timed out or failed mid-message, so the
    /// connection can no longer be trusted. Create a new client.
    #[error("bootstrap connection to {addr} is unusable after an earlier failure")]
    Poisoned {
        /// Server address.
        addr: String,
    },
    /// A required environment variable is missing or malformed (see
    /// [`super::env`]). Likely cause: the program was not started by `rwrun`.
    #[error("environment variable {var}: {detail}")]
    Env {
        /// Variable name.
        var: &'static str,
        /// What was wrong.
        detail: String,
    },
}

/// A blocking connection to `rwrun`'s bootstrap key-value server, authenticated for one
/// rank of one job.
///
/// Requests are answered in order; each call sends one request and waits for its one
/// response, bounded by [`BootstrapClient::timeout`].
#[derive(Debug)]
pub struct BootstrapClient {
    stream: TcpStream,
    addr: String,
    rank: u32,
    timeout: Duration,
    poisoned: bool,
}

impl BootstrapClient {
    /// Connect to the server at `addr` (`host:port`) and authenticate as `rank` of job
    /// `job_id` with `secret`.
    ///
    /// Connecting is retried (with a short back-off) until `timeout` has passed, so a
    /// rank may start before the server listens. The request timeout of the new client
    /// is [`default_timeout`].
    ///
    /// # Errors
    /// [`BootstrapError::Connect`] if no connection was made in time,
    /// [`BootstrapError::Refused`] if the server rejected the job id, secret or rank,
    /// [`BootstrapError::Io`], [`BootstrapError::Timeout`] or
    /// [`BootstrapError::Protocol`] if the hello exchange failed.
    pub fn connect(
        addr: &str,
        job_id: &str,
        secret: &str,
        rank: u32,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        let deadline = Instant::now() + timeout;
        let stream = connect_with_retry(addr, timeout)?;
        let mut client = BootstrapClient {
            stream,
            addr: addr.to_string(),
            rank,
            timeout: default_timeout(),
            poisoned: false,
        };
        // The hello answer is immediate on a live server; bound it by what is left of
        // the connect timeout, but give it at least a few seconds on a loaded machine.
        let hello_timeout = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(5));
        let hello = Request::Hello {
            job_id: job_id.to_string(),
            secret: secret.to_string(),
            rank,
        };
        match client.call("hello", &hello, hello_timeout)? {
            Response::Ok => Ok(client),
            other => Err(client.unexpected("hello", &other)),
        }
    }

    /// Connect using the environment `rwrun` gives every rank:
    /// `RANKWIRE_BOOTSTRAP_ADDR`, `RANKWIRE_JOB_ID`, `RANKWIRE_JOB_SECRET` and
    /// `RANKWIRE_RANK` (see [`super::env`]).
    ///
    /// # Errors
    /// [`BootstrapError::Env`] if a variable is missing or malformed, otherwise as
    /// [`BootstrapClient::connect`].
    pub fn from_env(timeout: Duration) -> Result<Self, BootstrapError> {
        let vars = EnvContract::read()?;
        Self::connect(&vars.addr, &vars.job_id, &vars.secret, vars.rank, timeout)
    }

    /// Server address this client talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Rank this client authenticated as.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Bound on each request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Change the bound on each later request. A zero duration is raised to 1 ms (the
    /// OS does not accept a zero socket timeout).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout.max(Duration::from_millis(1));
    }

    /// Store `value` under `key` for every rank of the job (last write wins).
    ///
    /// # Errors
    /// [`BootstrapError`] if the request failed or timed out.
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), BootstrapError> {
        let req = Request::Put {
            key: key.to_string(),
            value: value.to_vec(),
        };
        match self.call("put", &req, self.timeout)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("put", &other)),
        }
    }

    /// Read the value of `key`, waiting (up to the timeout) until some rank has put it.
    ///
    /// # Errors
    /// [`BootstrapError::Timeout`] if no rank put `key` in time; other variants if the
    /// connection failed.
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, BootstrapError> {
        let req = Request::Get {
            key: key.to_string(),
        };
        match self.call("get", &req, self.timeout)? {
            Response::Value { value } => Ok(value),
            other => Err(self.unexpected("get", &other)),
        }
    }

    /// Read every key of `keys` (waiting, up to the timeout per request, until each
    /// exists), in one round trip per [`proto::MAX_GET_MANY_KEYS`] keys. Returns the
    /// values in the order of `keys`.
    ///
    /// # Errors
    /// As [`BootstrapClient::get`]; a short or long answer is a protocol error.
    pub fn get_many(&mut self, keys: &[String]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(proto::MAX_GET_MANY_KEYS) {
            let req = Request::GetMany {
                keys: chunk.to_vec(),
            };
            match self.call("get", &req, self.timeout)? {
                Response::Values { values } if values.len() == chunk.len() => out.extend(values),
                other => return Err(self.unexpected("get", &other)),
            }
        }
        Ok(out)
    }

    /// Barrier over all ranks of the job: returns when every rank has called `fence` the
    /// same number of times. Puts made before the fence are visible after it.
    ///
    /// # Errors
    /// [`BootstrapError::Timeout`] if some rank did not reach the fence in time; other
    /// variants if the connection failed.
    pub fn fence(&mut self) -> Result<(), BootstrapError> {
        match self.call("fence", &Request::Fence, self.timeout)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("fence", &other)),
        }
    }

    /// [`BootstrapClient::fence`] that calls `between` while it waits for the answer
    /// (the final fence: the rank keeps progressing, so that a peer still flushing
    /// frames to it, or setting up a connection with it, can finish). `between` says
    /// whether it moved anything: then it runs again after 1 ms, else the pause doubles
    /// up to `max_interval` (a rank with nothing to do costs little CPU, one that drains
    /// a peer's frames keeps up). The answer is read only once its first byte is there,
    /// so `between` never runs in the middle of a message.
    ///
    /// # Errors
    /// As [`BootstrapClient::fence`]: the same timeout bounds the whole wait.
    pub fn fence_progressing(
        &mut self,
        max_interval: Duration,
        mut between: impl FnMut() -> bool,
    ) -> Result<(), BootstrapError> {
        self.check_usable()?;
        self.send("fence", &Request::Fence, self.timeout)?;
        let deadline = Instant::now() + self.timeout;
        let min = Duration::from_millis(1);
        let max_interval = max_interval.max(min);
        let mut interval = min;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = interval.min(left).max(min);
            let peeked = self
                .stream
                .set_read_timeout(Some(wait))
                .and_then(|()| self.stream.peek(&mut [0u8; 1]));
            match peeked {
                // The answer (or the end of the stream, which recv reports) is there.
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) && !left.is_zero() =>
                {
                    interval = if between() {
                        min
                    } else {
                        (interval * 2).min(max_interval)
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error("fence", self.timeout, e)),
            }
        }
        match self.recv("fence", self.timeout)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("fence", &other)),
        }
    }

    /// Ask the launcher to end the whole job: it prints `message`, terminates every rank
    /// (this one included) and exits with status `code`.
    ///
    /// Returns once the request is written and acknowledged; the launcher may kill this
    /// process before or after that, and a connection closed after the request was
    /// written counts as success.
    ///
    /// # Errors
    /// [`BootstrapError`] if the request could not be written.
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), BootstrapError> {
        let req = Request::Abort {
            code,
            message: message.to_string(),
        };
        self.check_usable()?;
        self.send("abort", &req, self.timeout)?;
        match self.recv("abort", self.timeout) {
            Ok(Response::Ok) => Ok(()),
            Ok(other) => Err(self.unexpected("abort", &other)),
            // The launcher is tearing the job down; the request got through.
            Err(BootstrapError::Io { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Tell the launcher this rank finalized cleanly.
    ///
    /// # Errors
    /// [`BootstrapError`] if the request failed or timed out.
    pub fn finalize(&mut self) -> Result<(), BootstrapError> {
        match self.call("finalize", &Request::Finalize, self.timeout)? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("finalize", &other)),
        }
    }

    // One request, one response, both bounded by `timeout`.
    fn call(
        &mut self,
        what: &'static str,
        req: &Request,
        timeout: Duration,
    ) -> Result<Response, BootstrapError> {
        self.check_usable()?;
        self.send(what, req, timeout)?;
        self.recv(what, timeout)
    }

    fn check_usable(&self) -> Result<(), BootstrapError> {
        if self.poisoned {
            return Err(BootstrapError::Poisoned {
                addr: self.addr.clone(),
            });
        }
        Ok(())
    }

    fn send(
        &mut self,
        what: &'static str,
        req: &Request,
        timeout: Duration,
    ) -> Result<(), BootstrapError> {
        let timeout = timeout.max(Duration::from_millis(1));
        let res = self
            .stream
            .set_write_timeout(Some(timeout))
            .and_then(|()| proto::write_message(&mut self.stream, req));
        res.map_err(|e| self.io_error(what, timeout, e))
    }

    fn recv(&mut self, what: &'static str, timeout: Duration) -> Result<Response, BootstrapError> {
        let timeout = timeout.max(Duration::from_millis(1));
        let res = self
            .stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| proto::read_message::<_, Response>(&mut self.stream));
        res.map_err(|e| self.io_error(what, timeout, e))
    }

    // Any failure in the middle of a message leaves the stream unaligned.
    fn io_error(&mut self, what: &'static str, timeout: Duration, e: io::Error) -> BootstrapError {
        self.poisoned = true;
        classify_io(&self.addr, what, timeout, e)
    }

    fn unexpected(&mut self, what: &'static str, resp: &Response) -> BootstrapError {
        match resp {
            Response::Error { message } => BootstrapError::Refused {
                addr: self.addr.clone(),
                what,
                message: message.clone(),
            },
            other => {
                self.poisoned = true;
                BootstrapError::Protocol {
                    addr: self.addr.clone(),
                    what,
                    detail: format!("unexpected answer {other:?}"),
                }
            }
        }
    }
}

impl rankwire_transports::Exchange for BootstrapClient {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        BootstrapClient::put(self, key, value).map_err(|e| e.to_string())
    }

    fn get(&mut self, _owner: u32, key: &str) -> Result<Vec<u8>, String> {
        BootstrapClient::get(self, key).map_err(|e| e.to_string())
    }

    fn get_many(&mut self, keys: &[(u32, String)]) -> Result<Vec<Vec<u8>>, String> {
        let names: Vec<String> = keys.iter().map(|(_, k)| k.clone()).collect();
        BootstrapClient::get_many(self, &names).map_err(|e| e.to_string())
    }

    fn fence(&mut self) -> Result<(), String> {
        BootstrapClient::fence(self).map_err(|e| e.to_string())
    }
}

/// The request timeout: [`TIMEOUT_ENV`] in seconds if set and valid (positive), else
/// [`DEFAULT_TIMEOUT`]. An invalid value is refused by `rwrun` and at init
/// ([`crate::settings`]) before this is read.
pub fn default_timeout() -> Duration {
    crate::settings::raw(TIMEOUT_ENV)
        .and_then(|s| parse_timeout(&s))
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// Watch the launcher: open a second connection to `addr`, authenticate as `rank`, send
/// [`Request::Watch`], and start a background thread that blocks reading it. The server
/// never answers a watch, so the read only returns when the launcher is gone; the
/// thread then prints `rankwire: rank N: lost the launcher (rwrun) connection; exiting`
/// to stderr and calls `std::process::exit(1)`.
///
/// This covers what `PR_SET_PDEATHSIG` cannot: a rank whose parent is not `rwrun`, or a
/// launcher on another node.
///
/// # Errors
/// If the watch cannot be set up (connect, hello or write failed) nothing is started
/// and the error is returned; the caller may go on without a watch.
pub fn spawn_launcher_watch(
    addr: &str,
    job_id: &str,
    secret: &str,
    rank: u32,
) -> Result<(), BootstrapError> {
    spawn_watch_with(addr, job_id, secret, rank, move || {
        eprintln!("rankwire: rank {rank}: lost the launcher (rwrun) connection; exiting");
        std::process::exit(1);
    })
}

// Set up the watch connection, then call `on_lost` from a background thread once it
// closes. Split out so tests can observe the loss without exiting.
fn spawn_watch_with<F>(
    addr: &str,
    job_id: &str,
    secret: &str,
    rank: u32,
    on_lost: F,
) -> Result<(), BootstrapError>
where
    F: FnOnce() + Send + 'static,
{
    let mut client = BootstrapClient::connect(addr, job_id, secret, rank, WATCH_CONNECT_TIMEOUT)?;
    client.send("watch", &Request::Watch, WATCH_CONNECT_TIMEOUT)?;
    let mut stream = client.stream;
    let addr_owned = addr.to_string();
    stream
        .set_read_timeout(None)
        .map_err(|e| classify_io(&addr_owned, "watch", WATCH_CONNECT_TIMEOUT, e))?;
    std::thread::Builder::new()
        .name("rankwire-launcher-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 256];
            loop {
                match stream.read(&mut buf) {
                    // The server never answers a watch; ignore stray bytes.
                    Ok(n) if n > 0 => continue,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Ok(_) => tracing::debug!("launcher watch: EOF from {addr_owned}"),
                    Err(e) => tracing::debug!("launcher watch: {addr_owned}: {e}"),
                }
                break;
            }
            on_lost();
        })
        .map_err(|e| BootstrapError::Io {
            addr: addr.to_string(),
            what: "watch",
            source: e,
        })?;
    Ok(())
}

// The variables of `super::env` a client needs.
struct EnvContract {
    addr: String,
    job_id: String,
    secret: String,
    rank: u32,
}

impl EnvContract {
    fn read() -> Result<Self, BootstrapError> {
        use super::env;
        fn var(name: &'static str) -> Result<String, BootstrapError> {
            std::env::var(name).map_err(|e| BootstrapError::Env {
                var: name,
                detail: format!("{e}; start the program with `rwrun -n N prog`"),
            })
        }
        let rank_s = var(env::RANK)?;
        let rank = rank_s
            .trim()
            .parse::<u32>()
            .map_err(|e| BootstrapError::Env {
                var: env::RANK,
                detail: format!("{rank_s:?} is not a rank: {e}"),
            })?;
        Ok(EnvContract {
            addr: var(env::BOOTSTRAP_ADDR)?,
            job_id: var(env::JOB_ID)?,
            secret: var(env::JOB_SECRET)?,
            rank,
        })
    }
}

fn parse_timeout(s: &str) -> Option<Duration> {
    let secs: f64 = s.trim().parse().ok()?;
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Some(Duration::from_secs_f64(secs))
    } else {
        None
    }
}

fn classify_io(addr: &str, what: &'static str, timeout: Duration, e: io::Error) -> BootstrapError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => BootstrapError::Timeout {
            addr: addr.to_string(),
            what,
            timeout_ms: timeout.as_millis(),
        },
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => BootstrapError::Protocol {
            addr: addr.to_string(),
            what,
            detail: e.to_string(),
        },
        _ => BootstrapError::Io {
            addr: addr.to_string(),
            what,
            source: e,
        },
    }
}

// Retry until `timeout`: the server may not listen yet, or the machine may be loaded.
fn connect_with_retry(addr: &str, timeout: Duration) -> Result<TcpStream, BootstrapError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let connect_err = |source: io::Error| BootstrapError::Connect {
        addr: addr.to_string(),
        waited_ms: start.elapsed().as_millis(),
        source,
    };
    // A comma-separated list (rwrun advertises every address of its node when ranks
    // run on other nodes): each is tried in order, every round.
    let mut targets: Vec<SocketAddr> = Vec::new();
    for one in addr.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        targets.extend(one.to_socket_addrs().map_err(connect_err)?);
    }
    if targets.is_empty() {
        return Err(connect_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "address resolves to nothing",
        )));
    }
    let mut backoff = Duration::from_millis(10);
    loop {
        let mut last_err = None;
        for target in &targets {
            let left = deadline.saturating_duration_since(Instant::now());
            // With several addresses, one that black-holes must not eat the whole bound.
            let per = if targets.len() > 1 { 2 } else { 5 };
            let attempt = left.clamp(Duration::from_millis(10), Duration::from_secs(per));
            match TcpStream::connect_timeout(target, attempt) {
                Ok(stream) => {
                    // Small request/response messages: do not wait for Nagle.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!("bootstrap: TCP_NODELAY on {addr}: {e}");
                    }
                    return Ok(stream);
                }
                Err(e) => last_err = Some(e),
            }
        }
        let now = Instant::now();
        if now >= deadline {
            let e = last_err.unwrap_or_else(|| io::Error::from(io::ErrorKind::TimedOut));
            return Err(connect_err(e));
        }
        std::thread::sleep(backoff.min(deadline - now));
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::thread;

    const JOB: &str = "rwtestjob";
    const SECRET: &str = "00112233445566778899aabbccddeeff";

    // A one-rank server speaking the real protocol: enough for the client's contract.
    // `hold_gets` makes `Get` never answered (to test timeouts).
    fn tiny_server(hold_gets: bool) -> (String, thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = thread::spawn(move || {
            let mut kv: HashMap<String, Vec<u8>> = HashMap::new();
            // Serve connections one after another until a client sends Finalize.
            for conn in listener.incoming() {
                let mut s = conn.unwrap();
                let hello: Request = match proto::read_message(&mut s) {
                    Ok(m) => m,
                    Err(_) => continue,
                };
                match hello {
                    Request::Hello {
                        job_id,
                        secret,
                        rank,
                    } if job_id == JOB && secret == SECRET && rank == 0 => {
                        proto::write_message(&mut s, &Response::Ok).unwrap();
                    }
                    _ => {
                        let msg = Response::Error {
                            message: "wrong job secret".into(),
                        };
                        proto::write_message(&mut s, &msg).unwrap();
                        continue;
                    }
                }
                while let Ok(req) = proto::read_message::<_, Request>(&mut s) {
                    let resp = match req {
                        Request::Put { key, value } => {
                            kv.insert(key, value);
                            Response::Ok
                        }
                        Request::Get { key } if !hold_gets => match kv.get(&key) {
                            Some(v) => Response::Value { value: v.clone() },
                            None => Response::Error {
                                message: "no such key".into(),
                            },
                        },
                        Request::Get { .. } => continue,
                        Request::GetMany { keys } => {
                            assert!(keys.len() <= proto::MAX_GET_MANY_KEYS);
                            match keys.iter().map(|k| kv.get(k).cloned()).collect() {
                                Some(values) => Response::Values { values },
                                None => Response::Error {
                                    message: "no such key".into(),
                                },
                            }
                        }
                        Request::Fence => Response::Ok,
                        Request::Abort { .. } => return,
                        Request::Finalize => {
                            proto::write_message(&mut s, &Response::Ok).unwrap();
                            return;
                        }
                        Request::Watch => {
                            // Hold the watch until the client side gives up, then close.
                            thread::sleep(Duration::from_millis(100));
                            break;
                        }
                        Request::Hello { .. } => Response::Error {
                            message: "twice".into(),
                        },
                    };
                    proto::write_message(&mut s, &resp).unwrap();
                }
            }
        });
        (addr, handle)
    }

    #[test]
    fn put_get_fence_finalize() {
        let (addr, server) = tiny_server(false);
        let mut c =
            BootstrapClient::connect(&addr, JOB, SECRET, 0, Duration::from_secs(5)).unwrap();
        assert_eq!(c.rank(), 0);
        c.put("k", &[0, 1, 255]).unwrap();
        assert_eq!(c.get("k").unwrap(), vec![0, 1, 255]);
        c.fence().unwrap();
        c.fence().unwrap();
        let x: &mut dyn rankwire_transports::Exchange = &mut c;
        x.put("big", &vec![7u8; 1 << 20]).unwrap();
        assert_eq!(x.get(0, "big").unwrap().len(), 1 << 20);
        // More keys than one GetMany may carry: the client splits them, in order.
        let keys: Vec<String> = (0..2500).map(|r| format!("node-{r}")).collect();
        for (r, k) in keys.iter().enumerate() {
            c.put(k, r.to_string().as_bytes()).unwrap();
        }
        let values = c.get_many(&keys).unwrap();
        assert_eq!(values.len(), 2500);
        assert!(
            values
                .iter()
                .enumerate()
                .all(|(r, v)| *v == r.to_string().as_bytes())
        );
        assert!(c.get_many(&["node-1".into(), "missing".into()]).is_err());
        c.finalize().unwrap();
        server.join().unwrap();
    }

    #[test]
    fn wrong_secret_is_refused() {
        let (addr, _server) = tiny_server(false);
        let err =
            BootstrapClient::connect(&addr, JOB, "nope", 0, Duration::from_secs(5)).unwrap_err();
        match &err {
            BootstrapError::Refused {
                what: "hello",
                message,
                ..
            } => {
                assert!(message.contains("secret"), "{message}")
            }
            other => panic!("expected Refused, got {other:?}"),
        }
        assert!(err.to_string().contains(&addr), "{err}");
    }

    #[test]
    fn refused_answer_to_request_keeps_connection_usable() {
        let (addr, _server) = tiny_server(false);
        let mut c =
            BootstrapClient::connect(&addr, JOB, SECRET, 0, Duration::from_secs(5)).unwrap();
        assert!(matches!(
            c.get("missing"),
            Err(BootstrapError::Refused { what: "get", .. })
        ));
        c.put("a", b"b").unwrap();
        assert_eq!(c.get("a").unwrap(), b"b");
    }

    #[test]
    fn get_times_out_and_poisons() {
        let (addr, _server) = tiny_server(true);
        let mut c =
            BootstrapClient::connect(&addr, JOB, SECRET, 0, Duration::from_secs(5)).unwrap();
        c.set_timeout(Duration::from_millis(100));
        let t0 = Instant::now();
        let err = c.get("never").unwrap_err();
        assert!(
            matches!(
                err,
                BootstrapError::Timeout {
                    what: "get",
                    timeout_ms: 100,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(matches!(
            c.put("a", b"b"),
            Err(BootstrapError::Poisoned { .. })
        ));
    }

    #[test]
    fn connect_retries_until_the_server_listens() {
        // Reserve a port, free it, and only listen on it a little later.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let server = thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let _: Request = proto::read_message(&mut s).unwrap();
            proto::write_message(&mut s, &Response::Ok).unwrap();
        });
        let c = BootstrapClient::connect(&addr, JOB, SECRET, 0, Duration::from_secs(10));
        server.join().unwrap();
        assert!(c.is_ok(), "{c:?}");
    }

    #[test]
    fn an_address_list_is_tried_in_order() {
        let (addr, server) = tiny_server(false);
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let list = format!("{closed}, {addr}");
        let mut c =
            BootstrapClient::connect(&list, JOB, SECRET, 0, Duration::from_secs(5)).unwrap();
        c.finalize().unwrap();
        server.join().unwrap();
        let e = BootstrapClient::connect(
            &format!("{closed},nonsense"),
            JOB,
            SECRET,
            0,
            Duration::from_millis(100),
        )
        .unwrap_err();
        assert!(matches!(e, BootstrapError::Connect { .. }), "{e:?}");
    }

    #[test]
    fn connect_gives_up_after_the_timeout() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let t0 = Instant::now();
        let err = BootstrapClient::connect(&addr, JOB, SECRET, 0, Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(err, BootstrapError::Connect { .. }), "{err:?}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(err.to_string().contains(&addr));
    }

    #[test]
    fn watch_reports_a_closed_launcher() {
        let (addr, _server) = tiny_server(false);
        let (tx, rx) = mpsc::channel();
        spawn_watch_with(&addr, JOB, SECRET, 0, move || tx.send(()).unwrap()).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("watch did not notice the close");
    }

    #[test]
    fn watch_setup_failure_is_an_error() {
        let (addr, _server) = tiny_server(false);
        let r = spawn_watch_with(&addr, JOB, "wrong", 0, || panic!("must not start"));
        assert!(matches!(r, Err(BootstrapError::Refused { .. })));
    }

    #[test]
    fn timeout_parsing() {
        assert_eq!(parse_timeout("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_timeout(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_timeout("0"), None);
        assert_eq!(parse_timeout("-1"), None);
        assert_eq!(parse_timeout("abc"), None);
        assert_eq!(parse_timeout("inf"), None);
    }
}
