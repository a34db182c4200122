//! Sans-IO encoding and decoding of the PMI wire protocols, as Slurm's `pmi2` plugin
//! (slurmstepd, Slurm 22.05) and MPICH's simple PMI speak them. No sockets here: bytes
//! in, messages out, so every malformed input can be tested without a server.
//!
//! # The two framings
//! - **PMI-1** ("simple PMI"): one line per message, `cmd=<name> key=value key=value\n`,
//!   space-separated, both directions. The init handshake of *both* versions uses this
//!   form: `cmd=init pmi_version=2 pmi_subversion=0\n` → `cmd=response_to_init rc=0
//!   pmi_version=2 pmi_subversion=0\n`.
//! - **PMI-2**: 6 ASCII bytes holding the body length in decimal, left-justified and
//!   space-padded (`"51    "`, C's `%-6d`), then the body `cmd=<name>;key=value;…;`
//!   (every pair ends with `;`). Replies use the same framing.
//!
//! Values cannot contain the separator of their framing (`;` in PMI-2, space and newline
//! in PMI-1); [`escape_value`] maps arbitrary bytes onto a safe alphabet and
//! [`unescape_value`] reverses it.
//!
//! Sources: MPICH's PMI-2 wire protocol description (`src/pmi/pmi2/`, and hydra's
//! `pmiserv_common.c`: "PMI-2: length `cmd=xxx;attr=xxx;…;` where length is a
//! 6-character decimal number"), Slurm `src/plugins/mpi/pmi2/{client.c,pmi.h}`, and
//! frames captured from Slurm 22.05.8 (see the tests).

use std::fmt;

/// Bytes of the PMI-2 length header.
pub const PMI2_HEADER_BYTES: usize = 6;

/// Largest PMI-2 body the 6-digit header can announce.
pub const PMI2_MAX_BODY_BYTES: usize = 999_999;

/// Longest PMI-1 line accepted from a server, in bytes (newline included). Slurm's
/// answers are far below this (values are at most 1024 bytes); a longer line means the
/// peer is not speaking PMI-1.
pub const PMI1_MAX_LINE_BYTES: usize = 64 * 1024;

/// One PMI message (either framing): the command name and its attributes in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Value of the leading `cmd=` attribute (`fullinit-response`, `barrier_out`, ...).
    pub cmd: String,
    /// The other `key=value` attributes, in the order they came.
    pub attrs: Vec<(String, String)>,
}

