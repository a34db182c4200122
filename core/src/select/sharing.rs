//! The `--explain` note on ranks that share one GPU without MPS (issue 18).
//!
//! Without MPS, processes on one GPU time-slice it: every device operation that follows
//! one of another process waits for a context switch, about 150 µs on an H200
//! (`rankwire-bench latency -d cuda`, 8 B one-way: 158.6 µs without MPS, 17.6 µs with
//! it). MPS (`nvidia-cuda-mps-control -d`) lets them run concurrently.
//!
//! How the ranks learn it: only when `--explain` is on, each rank appends one field to
//! the node record it publishes at init anyway (`node-<rank>` in `universe.rs`), so
//! the note costs no extra bootstrap round trip: [`local_field`] encodes the GPUs this
//! process sees (PCI id and MPS attribute of each ordinal) and its
//! `RANKWIRE_GPU_DEVICE`, [`parse_field`] reads a peer's back, and [`notes`] decides,
//! from the facts alone, which ranks use one physical GPU (same node, same PCI id of
//! the device each would pick: the forced ordinal, else `local_rank % device_count`,
//! as `Universe::gpu_device` does) where MPS is off. Only [`local_field`] touches CUDA
//! (`cuInit` and device attributes; no context is created), and the caller asks for it
//! only with `--explain`: a host-only job without it reads no GPU attribute.

/// The cost, in microseconds, of each device operation after one of another process on
/// a GPU shared without MPS (measured on one H200, see the module doc).
pub(crate) const TIME_SLICE_US: u32 = 150;

/// What one rank published about its GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuFacts {
    /// `RANKWIRE_GPU_DEVICE`, when set to a number.
    pub(crate) forced: Option<usize>,
    /// Per visible device ordinal: PCI id (`rankwire_gpu::pci_bus_id`) and
    /// `CU_DEVICE_ATTRIBUTE_MPS_ENABLED` (`None`: unknown, e.g. a driver before 12.9).
    pub(crate) devices: Vec<(String, Option<bool>)>,
}

/// One rank as [`notes`] sees it.
#[derive(Debug, Clone)]
pub(crate) struct RankGpu<'a> {
    /// Node identity (`host/boot id/netns`); the note names the host part.
    pub(crate) node: &'a str,
    /// Position among the ranks of its node, in rank order.
    pub(crate) local_rank: usize,
    /// What it published; `None`: no GPU (or nothing published).
    pub(crate) gpu: Option<GpuFacts>,
}

/// This process's field: `forced;pci=m,pci=m,...` with `m` one of `1`, `0`, `?`;
/// `None` without a usable GPU. Reads device attributes only (no context is created).
pub(crate) fn local_field(forced: Option<&str>) -> Option<String> {
    if !rankwire_gpu::available() || rankwire_gpu::init().is_err() {
        return None;
    }
    let n = rankwire_gpu::device_count().ok().filter(|&n| n > 0)?;
    let mut devices = Vec::with_capacity(n);
    for d in 0..n as i32 {
        let pci = rankwire_gpu::pci_bus_id(d).ok()?;
        devices.push((pci, rankwire_gpu::mps_enabled(d).ok()));
    }
    let forced = forced
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse().ok());
    Some(encode(&GpuFacts { forced, devices }))
}

/// The field of `facts` as [`local_field`] publishes it.
pub(crate) fn encode(facts: &GpuFacts) -> String {
    let devs: Vec<String> = facts
        .devices
        .iter()
        .map(|(pci, mps)| {
            let m = match mps {
                Some(true) => "1",
                Some(false) => "0",
                None => "?",
            };
            format!("{pci}={m}")
        })
        .collect();
    format!(
        "{};{}",
        facts.forced.map_or(String::new(), |f| f.to_string()),
        devs.join(",")
    )
}

