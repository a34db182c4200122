//! The client against in-process fake servers on a socketpair: whole conversations in
//! both versions, the PMI-1 fallback, and servers that misbehave (garbage, silence,
//! closing, refusing), each of which must give an error, never a hang or a panic.

use super::*;
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::thread;

const T: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Serves what Slurm's pmi2 plugin serves (both versions, chosen by the init line).
    Slurm,
    /// Knows only PMI-1: answers a version-2 init with its own version and rc=-1.
    Pmi1Only,
}

// A one-rank server speaking the real framings; answers like slurmstepd (texts from the
// transcripts in the Slurm notes). Returns the requests it saw, in order.
fn server(mode: Mode, size: u32) -> (OwnedFd, thread::JoinHandle<Vec<String>>) {
    let (a, b) = UnixStream::pair().unwrap();
    let h = thread::spawn(move || {
        let mut s = b;
        let mut seen = Vec::new();
        let mut kv: HashMap<String, String> = HashMap::new();
        let mut buf = Vec::new();
        let mut v2 = false;
        let mut after_init = false;
        loop {
            let decoded = if v2 && after_init {
                wire::decode_pmi2(&buf).unwrap()
            } else {
                wire::decode_pmi1(&buf).unwrap()
            };
            let Some((m, used)) = decoded else {
                let mut chunk = [0u8; 4096];
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => return seen,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                continue;
            };
            buf.drain(..used);
            seen.push(m.to_string());
            let get = |k: &str| m.get(k).unwrap_or("").to_string();
            let reply = |cmd: &str, attrs: &[(&str, &str)]| {
                let m = Message::new(cmd, attrs);
                if v2 && after_init {
                    wire::encode_pmi2(&m).unwrap()
                } else {
                    wire::encode_pmi1(&m).unwrap()
                }
            };
            let sz = size.to_string();
            let mut now_v2 = None;
            let out = match m.cmd.as_str() {
                "init" => {
                    let want = get("pmi_version");
                    if want == "2" && mode == Mode::Pmi1Only {
                        reply(
                            "response_to_init",
                            &[("rc", "-1"), ("pmi_version", "1"), ("pmi_subversion", "1")],
                        )
                    } else {
                        now_v2 = Some(want == "2");
                        reply(
                            "response_to_init",
                            &[
                                ("rc", "0"),
                                ("pmi_version", &want),
                                ("pmi_subversion", &get("pmi_subversion")),
                            ],
                        )
                    }
                }
                "fullinit" => reply(
                    "fullinit-response",
                    &[
                        ("rc", "0"),
                        ("pmi-version", "2"),
                        ("pmi-subversion", "0"),
                        ("rank", "0"),
                        ("size", &sz),
                        ("appnum", "-1"),
                    ],
                ),
                "job-getid" => reply("job-getid-response", &[("rc", "0"), ("jobid", "6.0")]),
                "info-getjobattr" => reply(
                    "info-getjobattr-response",
                    &[
                        ("rc", "0"),
                        ("found", "TRUE"),
                        ("value", &format!("(vector,(0,1,{size}))")),
                    ],
                ),
                "kvs-put" => {
                    kv.insert(get("key"), get("value"));
                    reply("kvs-put-response", &[("rc", "0")])
                }
                "kvs-fence" => reply("kvs-fence-response", &[("rc", "0")]),
                "kvs-get" => match kv.get(&get("key")) {
                    Some(v) => reply(
                        "kvs-get-response",
                        &[("rc", "0"), ("found", "TRUE"), ("value", v)],
                    ),
                    None => reply("kvs-get-response", &[("rc", "0"), ("found", "FALSE")]),
                },
                "get_maxes" => reply(
                    "maxes",
                    &[
                        ("rc", "0"),
                        ("kvsname_max", "256"),
                        ("keylen_max", "64"),
                        ("vallen_max", "100"),
                    ],
                ),
                "get_my_kvsname" => reply("my_kvsname", &[("rc", "0"), ("kvsname", "7.0")]),
                "put" => {
                    assert_eq!(get("kvsname"), "7.0");
                    kv.insert(get("key"), get("value"));
                    reply("put_result", &[("rc", "0")])
                }
                "barrier_in" => reply("barrier_out", &[("rc", "0")]),
                "get" => match kv.get(&get("key")) {
                    Some(v) => reply("get_result", &[("rc", "0"), ("value", v)]),
                    None => reply("get_result", &[("rc", "-1"), ("msg", "key_not_found")]),
                },
                "finalize" if v2 => reply("finalize-response", &[("rc", "0")]),
                "finalize" => reply("finalize_ack", &[("rc", "0")]),
                "abort" => return seen,
                other => panic!("fake server: unexpected {other}"),
            };
            if let Some(v) = now_v2 {
                v2 = v;
                after_init = true;
            }
            if s.write_all(&out).is_err() {
                return seen;
            }
        }
    });
    (OwnedFd::from(a), h)
}