impl Message {
    /// A message with command `cmd` and attributes `attrs`.
    pub fn new(cmd: &str, attrs: &[(&str, &str)]) -> Self {
        Message {
            cmd: cmd.to_string(),
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The value of attribute `key` (the first one, if repeated).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The `rc` attribute as an integer: `Some(0)` is success. `None` if absent or not
    /// a number.
    pub fn rc(&self) -> Option<i64> {
        self.get("rc").and_then(|v| v.trim().parse().ok())
    }
}

/// A byte sequence that is not valid PMI. The peer (the PMI server) misbehaved, or the
/// file descriptor is not a PMI connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The PMI-2 length header is not a decimal number (left-justified, space-padded).
    #[error("PMI-2 length header {header:?} is not a decimal number")]
    BadHeader {
        /// The 6 header bytes, lossily decoded.
        header: String,
    },
    /// A PMI-1 line longer than [`PMI1_MAX_LINE_BYTES`] without a newline.
    #[error("PMI-1 line longer than {PMI1_MAX_LINE_BYTES} bytes without a newline")]
    LineTooLong,
    /// The body is not UTF-8.
    #[error("PMI message is not UTF-8 text")]
    NotText,
    /// An attribute without `=`, or with an empty key.
    #[error("PMI attribute {pair:?} is not key=value")]
    BadPair {
        /// The offending piece.
        pair: String,
    },
    /// The message does not start with `cmd=`.
    #[error("PMI message {text:?} does not start with cmd=")]
    NoCommand {
        /// The message text (truncated to 120 bytes).
        text: String,
    },
    /// A value to send contains a byte the framing cannot carry (use [`escape_value`]).
    #[error("PMI value {value:?} contains a separator the framing cannot carry")]
    Unencodable {
        /// The value (truncated to 120 bytes).
        value: String,
    },
    /// A message to send is longer than the PMI-2 header can announce.
    #[error("PMI-2 message of {len} bytes exceeds {PMI2_MAX_BODY_BYTES}")]
    TooLong {
        /// Body length in bytes.
        len: usize,
    },
    /// An escaped value (see [`escape_value`]) with a bad `%XX` sequence.
    #[error("escaped PMI value {value:?} has a bad %XX sequence")]
    BadEscape {
        /// The value (truncated to 120 bytes).
        value: String,
    },
}

/// Encode `msg` as one PMI-2 frame (header + body).
///
/// # Errors
/// [`WireError::Unencodable`] if a key or value contains `;` or a key contains `=`;
/// [`WireError::TooLong`] above [`PMI2_MAX_BODY_BYTES`].
pub fn encode_pmi2(msg: &Message) -> Result<Vec<u8>, WireError> {
    let mut body = String::new();
    push_pair2(&mut body, "cmd", &msg.cmd)?;
    for (k, v) in &msg.attrs {
        push_pair2(&mut body, k, v)?;
    }
    if body.len() > PMI2_MAX_BODY_BYTES {
        return Err(WireError::TooLong { len: body.len() });
    }
    let mut out = format!("{:<width$}", body.len(), width = PMI2_HEADER_BYTES).into_bytes();
    out.extend_from_slice(body.as_bytes());
    Ok(out)
}

/// Decode one PMI-2 frame from the front of `buf`.
///
/// Returns `Ok(None)` if `buf` does not hold a whole frame yet (read more and call
/// again), or the message and the number of bytes it took.
///
/// # Errors
/// [`WireError`] for a bad header, non-UTF-8 body, a pair without `=` or a body that
/// does not start with `cmd=`. The stream cannot be resynchronised after an error.
pub fn decode_pmi2(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    if buf.len() < PMI2_HEADER_BYTES {
        return Ok(None);
    }
    let header = &buf[..PMI2_HEADER_BYTES];
    let bad = || WireError::BadHeader {
        header: String::from_utf8_lossy(header).into_owned(),
    };
    // Left-justified and space-padded; tolerate right-justified and zero-padded forms.
    let digits = std::str::from_utf8(header)
        .map_err(|_| bad())?
        .trim_matches(' ');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let len: usize = digits.parse().map_err(|_| bad())?;
    let total = PMI2_HEADER_BYTES + len;
    if buf.len() < total {
        return Ok(None);
    }
    let body =
        std::str::from_utf8(&buf[PMI2_HEADER_BYTES..total]).map_err(|_| WireError::NotText)?;
    let pairs = body.split(';').filter(|p| !p.is_empty());
    Ok(Some((into_message(body, pairs)?, total)))
}

/// Encode `msg` as one PMI-1 line (`cmd=… key=value …\n`).
///
/// # Errors
/// [`WireError::Unencodable`] if a key or value contains a space, a newline or (in a
/// key) `=`.
pub fn encode_pmi1(msg: &Message) -> Result<Vec<u8>, WireError> {
    let mut line = String::new();
    push_pair1(&mut line, "cmd", &msg.cmd)?;
    for (k, v) in &msg.attrs {
        line.push(' ');
        push_pair1(&mut line, k, v)?;
    }
    line.push('\n');
    Ok(line.into_bytes())
}

/// Decode one PMI-1 line from the front of `buf`.
///
/// Returns `Ok(None)` if no complete line is there yet, or the message and the number
/// of bytes it took (newline included).
///
/// # Errors
/// [`WireError::LineTooLong`] if [`PMI1_MAX_LINE_BYTES`] pass without a newline; other
/// [`WireError`]s as for [`decode_pmi2`].
pub fn decode_pmi1(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() >= PMI1_MAX_LINE_BYTES {
            return Err(WireError::LineTooLong);
        }
        return Ok(None);
    };
    if nl >= PMI1_MAX_LINE_BYTES {
        return Err(WireError::LineTooLong);
    }
    let line = std::str::from_utf8(&buf[..nl]).map_err(|_| WireError::NotText)?;
    let line = line.strip_suffix('\r').unwrap_or(line);
    let pairs = line.split([' ', '\t']).filter(|p| !p.is_empty());
    Ok(Some((into_message(line, pairs)?, nl + 1)))
}

