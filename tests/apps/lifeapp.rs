//! rw-lifeapp: programs in the style README shows, `fn main() -> rankwire::Result<()>`
//! with `?`, that end on an error or a panic while other ranks wait for them (issue 17,
//! cases 1-3). `rw-lifeapp <scenario>`; run with 2 ranks.

use std::time::Duration;

fn main() -> rankwire::Result<()> {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let universe = rankwire::init()?;
    let world = universe.world();
    let me = world.rank();
    match scenario.as_str() {
        // Rank 0 sends to rank 2 of 2 ranks and returns the error; rank 1 finalizes
        // (and so waits for rank 0 in the final fence).
        "bad_dest" => {
            if me == 0 {
                world.send(&[1u8], 2, 0)?;
            }
        }
        // The same while rank 1 waits in a receive from rank 0.
        "bad_dest_recv" => {
            if me == 0 {
                world.send(&[1u8], 2, 0)?;
            } else {
                let mut b = [0u8; 1];
                world.recv(&mut b, 0, 0)?;
            }
        }
        // Rank 0 blocks in a large send (rendezvous) that nobody receives: rank 1
        // returns an error instead. (A `Request` of such a send dropped by `?` waits for
        // it, since the receiver may still read its buffer; see the report of issue 17.)
        "big_unreceived" => {
            if me == 0 {
                let big = vec![7u8; 8 << 20];
                world.send(&big, 1, 5)?;
            } else {
                std::thread::sleep(Duration::from_millis(200));
                world.send(&[1u8], 2, 0)?;
            }
        }
        // The ranks pass different counts to an allreduce and return its collective
        // error with `?` (each rank sees the other's vector of the wrong length).
        "allreduce_mismatch" => {
            let n = 4 + me;
            let mut out = vec![0i64; n];
            world.allreduce(&vec![1i64; n], &mut out, rankwire::Op::Sum)?;
        }
        // Rank 1 panics while rank 0 waits in a receive from it.
        "panic" => {
            if me == 1 {
                std::thread::sleep(Duration::from_millis(100));
                panic!("lifeapp panics on purpose");
            }
            let mut b = [0u8; 1];
            world.recv(&mut b, 1, 0)?;
        }
        // Rank 1 leaves with a Usage error (tag -1) while rank 0 waits for it (run with
        // RANKWIRE_WATCHDOG=5: the job must end on rank 1's error, not the watchdog).
        "usage_leaves" => {
            if me == 1 {
                world.send(&[1u8], 0, -1)?;
            }
            let mut b = [0u8; 1];
            world.recv(&mut b, 1, 0)?;
        }
        // Rank 0 returns a Usage error with `?` while a large isend is pending: the
        // request's drop waits (the receiver may still read the buffer), rank 1 waits in
        // a receive nobody sends. Run with RANKWIRE_WATCHDOG: its report must carry rank
        // 0's own error, not only blame a peer.
        "isend_dropped" => {
            if me == 0 {
                let big = vec![7u8; 8 << 20];
                let r = world.isend(&big, 1, 5)?;
                world.send(&[1u8], 7, 0)?;
                r.wait()?;
            } else {
                // Start waiting well after rank 0, so that rank 0's watchdog fires first.
                std::thread::sleep(Duration::from_millis(1500));
                let mut b = [0u8; 1];
                world.recv(&mut b, 0, 9)?;
            }
        }
        // Rank 0 sends rank 1 an 8 B eager message nobody receives, once rank 1 is in
        // finalize; both finalize. With connections made on demand the frame needs rank
        // 1 to answer the set-up while it waits in the final fence.
        "eager_unreceived" => {
            if me == 0 {
                std::thread::sleep(Duration::from_millis(300));
                world.send(&[5u64], 1, 3)?;
            }
        }
        // Everything right: exchange, finalize, exit 0.
        "clean" => {
            let peer = 1 - me;
            let mut b = [0u64; 1];
            world.sendrecv(&[me as u64], peer, 0, &mut b, peer, 0)?;
            assert_eq!(b[0], peer as u64);
        }
        other => panic!("unknown scenario {other:?}"),
    }
    universe.finalize()
}
