//! Device, port and GID selection.
//!
//! - Devices: `ibv_get_device_list`. `RANKWIRE_IB_HCA=name[:port]` picks one; otherwise
//!   the first device with an active port is used, trying devices nearest the rank's GPU
//!   first where there are several and the GPU is known ([`nic_order`]: PCIe distance
//!   from the sysfs paths of the devices, as NCCL's topology search and `rwrun --doctor`
//!   read it). Devices at equal distance keep the library's order: the first one with an
//!   active port is used (no striping across rails).
//! - GID (RoCE): `RANKWIRE_IB_GID_INDEX=n` picks an entry; otherwise the first RoCE v2
//!   entry holding an IPv4-mapped address (`::ffff:a.b.c.d`), because RoCE v2 is routable
//!   and IPv4 is what the fabric's routing is normally set up for; failing that, the first
//!   non-zero RoCE v2 entry, then entry 0. The type of an entry comes from
//!   `/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>`. Only the first
//!   16 entries are scanned (rxe has 1024 mostly empty slots).
//! - InfiniBand link layer: GID index 0 and the port's LID.
//!
//! "No RDMA here" ([`Probe::Absent`]) covers: no library, `ENOSYS` from
//! `ibv_get_device_list` (kernel without RDMA), an empty list, and no active port. Bad
//! settings (an unknown `RANKWIRE_IB_HCA`, an unusable `RANKWIRE_IB_GID_INDEX`) are
//! errors ([`Probe::Misconfigured`]), never a silent fallback.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::sync::Arc;

use super::verbs::{self, Gid, IbvContext, IbvPortAttr, Verbs};

/// GID entries scanned when choosing one by default.
const GID_SCAN: u32 = 16;

/// An opened device with its chosen port and GID.
pub(crate) struct Device {
    pub(crate) verbs: Arc<Verbs>,
    pub(crate) ctx: *mut IbvContext,
    pub(crate) name: String,
    pub(crate) port: u8,
    pub(crate) gid_index: u8,
    pub(crate) gid: Gid,
    pub(crate) lid: u16,
    /// `active_mtu` (enum ibv_mtu).
    pub(crate) mtu: u32,
    pub(crate) roce: bool,
    /// Why this device, port and GID (for the debug log).
    pub(crate) why: String,
}

// SAFETY: the context is used by one thread at a time (the engine holds a lock).
unsafe impl Send for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device; everything made from it is gone (the
        // transport drops QPs, CQ, MRs and PD first).
        unsafe { (self.verbs.close_device)(self.ctx) };
    }
}

/// Outcome of looking for a usable RDMA device.
pub(crate) enum Probe {
    /// A device is open and ready.
    Found(Device),
    /// No RDMA on this machine (the reason is for the debug log).
    Absent(String),
    /// The user asked for something that does not exist or cannot work.
    Misconfigured(String),
}

/// PCIe distance score of two devices from their sysfs paths (links resolved, under
/// `root`), counted from their PCI root (`pciDDDD:BB`, the host bridge; whatever lies
/// above it, such as a Hyper-V `VMBUS` device, does not count): 0 where a path cannot
/// be resolved or has no PCI root, 1 for different roots, 1 + the number of shared
/// components from the root on for the same root (2 = only the root complex shared,
/// 3 = the root port, 4 or more = a PCIe switch too). Also read by `rwrun --doctor`'s
/// NIC–GPU distance check.
pub fn pcie_score(root: &std::path::Path, a: &std::path::Path, b: &std::path::Path) -> usize {
    let from_pci_root = |p: &std::path::Path| -> Option<Vec<std::ffi::OsString>> {
        let c = std::fs::canonicalize(p).ok()?;
        let rel = c.strip_prefix(root).ok()?;
        let parts: Vec<std::ffi::OsString> =
            rel.components().map(|c| c.as_os_str().to_owned()).collect();
        let at = parts
            .iter()
            .position(|c| c.to_string_lossy().starts_with("pci"))?;
        Some(parts[at..].to_vec())
    };
    match (from_pci_root(a), from_pci_root(b)) {
        (Some(a), Some(b)) if a[0] == b[0] => {
            1 + a.iter().zip(&b).take_while(|(x, y)| x == y).count()
        }
        (Some(_), Some(_)) => 1,
        _ => 0,
    }
}