// A server that answers the first message with `answer` (raw bytes), then keeps the
// connection open (or closes it with `close`) without saying more.
fn scripted(answer: &'static [u8], close: bool) -> (OwnedFd, thread::JoinHandle<()>) {
    let (a, mut b) = UnixStream::pair().unwrap();
    let h = thread::spawn(move || {
        let mut chunk = [0u8; 256];
        let _ = b.read(&mut chunk);
        let _ = b.write_all(answer);
        if !close {
            // Hold the socket until the client gives up (it closes its end).
            while matches!(b.read(&mut chunk), Ok(n) if n > 0) {}
        }
    });
    (OwnedFd::from(a), h)
}

// A PMI-2 frame around `body`, with Slurm's `%-6d` header.
fn frame(body: &str) -> Vec<u8> {
    format!("{:<6}{body}", body.len()).into_bytes()
}

fn all_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 256) as u8).collect()
}

#[test]
fn pmi2_conversation() {
    let (fd, srv) = server(Mode::Slurm, 3);
    let mut c =
        PmiClient::handshake(fd, PmiVersion::V2, Some(0), Some(3), Some("6.0".into()), T).unwrap();
    assert_eq!((c.version(), c.rank(), c.size()), (PmiVersion::V2, 0, 3));
    assert_eq!(c.node_of_rank(), Some(&[0, 0, 0][..]));
    c.put("node-0", b"host/boot/net:[4026531840]").unwrap();
    let big = all_bytes(5000);
    c.put("tcp-addr-0", &big).unwrap();
    c.put("empty", b"").unwrap();
    c.fence().unwrap();
    assert_eq!(c.get("node-0").unwrap(), b"host/boot/net:[4026531840]");
    assert_eq!(c.get("tcp-addr-0").unwrap(), big);
    assert_eq!(c.get("empty").unwrap(), b"");
    let e = c.get("no-such-key").unwrap_err();
    assert!(matches!(e, PmiError::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("no-such-key"), "{e}");
    // A missing key is an answer, not a broken connection.
    c.fence().unwrap();
    c.finalize().unwrap();
    c.finalize().unwrap();
    drop(c);
    let seen = srv.join().unwrap();
    assert_eq!(seen[0], "cmd=init pmi_version=2 pmi_subversion=0");
    assert_eq!(
        seen[1],
        "cmd=fullinit pmijobid=6.0 pmirank=0 threaded=FALSE"
    );
    assert_eq!(seen[2], "cmd=job-getid");
    assert!(
        seen.iter()
            .any(|s| s.starts_with("cmd=kvs-put key=tcp-addr-0~4 "))
    );
    assert_eq!(seen.last().unwrap(), "cmd=finalize");
}

#[test]
fn pmi1_conversation_when_asked() {
    let (fd, srv) = server(Mode::Slurm, 2);
    let mut c = PmiClient::handshake(fd, PmiVersion::V1, Some(1), Some(2), None, T).unwrap();
    assert_eq!((c.version(), c.rank(), c.size()), (PmiVersion::V1, 1, 2));
    assert_eq!(c.node_of_rank(), None);
    // vallen_max=100 from get_maxes: this value needs many pieces.
    let big = all_bytes(1000);
    c.put("k", &big).unwrap();
    c.fence().unwrap();
    assert_eq!(c.get("k").unwrap(), big);
    assert!(matches!(c.get("nope"), Err(PmiError::NotFound { .. })));
    c.finalize().unwrap();
    drop(c);
    let seen = srv.join().unwrap();
    assert_eq!(seen[0], "cmd=init pmi_version=1 pmi_subversion=1");
    assert_eq!(seen[1], "cmd=get_maxes");
    assert!(seen.contains(&"cmd=barrier_in".to_string()));
}

#[test]
fn pmi1_fallback_when_only_pmi1_is_offered() {
    let (fd, srv) = server(Mode::Pmi1Only, 4);
    let mut c =
        PmiClient::handshake(fd, PmiVersion::V2, Some(3), Some(4), Some("9.0".into()), T).unwrap();
    assert_eq!((c.version(), c.rank(), c.size()), (PmiVersion::V1, 3, 4));
    c.put("a", b"b c;d").unwrap();
    c.fence().unwrap();
    assert_eq!(c.get("a").unwrap(), b"b c;d");
    c.finalize().unwrap();
    drop(c);
    let seen = srv.join().unwrap();
    assert_eq!(seen[0], "cmd=init pmi_version=2 pmi_subversion=0");
    assert_eq!(seen[1], "cmd=init pmi_version=1 pmi_subversion=1");
}

#[test]
fn pmi1_needs_rank_and_size_from_the_environment() {
    let (fd, _srv) = server(Mode::Slurm, 2);
    let e = PmiClient::handshake(fd, PmiVersion::V1, None, Some(2), None, T).unwrap_err();
    assert!(e.to_string().contains("PMI_RANK"), "{e}");
    let (fd, _srv) = server(Mode::Slurm, 2);
    let e = PmiClient::handshake(fd, PmiVersion::V1, Some(2), Some(2), None, T).unwrap_err();
    assert!(e.to_string().contains("not below PMI_SIZE=2"), "{e}");
}

#[test]
fn abort_is_sent_without_waiting_for_an_answer() {
    let (fd, srv) = server(Mode::Slurm, 1);
    let mut c = PmiClient::handshake(fd, PmiVersion::V2, Some(0), Some(1), None, T).unwrap();
    c.abort(3, "rank 0; gave up = yes").unwrap();
    let seen = srv.join().unwrap();
    assert_eq!(
        seen.last().unwrap(),
        "cmd=abort isworld=TRUE msg=rank%200%3B%20gave%20up%20%3D%20yes exitcode=3"
    );
}

#[test]
fn garbage_answers_are_errors_and_poison_the_client() {
    let cases: &[(&[u8], &str)] = &[
        (
            b"cmd=response_to_init rc=0 pmi_version=2\n\x00\x01garbage",
            "length header",
        ),
        (b"hello world\n", "does not start with cmd="),
        (b"cmd=something_else rc=0\n", "expected response_to_init"),
        (b"cmd=response_to_init pmi_version=3\n", "no valid rc"),
        (
            b"cmd=response_to_init rc=-1 pmi_version=2 msg=busy\n",
            "refused (rc=-1): busy",
        ),
    ];
    for &(answer, want) in cases {
        let (a, b) = UnixStream::pair().unwrap();
        let srv = thread::spawn(move || {
            let mut b = b;
            let mut chunk = [0u8; 256];
            let _ = b.read(&mut chunk);
            let _ = b.write_all(answer);
            // Answer the fullinit (if any) with the rest, then hold the socket.
            while matches!(b.read(&mut chunk), Ok(n) if n > 0) {}
        });
        let t0 = Instant::now();
        let e = PmiClient::handshake(
            OwnedFd::from(a),
            PmiVersion::V2,
            Some(0),
            Some(1),
            None,
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(e.to_string().contains(want), "{answer:?}: {e}");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{answer:?} took {:?}",
            t0.elapsed()
        );
        srv.join().unwrap();
    }
}

#[test]
fn a_silent_server_times_out() {
    let (fd, srv) = scripted(b"", false);
    let t0 = Instant::now();
    let e = PmiClient::handshake(
        fd,
        PmiVersion::V2,
        Some(0),
        Some(1),
        None,
        Duration::from_millis(200),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            PmiError::Timeout {
                what: "init",
                timeout_ms: 200,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("RANKWIRE_BOOTSTRAP_TIMEOUT"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    srv.join().unwrap();
}

#[test]
fn a_closing_server_is_an_io_error() {
    let (fd, srv) = scripted(b"cmd=respon", true);
    let e = PmiClient::handshake(fd, PmiVersion::V2, Some(0), Some(1), None, T).unwrap_err();
    match &e {
        PmiError::Io {
            what: "init",
            source,
            ..
        } => {
            assert_eq!(source.kind(), io::ErrorKind::UnexpectedEof)
        }
        other => panic!("expected Io, got {other:?}"),
    }
    srv.join().unwrap();
}

#[test]
fn timeouts_and_bad_frames_after_init_poison_the_client() {
    // Real handshake, then a fence nobody answers.
    let (a, b) = UnixStream::pair().unwrap();
    let srv = thread::spawn(move || {
        let mut b = b;
        let mut chunk = [0u8; 512];
        let _ = b.read(&mut chunk);
        b.write_all(b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
            .unwrap();
        let _ = b.read(&mut chunk);
        b.write_all(&frame(
            "cmd=fullinit-response;rc=0;rank=0;size=2;appnum=-1;xx=1;",
        ))
        .unwrap();
        let _ = b.read(&mut chunk);
        b.write_all(&frame("cmd=job-getid-response;rc=0;jobid=6.0;"))
            .unwrap();
        let _ = b.read(&mut chunk);
        b.write_all(&frame("cmd=info-getjobattr-response;rc=0;found=FALSE;"))
            .unwrap();
        // kvs-fence: never answered.
        while matches!(b.read(&mut chunk), Ok(n) if n > 0) {}
    });
    let mut c =
        PmiClient::handshake(OwnedFd::from(a), PmiVersion::V2, Some(0), Some(2), None, T).unwrap();
    assert_eq!(c.node_of_rank(), None);
    c.set_timeout(Duration::from_millis(150));
    let e = c.fence().unwrap_err();
    assert!(
        matches!(
            e,
            PmiError::Timeout {
                what: "kvs-fence",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(matches!(c.put("k", b"v"), Err(PmiError::Poisoned)));
    assert!(matches!(c.get("k"), Err(PmiError::Poisoned)));
    drop(c);
    srv.join().unwrap();
}

#[test]
fn size_and_rank_from_fullinit_are_checked() {
    let (a, b) = UnixStream::pair().unwrap();
    let srv = thread::spawn(move || {
        let mut b = b;
        let mut chunk = [0u8; 512];
        let _ = b.read(&mut chunk);
        b.write_all(b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
            .unwrap();
        let _ = b.read(&mut chunk);
        b.write_all(&frame("cmd=fullinit-response;rc=0;rank=2;size=2;"))
            .unwrap();
        while matches!(b.read(&mut chunk), Ok(n) if n > 0) {}
    });
    let e = PmiClient::handshake(OwnedFd::from(a), PmiVersion::V2, Some(0), Some(2), None, T)
        .unwrap_err();
    assert!(e.to_string().contains("rank 2 is not below size 2"), "{e}");
    srv.join().unwrap();
}

#[test]
fn stored_values_in_a_foreign_encoding_are_malformed() {
    let (fd, srv) = server(Mode::Slurm, 1);
    let mut c = PmiClient::handshake(fd, PmiVersion::V2, Some(0), Some(1), None, T).unwrap();
    c.put_raw("foreign", "no-count-prefix").unwrap();
    c.put_raw("badcount", "0:x").unwrap();
    c.put_raw("badesc", "1:%zz").unwrap();
    c.fence().unwrap();
    for k in ["foreign", "badcount", "badesc"] {
        assert!(matches!(c.get(k), Err(PmiError::Malformed { .. })), "{k}");
    }
    c.finalize().unwrap();
    drop(c);
    srv.join().unwrap();
}

#[test]
fn bad_keys_are_refused_locally() {
    let (fd, srv) = server(Mode::Slurm, 1);
    let mut c = PmiClient::handshake(fd, PmiVersion::V2, Some(0), Some(1), None, T).unwrap();
    for k in ["", "a b", "a;b", "a=b", "ü", &"k".repeat(57)] {
        assert!(
            matches!(c.put(k, b"v"), Err(PmiError::BadKey { .. })),
            "{k:?}"
        );
    }
    // Still usable: those never reached the server.
    c.put("fine-key_1.x", b"v").unwrap();
    c.finalize().unwrap();
    drop(c);
    srv.join().unwrap();
}
