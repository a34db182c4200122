//! The self transport: frames a rank sends to itself, kept in an in-process queue.
//!
//! Reach is [`Reach::Process`]. It copies host payloads only; device memory never goes
//! through it (scenario B009: a device pointer must never reach a host-only path), the
//! core routes device-memory self-sends through the GPU path instead.

use std::collections::VecDeque;

use crate::{Caps, Event, KindCaps, PeerInfo, Reach, SendOutcome, Transport, TransportError};

/// Largest payload of one self frame, in bytes (the caps' `max_frame_payload_bytes`;
/// larger sends are refused like on every transport, so the declared limit is exact).
const SELF_MAX_FRAME_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;

/// Loopback to the calling rank.
#[derive(Debug)]
pub struct SelfTransport {
    rank: u32,
    caps: Caps,
    queue: VecDeque<(Vec<u8>, Vec<u8>)>,
}

impl SelfTransport {
    /// A self transport for world rank `rank`.
    pub fn new(rank: u32) -> Self {
        SelfTransport {
            rank,
            caps: Caps {
                name: "self",
                reach: Reach::Process,
                host: Some(KindCaps {
                    send: true,
                    put: false,
                    get: false,
                    register: false,
                    eager_limit_bytes: 64 * 1024,
                    max_frame_payload_bytes: SELF_MAX_FRAME_PAYLOAD_BYTES,
                    max_message_bytes: u64::MAX,
                    needs_registration: false,
                }),
                cuda: None,
                cuda_managed: None,
            },
            queue: VecDeque::new(),
        }
    }
}

impl Transport for SelfTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn can_reach(&self, peer: &PeerInfo) -> Result<(), String> {
        if peer.rank == self.rank {
            Ok(())
        } else {
            Err("self: peer is another process".into())
        }
    }

    fn send(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendOutcome, TransportError> {
        if peer != self.rank {
            return Err(TransportError::NoSuchPeer {
                transport: "self",
                peer,
            });
        }
        if header.len() > crate::MAX_HEADER_BYTES {
            return Err(TransportError::Unsupported {
                transport: "self",
                what: "a frame header longer than MAX_HEADER_BYTES",
            });
        }
        if payload.len() > SELF_MAX_FRAME_PAYLOAD_BYTES {
            return Err(TransportError::Unsupported {
                transport: "self",
                what: "a frame payload longer than max_frame_payload_bytes (16 MiB)",
            });
        }
        self.queue.push_back((header.to_vec(), payload.to_vec()));
        Ok(SendOutcome::Sent)
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> bool {
        let any = !self.queue.is_empty();
        while let Some((header, payload)) = self.queue.pop_front() {
            events.push(Event::Recv {
                peer: self.rank,
                header,
                payload,
            });
        }
        any
    }

    fn is_flushed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_back_in_order() {
        let mut t = SelfTransport::new(3);
        assert_eq!(t.send(3, b"h1", b"p1").unwrap(), SendOutcome::Sent);
        assert_eq!(t.send(3, b"h2", b"").unwrap(), SendOutcome::Sent);
        assert!(t.send(2, b"h", b"").is_err());
        let big = vec![0u8; SELF_MAX_FRAME_PAYLOAD_BYTES + 1];
        assert!(matches!(
            t.send(3, b"h", &big),
            Err(TransportError::Unsupported { .. })
        ));
        let mut ev = Vec::new();
        assert!(t.poll(&mut ev));
        let got: Vec<_> = ev
            .into_iter()
            .map(|e| match e {
                Event::Recv {
                    peer,
                    header,
                    payload,
                } => (peer, header, payload),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (3, b"h1".to_vec(), b"p1".to_vec()),
                (3, b"h2".to_vec(), vec![])
            ]
        );
        let mut ev = Vec::new();
        assert!(!t.poll(&mut ev));
    }
}