/// In what order to try RDMA devices `names` for a rank whose GPU has PCI address
/// `gpu_pci` (e.g. `0000:3b:00.0`), reading sysfs under `root` (`/` outside tests):
/// nearest first (most shared components of the canonical paths of
/// `sys/class/infiniband/<name>/device` and `sys/bus/pci/devices/<gpu_pci>` from their
/// PCI root on, [`pcie_score`]), equal distances in the given order (NUMA node is not
/// looked at: two host bridges of one socket read as other root complexes). Returns the indices into `names` and a sentence for
/// `--explain` naming the distances.
pub fn nic_order(root: &std::path::Path, names: &[&str], gpu_pci: &str) -> (Vec<usize>, String) {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let gpu = root.join("sys/bus/pci/devices").join(gpu_pci);
    let dist: Vec<usize> = names
        .iter()
        .map(|n| {
            pcie_score(
                &root,
                &root.join("sys/class/infiniband").join(n).join("device"),
                &gpu,
            )
        })
        .collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    // Stable: equal distances keep the library's order.
    order.sort_by_key(|&i| std::cmp::Reverse(dist[i]));
    let word = |d: usize| match d {
        0 => "distance unknown",
        1 => "other root complex",
        2 | 3 => "same root complex",
        _ => "same PCIe switch",
    };
    let parts: Vec<String> = order
        .iter()
        .map(|&i| format!("{} ({})", names[i], word(dist[i])))
        .collect();
    let ties = order.iter().filter(|&&i| dist[i] == dist[order[0]]).count();
    let mut why = format!("devices by distance to GPU {gpu_pci}: {}", parts.join(", "));
    if ties > 1 {
        why.push_str(&format!(
            "; {ties} at the nearest distance: the first with an active port is used \
             (no striping across them)"
        ));
    }
    (order, why)
}

/// Look for a device following the environment (see the module doc). `near_gpu`: the
/// PCI address of the rank's GPU, to try the nearest devices first ([`nic_order`]).
pub(crate) fn probe(hca: Option<&str>, gid_index: Option<u32>, near_gpu: Option<&str>) -> Probe {
    let verbs = match Verbs::load() {
        Ok(v) => Arc::new(v),
        Err(e) => return Probe::Absent(e),
    };
    let mut n = 0;
    // SAFETY: plain library call; the list is freed below.
    let list = unsafe { (verbs.get_device_list)(&mut n) };
    if list.is_null() {
        return if verbs::errno_is(libc::ENOSYS) {
            Probe::Absent(
                "ibv_get_device_list: ENOSYS (the kernel has no RDMA support)".to_string(),
            )
        } else {
            Probe::Absent(format!(
                "ibv_get_device_list failed: {}",
                verbs::errno_text()
            ))
        };
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list has n valid entries.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a valid device has a NUL-terminated name.
        let name = unsafe { CStr::from_ptr((verbs.get_device_name)(dev)) }
            .to_string_lossy()
            .into_owned();
        names.push((name, dev));
    }
    let mut affinity = None;
    if hca.is_none()
        && names.len() > 1
        && let Some(pci) = near_gpu
    {
        let list: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        let (order, why) = nic_order(std::path::Path::new("/"), &list, pci);
        names = order.into_iter().map(|i| names[i].clone()).collect();
        affinity = Some(why);
    }
    let mut result = choose(&verbs, &names, hca, gid_index);
    if let (Probe::Found(d), Some(why)) = (&mut result, affinity) {
        d.why = format!("{}; {why}", d.why);
    }
    // SAFETY: contexts opened from the list stay valid after the list is freed.
    unsafe { (verbs.free_device_list)(list) };
    result
}