/// A published field read back; `None` when empty or malformed (a peer's bytes: never
/// trusted to be well formed).
pub(crate) fn parse_field(s: &str) -> Option<GpuFacts> {
    let (forced, devs) = s.split_once(';')?;
    let forced = if forced.is_empty() {
        None
    } else {
        Some(forced.parse().ok()?)
    };
    let mut devices = Vec::new();
    for d in devs.split(',').filter(|d| !d.is_empty()) {
        let (pci, m) = d.rsplit_once('=')?;
        let mps = match m {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        };
        devices.push((pci.to_string(), mps));
    }
    (!devices.is_empty()).then_some(GpuFacts { forced, devices })
}

/// The notes for the job, one per (node, GPU) that two or more ranks use while MPS is
/// off there (any of them reads the attribute as 0), in order of the lowest rank; empty
/// when no GPU is shared that way. `ranks` is indexed by world rank. Pure.
pub(crate) fn notes(ranks: &[RankGpu<'_>]) -> Vec<String> {
    // (node, pci) -> (ranks, MPS off seen)
    let mut groups: Vec<((&str, &str), Vec<usize>, bool)> = Vec::new();
    for (r, rank) in ranks.iter().enumerate() {
        let Some(g) = &rank.gpu else { continue };
        let dev = match g.forced {
            Some(f) if f < g.devices.len() => f,
            // An out-of-range RANKWIRE_GPU_DEVICE fails that rank's gpu_device().
            Some(_) => continue,
            None => rank.local_rank % g.devices.len(),
        };
        let (pci, mps) = &g.devices[dev];
        let key = (rank.node, pci.as_str());
        match groups.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, rs, off)) => {
                rs.push(r);
                *off |= *mps == Some(false);
            }
            None => groups.push((key, vec![r], *mps == Some(false))),
        }
    }
    groups
        .into_iter()
        .filter(|(_, rs, off)| rs.len() >= 2 && *off)
        .map(|((node, pci), rs, _)| {
            let host = node.split('/').next().unwrap_or(node);
            let list: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
            format!(
                "ranks {} on {host} share GPU {pci} without MPS: they time-slice it, each \
                 device operation after one of another rank waits ~{TIME_SLICE_US} µs \
                 (measured on one H200); fix: start the MPS control daemon before the job \
                 (`nvidia-cuda-mps-control -d`, as root or the GPU's owner), or give each \
                 rank its own GPU",
                list.join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(forced: Option<usize>, devs: &[(&str, Option<bool>)]) -> Option<GpuFacts> {
        Some(GpuFacts {
            forced,
            devices: devs.iter().map(|(p, m)| (p.to_string(), *m)).collect(),
        })
    }

    #[test]
    fn field_round_trips_and_garbage_is_none() {
        let f = facts(
            Some(1),
            &[("0000:41:00", Some(false)), ("0000:42:00", None)],
        )
        .unwrap();
        assert_eq!(encode(&f), "1;0000:41:00=0,0000:42:00=?");
        assert_eq!(parse_field(&encode(&f)), Some(f));
        let g = facts(None, &[("0000:41:00", Some(true))]).unwrap();
        assert_eq!(encode(&g), ";0000:41:00=1");
        assert_eq!(parse_field(";0000:41:00=1"), Some(g));
        for bad in ["", ";", "x;0000:41:00=1", "no separator", ";0000:41:00"] {
            assert_eq!(parse_field(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn two_ranks_on_one_gpu_without_mps_get_one_note() {
        let one = [("0000:41:00", Some(false))];
        let ranks = [
            RankGpu {
                node: "h1/b/ns",
                local_rank: 0,
                gpu: facts(None, &one),
            },
            RankGpu {
                node: "h1/b/ns",
                local_rank: 1,
                gpu: facts(None, &one),
            },
        ];
        assert_eq!(
            notes(&ranks),
            vec![
                "ranks 0, 1 on h1 share GPU 0000:41:00 without MPS: they time-slice it, each \
                 device operation after one of another rank waits ~150 µs (measured on one \
                 H200); fix: start the MPS control daemon before the job \
                 (`nvidia-cuda-mps-control -d`, as root or the GPU's owner), or give each \
                 rank its own GPU"
                    .to_string()
            ]
        );
        // With MPS on: no note.
        let on = [("0000:41:00", Some(true))];
        let ranks = [
            RankGpu {
                node: "h1/b/ns",
                local_rank: 0,
                gpu: facts(None, &on),
            },
            RankGpu {
                node: "h1/b/ns",
                local_rank: 1,
                gpu: facts(None, &on),
            },
        ];
        assert!(notes(&ranks).is_empty());
        // MPS unknown everywhere: nothing claimed.
        let unk = [("0000:41:00", None)];
        let ranks = [
            RankGpu {
                node: "h1/b/ns",
                local_rank: 0,
                gpu: facts(None, &unk),
            },
            RankGpu {
                node: "h1/b/ns",
                local_rank: 1,
                gpu: facts(None, &unk),
            },
        ];
        assert!(notes(&ranks).is_empty());
    }

    #[test]
    fn round_robin_forced_devices_nodes_and_no_gpu() {
        let two = [("0000:41:00", Some(false)), ("0000:42:00", Some(false))];
        // 4 ranks on 2 GPUs: 0 and 2 share the first, 1 and 3 the second.
        let ranks: Vec<RankGpu> = (0..4)
            .map(|l| RankGpu {
                node: "h1/b/ns",
                local_rank: l,
                gpu: facts(None, &two),
            })
            .collect();
        let n = notes(&ranks);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(
            n[0].starts_with("ranks 0, 2 on h1 share GPU 0000:41:00 without MPS"),
            "{n:?}"
        );
        assert!(
            n[1].starts_with("ranks 1, 3 on h1 share GPU 0000:42:00 without MPS"),
            "{n:?}"
        );
        // 2 ranks on 2 GPUs: none shared.
        assert!(notes(&ranks[..2]).is_empty());
        // RANKWIRE_GPU_DEVICE puts both on device 1; an out-of-range one counts no rank.
        let ranks = [
            RankGpu {
                node: "h1/b/ns",
                local_rank: 0,
                gpu: facts(Some(1), &two),
            },
            RankGpu {
                node: "h1/b/ns",
                local_rank: 1,
                gpu: facts(Some(1), &two),
            },
            RankGpu {
                node: "h1/b/ns",
                local_rank: 2,
                gpu: facts(Some(7), &two),
            },
        ];
        let n = notes(&ranks);
        assert_eq!(n.len(), 1);
        assert!(
            n[0].starts_with("ranks 0, 1 on h1 share GPU 0000:42:00"),
            "{n:?}"
        );
        // CUDA_VISIBLE_DEVICES differs: ordinal 0 is another physical GPU per rank.
        let ranks = [
            RankGpu {
                node: "h1/b/ns",
                local_rank: 0,
                gpu: facts(None, &two[..1]),
            },
            RankGpu {
                node: "h1/b/ns",
                local_rank: 1,
                gpu: facts(None, &two[1..]),
            },
        ];
        assert!(notes(&ranks).is_empty());
        // Same PCI id on two nodes is two GPUs; a rank without a GPU is left out.
        let one = [("0000:41:00", Some(false))];
        let ranks = [
            RankGpu {
                node: "h1/b/ns",
                local_rank: 0,
                gpu: facts(None, &one),
            },
            RankGpu {
                node: "h2/c/ns",
                local_rank: 0,
                gpu: facts(None, &one),
            },
            RankGpu {
                node: "h2/c/ns",
                local_rank: 1,
                gpu: None,
            },
        ];
        assert!(notes(&ranks).is_empty());
        // One rank reading MPS off is enough to say so.
        let ranks = [
            RankGpu {
                node: "h1/b/ns",
                local_rank: 0,
                gpu: facts(None, &[("0000:41:00", None)]),
            },
            RankGpu {
                node: "h1/b/ns",
                local_rank: 1,
                gpu: facts(None, &one),
            },
        ];
        assert_eq!(notes(&ranks).len(), 1);
    }
}