/// Map arbitrary bytes onto characters both framings carry: printable ASCII except
/// space, `%`, `;` and `=` is kept, every other byte becomes `%XX` (upper-case hex).
/// The result is at most 3 times as long as `value`.
pub fn escape_value(value: &[u8]) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value {
        if (0x21..=0x7e).contains(&b) && !matches!(b, b'%' | b';' | b'=') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reverse [`escape_value`].
///
/// # Errors
/// [`WireError::BadEscape`] for a `%` not followed by two hex digits.
pub fn unescape_value(s: &str) -> Result<Vec<u8>, WireError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(b) => out.push(b),
                None => {
                    return Err(WireError::BadEscape { value: truncate(s) });
                }
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Parse Slurm's `PMI_process_mapping` job attribute, `(vector,(start,nodes,ranks),…)`:
/// each block says that `nodes` consecutive nodes starting at node index `start` hold
/// `ranks` consecutive ranks each, blocks filling ranks in order. Returns the node index
/// of every rank `0..size`.
///
/// Returns `None` if the text is not in that form or does not cover exactly `size`
/// ranks (the attribute is then ignored). Source: MPICH `src/util/mpir_nodemap.c`
/// (the format), Slurm `src/plugins/mpi/pmi2/setup.c` (what slurmstepd sends).
pub fn parse_process_mapping(text: &str, size: u32) -> Option<Vec<u32>> {
    let inner = text
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?
        .trim()
        .strip_prefix("vector")?;
    let mut nodes = Vec::with_capacity(size as usize);
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        rest = rest.strip_prefix(',')?.trim_start();
        let block = rest.strip_prefix('(')?;
        let end = block.find(')')?;
        let nums: Vec<u32> = block[..end]
            .split(',')
            .map(|n| n.trim().parse().ok())
            .collect::<Option<_>>()?;
        let [start, count, per] = nums[..] else {
            return None;
        };
        for node in start..start.checked_add(count)? {
            for _ in 0..per {
                if nodes.len() >= size as usize {
                    return None;
                }
                nodes.push(node);
            }
        }
        rest = block[end + 1..].trim_start();
    }
    (nodes.len() == size as usize).then_some(nodes)
}

// Build a message from its `key=value` pieces; the first must be `cmd`.
fn into_message<'a>(
    text: &str,
    mut pairs: impl Iterator<Item = &'a str>,
) -> Result<Message, WireError> {
    let split = |p: &str| -> Result<(String, String), WireError> {
        match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(WireError::BadPair { pair: truncate(p) }),
        }
    };
    let cmd = match pairs.next().and_then(|p| p.strip_prefix("cmd=")) {
        Some(v) if !v.is_empty() => v.to_string(),
        _ => {
            return Err(WireError::NoCommand {
                text: truncate(text),
            });
        }
    };
    let attrs = pairs.map(split).collect::<Result<_, _>>()?;
    Ok(Message { cmd, attrs })
}

fn push_pair2(out: &mut String, k: &str, v: &str) -> Result<(), WireError> {
    if k.is_empty() || k.contains([';', '=']) {
        return Err(WireError::Unencodable { value: truncate(k) });
    }
    if v.contains(';') {
        return Err(WireError::Unencodable { value: truncate(v) });
    }
    out.push_str(k);
    out.push('=');
    out.push_str(v);
    out.push(';');
    Ok(())
}

fn push_pair1(out: &mut String, k: &str, v: &str) -> Result<(), WireError> {
    let bad = |s: &str| s.contains([' ', '\t', '\n', '\r']);
    if k.is_empty() || bad(k) || k.contains('=') {
        return Err(WireError::Unencodable { value: truncate(k) });
    }
    if bad(v) {
        return Err(WireError::Unencodable { value: truncate(v) });
    }
    out.push_str(k);
    out.push('=');
    out.push_str(v);
    Ok(())
}