fn choose(
    verbs: &Arc<Verbs>,
    devs: &[(String, *mut verbs::IbvDevice)],
    hca: Option<&str>,
    gid_index: Option<u32>,
) -> Probe {
    if devs.is_empty() {
        return Probe::Absent("ibv_get_device_list returned no devices".into());
    }
    let all: Vec<&str> = devs.iter().map(|(n, _)| n.as_str()).collect();
    let (want_name, want_port) = match hca {
        Some(h) => {
            let (n, p) = match h.split_once(':') {
                Some((n, p)) => match p.parse::<u8>() {
                    Ok(p) if p >= 1 => (Some(n), Some(p)),
                    _ => {
                        return Probe::Misconfigured(format!(
                            "RANKWIRE_IB_HCA={h:?}: port must be a number from 1"
                        ));
                    }
                },
                None => (Some(h), None),
            };
            if !all.contains(&n.unwrap_or_default()) {
                return Probe::Misconfigured(format!(
                    "RANKWIRE_IB_HCA={h:?}: no such device (devices: {})",
                    all.join(", ")
                ));
            }
            (n, p)
        }
        None => (None, None),
    };
    let mut skipped = Vec::new();
    for (name, dev) in devs {
        if want_name.is_some_and(|w| w != name) {
            continue;
        }
        // SAFETY: dev comes from the live device list.
        let ctx = unsafe { (verbs.open_device)(*dev) };
        if ctx.is_null() {
            skipped.push(format!("{name}: ibv_open_device: {}", verbs::errno_text()));
            continue;
        }
        let ports: Vec<u8> = match want_port {
            Some(p) => vec![p],
            None => (1..=2).collect(),
        };
        for port in ports {
            let mut attr = IbvPortAttr([0; 96]);
            // SAFETY: ctx is open; attr is large enough for struct ibv_port_attr.
            let rc = unsafe { (verbs.query_port)(ctx, port, &mut attr) };
            if rc != 0 {
                if want_port.is_some() {
                    skipped.push(format!("{name}:{port}: ibv_query_port failed (rc {rc})"));
                }
                continue;
            }
            if attr.state() != verbs::PORT_ACTIVE {
                skipped.push(format!(
                    "{name}:{port}: port not active (state {})",
                    attr.state()
                ));
                continue;
            }
            let roce = attr.link_layer() == verbs::LINK_LAYER_ETHERNET;
            match pick_gid(verbs, ctx, name, port, &attr, roce, gid_index) {
                Ok((idx, gid, why)) => {
                    return Probe::Found(Device {
                        verbs: verbs.clone(),
                        ctx,
                        name: name.clone(),
                        port,
                        gid_index: idx,
                        gid,
                        lid: attr.lid(),
                        mtu: attr.active_mtu(),
                        roce,
                        why: format!(
                            "{name} port {port} ({}, active, mtu enum {}): {why}",
                            if roce { "RoCE" } else { "InfiniBand" },
                            attr.active_mtu()
                        ),
                    });
                }
                Err(e) => {
                    // SAFETY: opened above, nothing made from it.
                    unsafe { (verbs.close_device)(ctx) };
                    return Probe::Misconfigured(e);
                }
            }
        }
        // SAFETY: opened above, nothing made from it.
        unsafe { (verbs.close_device)(ctx) };
    }
    if hca.is_some() {
        Probe::Misconfigured(format!(
            "RANKWIRE_IB_HCA={:?}: no active port ({})",
            hca.unwrap_or_default(),
            skipped.join("; ")
        ))
    } else {
        Probe::Absent(format!("no active RDMA port ({})", skipped.join("; ")))
    }
}

/// Type of a GID entry from sysfs ("RoCE v2", "IB/RoCE v1"); `None` for an empty slot.
fn gid_type(dev: &str, port: u8, idx: u32) -> Option<String> {
    std::fs::read_to_string(format!(
        "/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{idx}"
    ))
    .ok()
    .map(|s| s.trim().to_string())
}

/// Text form of a GID (IPv6 notation).
pub(crate) fn gid_text(g: &Gid) -> String {
    std::net::Ipv6Addr::from(g.0).to_string()
}

fn is_ipv4_mapped(g: &Gid) -> bool {
    g.0[..10].iter().all(|&b| b == 0) && g.0[10] == 0xff && g.0[11] == 0xff
}

