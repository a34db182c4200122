//! Entry points of the fuzz targets (`fuzz/`, cargo-fuzz on nightly) and of the bounded
//! property tests that run the same checks on stable (`cargo test -p rankwire --lib
//! fuzz_entry`). Not part of the API.
//!
//! Each function takes arbitrary bytes, must never panic, and panics only when an
//! invariant of the parser is broken (that is the crash a fuzzer reports).

use crate::bootstrap::proto::{self, Request, Response};
use crate::wire::Frame;

/// The frame decoder ([`Frame::decode`]): garbage is an error or "need more bytes",
/// never a panic; a header that decodes re-encodes to the same frame and length, and
/// never claims more bytes than it was given.
pub fn frame_decoder(data: &[u8]) {
    match Frame::decode(data) {
        Ok(Some((frame, header_bytes, payload_len))) => {
            assert!(header_bytes <= data.len(), "header longer than the input");
            let mut again = Vec::new();
            frame.encode(payload_len, &mut again);
            let back = Frame::decode(&again).expect("re-encoded frame decodes");
            assert_eq!(back, Some((frame, again.len(), payload_len)));
        }
        Ok(None) => {}
        Err(e) => {
            // Every error renders (it ends up in a Transport error naming the peer).
            assert!(!e.to_string().is_empty());
        }
    }
}

/// The bootstrap protocol parser ([`proto::read_message`], as rwrun's server and the
/// rank's client use it): a length prefix over [`proto::MAX_MESSAGE_BYTES`] is refused
/// before anything is allocated; whatever decodes re-encodes to the same message.
pub fn bootstrap_parser(data: &[u8]) {
    if data.len() >= 4 {
        let n = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize;
        if n > proto::MAX_MESSAGE_BYTES {
            let e = proto::read_message::<_, Request>(&mut &data[..]).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
            return;
        }
    }
    if let Ok(req) = proto::read_message::<_, Request>(&mut &data[..]) {
        let mut buf = Vec::new();
        proto::write_message(&mut buf, &req).expect("a parsed request re-encodes");
        let back: Request = proto::read_message(&mut &buf[..]).expect("re-encoded request");
        assert_eq!(back, req);
    }
    if let Ok(resp) = proto::read_message::<_, Response>(&mut &data[..]) {
        let mut buf = Vec::new();
        proto::write_message(&mut buf, &resp).expect("a parsed response re-encodes");
        let back: Response = proto::read_message(&mut &buf[..]).expect("re-encoded response");
        assert_eq!(back, resp);
    }
    // The body decoder alone (rwrun's server reads the length itself).
    let _ = proto::decode_body::<Request>(data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Valid frames and requests to mutate, so the tests get past the magic and the
    /// length prefix (what a coverage-guided fuzzer finds by itself).
    fn seed_frames() -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for f in crate::wire::tests::all_frames() {
            let mut b = Vec::new();
            f.encode(100, &mut b);
            v.push(b);
        }
        v
    }

    fn seed_messages() -> Vec<Vec<u8>> {
        let reqs = [
            Request::Hello {
                job_id: "job".into(),
                secret: "00ff".into(),
                rank: 1,
            },
            Request::Put {
                key: "k".into(),
                value: vec![1, 2, 3],
            },
            Request::Fence,
        ];
        reqs.iter()
            .map(|r| {
                let mut b = Vec::new();
                proto::write_message(&mut b, r).unwrap();
                b
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn fuzz_frame_decoder_random(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            frame_decoder(&bytes);
        }

        #[test]
        fn fuzz_frame_decoder_mutated(
            which in 0usize..64,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            cut in any::<usize>(),
        ) {
            let seeds = seed_frames();
            let mut b = seeds[which % seeds.len()].clone();
            for (i, v) in edits {
                let i = i % b.len();
                b[i] = v;
            }
            let cut = cut % (b.len() + 1);
            frame_decoder(&b[..cut]);
            frame_decoder(&b);
        }

        #[test]
        fn fuzz_bootstrap_parser_random(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            bootstrap_parser(&bytes);
        }

        #[test]
        fn fuzz_bootstrap_parser_mutated(
            which in 0usize..3,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
        ) {
            let mut b = seed_messages()[which].clone();
            for (i, v) in edits {
                let i = i % b.len();
                b[i] = v;
            }
            let cut = cut % (b.len() + 1);
            bootstrap_parser(&b[..cut]);
            bootstrap_parser(&b);
        }
    }
}