fn truncate(s: &str) -> String {
    let mut end = s.len().min(120);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cmd={}", self.cmd)?;
        for (k, v) in &self.attrs {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Frames captured from Slurm 22.05.8 (`srun --mpi=pmi2`), rank 0 of 3.
    const FULLINIT_REQ: &[u8] = b"51    cmd=fullinit;pmijobid=6.0;pmirank=0;threaded=FALSE;";
    const FULLINIT_RESP: &[u8] = b"114   cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=3;appnum=-1;debugged=FALSE;pmiverbose=FALSE;";

    #[test]
    fn pmi2_encodes_like_slurm_clients() {
        let m = Message::new(
            "fullinit",
            &[("pmijobid", "6.0"), ("pmirank", "0"), ("threaded", "FALSE")],
        );
        assert_eq!(encode_pmi2(&m).unwrap(), FULLINIT_REQ);
        let fence = encode_pmi2(&Message::new("kvs-fence", &[])).unwrap();
        assert_eq!(fence, b"14    cmd=kvs-fence;");
    }

    #[test]
    fn pmi2_decodes_slurm_answers() {
        let (m, used) = decode_pmi2(FULLINIT_RESP).unwrap().unwrap();
        assert_eq!(used, FULLINIT_RESP.len());
        assert_eq!(m.cmd, "fullinit-response");
        assert_eq!(m.rc(), Some(0));
        assert_eq!(m.get("rank"), Some("0"));
        assert_eq!(m.get("size"), Some("3"));
        assert_eq!(m.get("appnum"), Some("-1"));
        let (m, _) = decode_pmi2(
            b"68    cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,3));",
        )
        .unwrap()
        .unwrap();
        assert_eq!(m.get("value"), Some("(vector,(0,1,3))"));
        // A value with '=' in it splits at the first '='.
        let (m, _) = decode_pmi2(b"14    cmd=x;v=a=b=c;").unwrap().unwrap();
        assert_eq!(m.get("v"), Some("a=b=c"));
    }

    #[test]
    fn pmi2_partial_frames_wait_for_more() {
        for cut in 0..FULLINIT_RESP.len() {
            assert_eq!(
                decode_pmi2(&FULLINIT_RESP[..cut]).unwrap(),
                None,
                "cut {cut}"
            );
        }
        // Two frames back to back: the first is taken, the rest left.
        let mut two = FULLINIT_REQ.to_vec();
        two.extend_from_slice(b"14    cmd=kvs-fence;");
        let (m, used) = decode_pmi2(&two).unwrap().unwrap();
        assert_eq!(m.cmd, "fullinit");
        let (m, used2) = decode_pmi2(&two[used..]).unwrap().unwrap();
        assert_eq!((m.cmd.as_str(), used + used2), ("kvs-fence", two.len()));
    }

    #[test]
    fn pmi2_tolerates_other_paddings_and_missing_last_semicolon() {
        let (m, _) = decode_pmi2(b"000013cmd=kvs-fence").unwrap().unwrap();
        assert_eq!(m.cmd, "kvs-fence");
        let (m, _) = decode_pmi2(b"    13cmd=kvs-fence").unwrap().unwrap();
        assert_eq!(m.cmd, "kvs-fence");
    }

    #[test]
    fn pmi2_malformed_input_is_an_error() {
        let cases: &[(&[u8], &str)] = &[
            (b"abcdefcmd=x;", "length header"),
            (b"-1    cmd=x;", "length header"),
            (b"1 2   cmd=x;", "length header"),
            (b"      cmd=x;", "length header"),
            (b"\xff\xfe    ", "length header"),
            (b"5     cmd=\xff;", "UTF-8"),
            (b"6     a=b;c;", "does not start with cmd="),
            (b"10    key=value;", "does not start with cmd="),
            (b"4     cmd=", "does not start with cmd="),
            (b"14    cmd=x;novalue;", "not key=value"),
            (b"13    cmd=x;=empty;", "not key=value"),
            (b"0     ", "does not start with cmd="),
        ];
        for (input, want) in cases {
            let e = decode_pmi2(input).unwrap_err();
            assert!(e.to_string().contains(want), "{input:?}: {e}");
        }
    }

    #[test]
    fn pmi2_refuses_to_encode_separators() {
        let e = encode_pmi2(&Message::new("kvs-put", &[("key", "a;b")])).unwrap_err();
        assert!(matches!(e, WireError::Unencodable { .. }));
        let e = encode_pmi2(&Message::new("kvs-put", &[("k=", "v")])).unwrap_err();
        assert!(matches!(e, WireError::Unencodable { .. }));
        let big = "x".repeat(PMI2_MAX_BODY_BYTES);
        let e = encode_pmi2(&Message::new("kvs-put", &[("value", &big)])).unwrap_err();
        assert!(matches!(e, WireError::TooLong { .. }));
    }

    #[test]
    fn pmi2_round_trip() {
        let m = Message::new(
            "kvs-get",
            &[("jobid", "18.0"), ("srcid", "-1"), ("key", "k")],
        );
        let enc = encode_pmi2(&m).unwrap();
        assert_eq!(&enc[..6], b"38    ");
        assert_eq!(decode_pmi2(&enc).unwrap(), Some((m, enc.len())));
    }

    #[test]
    fn pmi1_lines() {
        let init = Message::new("init", &[("pmi_version", "2"), ("pmi_subversion", "0")]);
        assert_eq!(
            encode_pmi1(&init).unwrap(),
            b"cmd=init pmi_version=2 pmi_subversion=0\n"
        );
        let resp = b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\nextra";
        let (m, used) = decode_pmi1(resp).unwrap().unwrap();
        assert_eq!(used, resp.len() - 5);
        assert_eq!(m.cmd, "response_to_init");
        assert_eq!((m.rc(), m.get("pmi_version")), (Some(0), Some("2")));
        let (m, _) = decode_pmi1(b"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n")
            .unwrap()
            .unwrap();
        assert_eq!(m.get("vallen_max"), Some("1024"));
        // Double spaces and CRLF are tolerated.
        let (m, _) = decode_pmi1(b"cmd=barrier_out  rc=0\r\n").unwrap().unwrap();
        assert_eq!((m.cmd.as_str(), m.rc()), ("barrier_out", Some(0)));
        assert_eq!(decode_pmi1(b"cmd=barrier_out rc=0").unwrap(), None);
    }

    #[test]
    fn pmi1_malformed_input_is_an_error() {
        assert_eq!(
            decode_pmi1(&vec![b'x'; PMI1_MAX_LINE_BYTES]).unwrap_err(),
            WireError::LineTooLong
        );
        assert!(matches!(
            decode_pmi1(b"rc=0 cmd=x\n"),
            Err(WireError::NoCommand { .. })
        ));
        assert!(matches!(
            decode_pmi1(b"\n"),
            Err(WireError::NoCommand { .. })
        ));
        assert!(matches!(
            decode_pmi1(b"cmd=x rc\n"),
            Err(WireError::BadPair { .. })
        ));
        assert!(matches!(
            decode_pmi1(b"cmd=x r\xffc=0\n"),
            Err(WireError::NotText)
        ));
        let e = encode_pmi1(&Message::new("put", &[("value", "a b")])).unwrap_err();
        assert!(matches!(e, WireError::Unencodable { .. }));
        let e = encode_pmi1(&Message::new("put", &[("value", "a\nb")])).unwrap_err();
        assert!(matches!(e, WireError::Unencodable { .. }));
    }

    #[test]
    fn escaping_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255u8).collect();
        let esc = escape_value(&all);
        assert!(!esc.contains([' ', ';', '=', '\n']));
        assert_eq!(unescape_value(&esc).unwrap(), all);
        assert_eq!(escape_value(b"tcp://10.0.0.1:5"), "tcp://10.0.0.1:5");
        assert_eq!(escape_value(b"a b;c=d%"), "a%20b%3Bc%3Dd%25");
        for bad in ["%", "%4", "%zz", "ab%g0"] {
            assert!(
                matches!(unescape_value(bad), Err(WireError::BadEscape { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn process_mappings() {
        assert_eq!(
            parse_process_mapping("(vector,(0,1,3))", 3),
            Some(vec![0, 0, 0])
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,2,2))", 4),
            Some(vec![0, 0, 1, 1])
        );
        assert_eq!(
            parse_process_mapping(" (vector, (0,2,2), (2,1,1)) ", 5),
            Some(vec![0, 0, 1, 1, 2])
        );
        assert_eq!(parse_process_mapping("(vector,(0,2,2))", 3), None);
        assert_eq!(parse_process_mapping("(vector,(0,2,2))", 5), None);
        for bad in [
            "",
            "vector",
            "(vector,(0,1))",
            "(vector,(a,1,1))",
            "(list,(0,1,1))",
            "(vector,(0,1,1)",
        ] {
            assert_eq!(parse_process_mapping(bad, 1), None, "{bad}");
        }
        assert_eq!(parse_process_mapping("(vector,(0,4294967295,1))", 1), None);
    }
}