fn pick_gid(
    verbs: &Verbs,
    ctx: *mut IbvContext,
    dev: &str,
    port: u8,
    attr: &IbvPortAttr,
    roce: bool,
    want: Option<u32>,
) -> Result<(u8, Gid, String), String> {
    let len = attr.gid_tbl_len();
    let query = |idx: u32| -> Result<Gid, String> {
        let mut g = Gid::default();
        // SAFETY: ctx is open; idx < table length is checked by the caller or the call.
        let rc = unsafe { (verbs.query_gid)(ctx, port, idx as i32, &mut g) };
        if rc != 0 {
            return Err(format!(
                "ibv_query_gid({dev}, port {port}, index {idx}) failed: {}",
                verbs::errno_text()
            ));
        }
        Ok(g)
    };
    let listing = |upto: u32| -> String {
        (0..upto.min(len))
            .filter_map(|i| {
                let g = query(i).ok()?;
                (g != Gid::default()).then(|| {
                    format!(
                        "{i} = {} ({})",
                        gid_text(&g),
                        gid_type(dev, port, i).unwrap_or_else(|| "type unknown".into())
                    )
                })
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(idx) = want {
        if idx >= len || idx > u8::MAX as u32 {
            return Err(format!(
                "RANKWIRE_IB_GID_INDEX={idx} is out of range for {dev} port {port} (table of {len} entries; usable: {}); unset it to pick a RoCE v2 IPv4 entry automatically",
                listing(GID_SCAN)
            ));
        }
        let (g, note) = match query(idx) {
            Ok(g) => (g, String::new()),
            Err(e) => (Gid::default(), format!(": {e}")),
        };
        if g == Gid::default() {
            return Err(format!(
                "RANKWIRE_IB_GID_INDEX={idx}: entry {idx} of {dev} port {port} is empty{note} (usable: {}); unset it to pick a RoCE v2 IPv4 entry automatically",
                listing(GID_SCAN)
            ));
        }
        return Ok((
            idx as u8,
            g,
            format!(
                "GID index {idx} = {} ({}) from RANKWIRE_IB_GID_INDEX",
                gid_text(&g),
                gid_type(dev, port, idx).unwrap_or_else(|| "type unknown".into())
            ),
        ));
    }
    if !roce {
        let g = query(0)?;
        return Ok((0, g, format!("InfiniBand: GID index 0, LID {}", attr.lid())));
    }
    let mut first_v2 = None;
    for idx in 0..len.min(GID_SCAN) {
        let Ok(g) = query(idx) else { continue };
        if g == Gid::default() {
            continue;
        }
        let ty = gid_type(dev, port, idx).unwrap_or_default();
        if ty != "RoCE v2" {
            continue;
        }
        if is_ipv4_mapped(&g) {
            return Ok((
                idx as u8,
                g,
                format!(
                    "GID index {idx} = {} (RoCE v2, IPv4-mapped: routable, the default choice)",
                    gid_text(&g)
                ),
            ));
        }
        first_v2.get_or_insert((idx, g));
    }
    if let Some((idx, g)) = first_v2 {
        return Ok((
            idx as u8,
            g,
            format!(
                "GID index {idx} = {} (RoCE v2; no IPv4-mapped entry among the first {GID_SCAN})",
                gid_text(&g)
            ),
        ));
    }
    let g = query(0)?;
    Ok((
        0,
        g,
        format!(
            "GID index 0 = {} (no RoCE v2 entry among the first {GID_SCAN}; set RANKWIRE_IB_GID_INDEX to choose)",
            gid_text(&g)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_gids_are_recognised() {
        let mut g = Gid::default();
        g.0[10] = 0xff;
        g.0[11] = 0xff;
        g.0[12..].copy_from_slice(&[10, 77, 0, 1]);
        assert!(is_ipv4_mapped(&g));
        assert_eq!(gid_text(&g), "::ffff:10.77.0.1");
        let mut ll = Gid::default();
        ll.0[0] = 0xfe;
        ll.0[1] = 0x80;
        ll.0[15] = 1;
        assert!(!is_ipv4_mapped(&ll));
    }

    #[test]
    fn this_host_without_rdma_is_absent_not_a_crash() {
        // CI machines and this development machine have no RDMA: the probe must say
        // "absent" (no library, ENOSYS, or no device), never panic or misconfigure.
        if std::path::Path::new("/sys/class/infiniband").exists()
            && std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
        {
            eprintln!("skipped: this machine has RDMA devices");
            return;
        }
        match probe(None, None, None) {
            Probe::Absent(why) => assert!(!why.is_empty()),
            Probe::Found(d) => panic!("found device {} on a machine without RDMA", d.name),
            Probe::Misconfigured(e) => panic!("misconfigured: {e}"),
        }
    }

    /// A fake sysfs: a GPU and one NIC behind one PCIe switch, a NIC on the same root
    /// complex through another switch, a NIC on another root complex, and one whose
    /// path does not resolve.
    fn fake_sysfs() -> std::path::PathBuf {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("rw-nic-order-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("sys/devices");
        let sw = "pci0000:00/0000:00:01.0/0000:01:00.0";
        let paths = [
            ("gpu", format!("{sw}/0000:02:08.0/0000:03:00.0")),
            ("mlx5_near", format!("{sw}/0000:02:10.0/0000:04:00.0")),
            (
                "mlx5_rc",
                "pci0000:00/0000:00:02.0/0000:05:00.0/0000:06:00.0".to_string(),
            ),
            (
                "mlx5_far",
                "pci0000:80/0000:80:01.0/0000:81:00.0".to_string(),
            ),
        ];
        for (name, p) in &paths {
            std::fs::create_dir_all(dev.join(p)).unwrap();
            if *name == "gpu" {
                std::fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
                symlink(dev.join(p), root.join("sys/bus/pci/devices/0000:03:00.0")).unwrap();
            } else {
                let d = root.join("sys/class/infiniband").join(name);
                std::fs::create_dir_all(&d).unwrap();
                symlink(dev.join(p), d.join("device")).unwrap();
            }
        }
        std::fs::create_dir_all(root.join("sys/class/infiniband/rxe_broken")).unwrap();
        root
    }

    #[test]
    fn nic_order_puts_the_device_nearest_the_gpu_first() {
        let root = fake_sysfs();
        let names = ["mlx5_far", "rxe_broken", "mlx5_rc", "mlx5_near"];
        let (order, why) = nic_order(&root, &names, "0000:03:00.0");
        let got: Vec<&str> = order.iter().map(|&i| names[i]).collect();
        assert_eq!(
            got,
            ["mlx5_near", "mlx5_rc", "mlx5_far", "rxe_broken"],
            "{why}"
        );
        assert!(why.contains("mlx5_near (same PCIe switch)"), "{why}");
        assert!(why.contains("mlx5_rc (same root complex)"), "{why}");
        assert!(why.contains("mlx5_far (other root complex)"), "{why}");
        assert!(why.contains("rxe_broken (distance unknown)"), "{why}");
        assert!(!why.contains("nearest distance"), "no tie: {why}");
        // Two at the same distance keep the library's order, and the tie is said.
        let names = ["mlx5_rc", "mlx5_far", "mlx5_near", "mlx5_near"];
        let (order, why) = nic_order(&root, &names, "0000:03:00.0");
        assert_eq!(order, [2, 3, 0, 1], "{why}");
        assert!(why.contains("2 at the nearest distance"), "{why}");
        // A GPU address sysfs does not know: nothing resolves, the order is kept.
        let (order, _) = nic_order(&root, &names, "0000:ff:00.0");
        assert_eq!(order, [0, 1, 2, 3]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nic_order_counts_from_the_pci_root_not_from_a_shared_vmbus_parent() {
        // Hyper-V/Azure: every PCI root hangs below one VMBUS device; NICs on other
        // roots than the GPU's share no switch with it.
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("rw-nic-vmbus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let vmbus = "LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00";
        let dev = root.join("sys/devices");
        let paths = [
            ("gpu", format!("{vmbus}/g1/pci0001:00/0001:00:00.0")),
            ("mlx5_0", format!("{vmbus}/n1/pci0101:00/0101:00:00.0")),
            ("mlx5_1", format!("{vmbus}/n2/pci0001:00/0001:00:02.0")),
        ];
        for (name, p) in &paths {
            std::fs::create_dir_all(dev.join(p)).unwrap();
            if *name == "gpu" {
                std::fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
                symlink(dev.join(p), root.join("sys/bus/pci/devices/0001:00:00.0")).unwrap();
            } else {
                let d = root.join("sys/class/infiniband").join(name);
                std::fs::create_dir_all(&d).unwrap();
                symlink(dev.join(p), d.join("device")).unwrap();
            }
        }
        let (order, why) = nic_order(&root, &["mlx5_0", "mlx5_1"], "0001:00:00.0");
        std::fs::remove_dir_all(&root).unwrap();
        assert!(!why.contains("same PCIe switch"), "{why}");
        assert!(why.contains("mlx5_0 (other root complex)"), "{why}");
        assert_eq!(order, [1, 0], "{why}");
    }
}
