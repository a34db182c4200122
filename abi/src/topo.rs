//! Process topologies (MPI 4.1 chapter 8): Cartesian, graph and distributed graph
//! communicators, their queries, `MPI_Dims_create`, and the neighborhood collectives
//! (blocking and nonblocking) on them.
//!
//! A topology communicator is a new communicator (ranks are not reordered: `reorder`
//! is allowed to be ignored) plus a second, hidden duplicate on which the
//! neighborhood collectives exchange their messages, so that they never match the
//! user's point-to-point traffic. Neighbor order follows MPI 4.1 §8.6: for a
//! Cartesian topology, for each dimension the source then the destination of
//! `MPI_Cart_shift(d, 1)`; for graphs, the order of the edge lists.

use crate::buf::{recv_buf, send_buf};
use crate::comm::{lookup, rank_arg};
use crate::consts::*;
use crate::datatype::info;
use crate::error::{R, err, guard, put};
use crate::request::{Active, Started, insert};
use rankwire::Communicator;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex};

/// The topology of a communicator.
#[derive(Clone, Debug)]
pub enum Topo {
    /// `MPI_CART`: extents and periodicity per dimension.
    Cart {
        /// Ranks per dimension.
        dims: Vec<i32>,
        /// Periodic dimensions.
        periods: Vec<bool>,
    },
    /// `MPI_GRAPH`: cumulative degrees and edge list (MPI 4.1 §8.5.3).
    Graph {
        /// `index[i]` = total degree of nodes 0..=i.
        index: Vec<i32>,
        /// Neighbors of every node, concatenated.
        edges: Vec<i32>,
    },
    /// `MPI_DIST_GRAPH`: this rank's in- and out-neighbors.
    Dist {
        /// Sources (in-neighbors) with weights.
        sources: Vec<i32>,
        /// Weights of the sources.
        sweights: Vec<i32>,
        /// Destinations (out-neighbors).
        dests: Vec<i32>,
        /// Weights of the destinations.
        dweights: Vec<i32>,
        /// Whether weights were given.
        weighted: bool,
    },
}

struct TopoComm {
    topo: Topo,
    /// Hidden duplicate for neighborhood collectives.
    hidden: Communicator,
}

static TOPOS: Mutex<Option<HashMap<MPI_Comm, Arc<TopoComm>>>> = Mutex::new(None);

fn topo_of(comm: MPI_Comm) -> Option<Arc<TopoComm>> {
    TOPOS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&comm).cloned())
}

fn need_topo(comm: MPI_Comm) -> R<Arc<TopoComm>> {
    lookup(comm)?;
    topo_of(comm).ok_or_else(|| err(MPI_ERR_TOPOLOGY, format!("communicator {comm:#x} has no process topology; fix: create it with MPI_Cart_create, MPI_Graph_create or MPI_Dist_graph_create(_adjacent)")))
}

/// Forgets the topology of a freed communicator.
pub fn forget(comm: MPI_Comm) {
    if let Some(m) = TOPOS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        m.remove(&comm);
    }
}

fn attach(c: Communicator, parent: MPI_Comm, topo: Topo) -> R<MPI_Comm> {
    let hidden = c.dup()?;
    let h = crate::comm::insert_comm(c);
    let eh = crate::error::handler_of(parent);
    if eh != MPI_ERRORS_ARE_FATAL {
        crate::error::set_handler(h, eh)?;
    }
    TOPOS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(h, Arc::new(TopoComm { topo, hidden }));
    Ok(h)
}

unsafe fn ints<'a>(n: c_int, p: *const c_int, what: &str) -> R<&'a [c_int]> {
    if n < 0 {
        return Err(err(MPI_ERR_ARG, format!("{what}: length {n} is negative")));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("{what} is a null pointer")));
    }
    // SAFETY: the caller's array of n ints.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
}

/// Writes `v` into the C array `p` of room `max`.
unsafe fn out_ints(p: *mut c_int, max: c_int, v: &[c_int]) -> R {
    let n = v.len().min(max.max(0) as usize);
    if n > 0 && p.is_null() {
        return Err(err(MPI_ERR_ARG, "output array is a null pointer"));
    }
    // SAFETY: the caller's array of at least `max` ints.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, n) };
    Ok(())
}

// ---- Cartesian -------------------------------------------------------------------

/// `MPI_Cart_create`: ranks `0..prod(dims)` of `comm_old` form the grid (row-major
/// order, no reordering); the others get `MPI_COMM_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_create(
    comm_old: MPI_Comm,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut MPI_Comm,
) -> c_int {
    guard(comm_old, || {
        let c = lookup(comm_old)?;
        // SAFETY: C arrays of ndims ints.
        let (d, p) = unsafe { (ints(ndims, dims, "dims")?, ints(ndims, periods, "periods")?) };
        if d.iter().any(|&x| x <= 0) {
            return Err(err(MPI_ERR_DIMS, format!("dims {d:?} must all be > 0")));
        }
        let total: i64 = d.iter().map(|&x| x as i64).product();
        if total > c.size() as i64 {
            return Err(err(
                MPI_ERR_DIMS,
                format!(
                    "the grid {d:?} has {total} ranks, the communicator {}; fix: a grid no larger than the communicator (see MPI_Dims_create)",
                    c.size()
                ),
            ));
        }
        let member = (c.rank() as i64) < total;
        let sub = c.split(member.then_some(0), c.rank() as i32)?;
        let h = match sub {
            Some(s) => attach(
                s,
                comm_old,
                Topo::Cart {
                    dims: d.to_vec(),
                    periods: p.iter().map(|&x| x != 0).collect(),
                },
            )?,
            None => MPI_COMM_NULL,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(comm_cart, h, "comm_cart") }
    })
}

fn cart(comm: MPI_Comm) -> R<(Arc<TopoComm>, Vec<i32>, Vec<bool>)> {
    let t = need_topo(comm)?;
    match &t.topo {
        Topo::Cart { dims, periods } => {
            let (d, p) = (dims.clone(), periods.clone());
            Ok((t, d, p))
        }
        _ => Err(err(
            MPI_ERR_TOPOLOGY,
            "communicator has a graph topology, not a Cartesian one",
        )),
    }
}

fn coords_of(dims: &[i32], mut r: i32) -> Vec<i32> {
    let mut c = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        c[i] = r % dims[i];
        r /= dims[i];
    }
    c
}

fn rank_of(dims: &[i32], periods: &[bool], coords: &[i32]) -> R<i32> {
    let mut r = 0i32;
    for i in 0..dims.len() {
        let mut x = coords[i];
        if periods[i] {
            x = x.rem_euclid(dims[i]);
        } else if x < 0 || x >= dims[i] {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "coordinate {x} is outside 0..{} of the non-periodic dimension {i}",
                    dims[i]
                ),
            ));
        }
        r = r * dims[i] + x;
    }
    Ok(r)
}

/// `MPI_Cartdim_get`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cartdim_get(comm: MPI_Comm, ndims: *mut c_int) -> c_int {
    guard(comm, || {
        let (_, d, _) = cart(comm)?;
        // SAFETY: C caller's pointer.
        unsafe { put(ndims, d.len() as c_int, "ndims") }
    })
}

/// `MPI_Cart_get`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_get(
    comm: MPI_Comm,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (_, d, p) = cart(comm)?;
        let me = lookup(comm)?.rank() as i32;
        let pi: Vec<c_int> = p.iter().map(|&x| x as c_int).collect();
        // SAFETY: C arrays of maxdims ints.
        unsafe {
            out_ints(dims, maxdims, &d)?;
            out_ints(periods, maxdims, &pi)?;
            out_ints(coords, maxdims, &coords_of(&d, me))
        }
    })
}

/// `MPI_Cart_rank`: periodic coordinates wrap; others out of range are `MPI_ERR_ARG`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_rank(
    comm: MPI_Comm,
    coords: *const c_int,
    rank: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (_, d, p) = cart(comm)?;
        // SAFETY: C array of ndims ints.
        let c = unsafe { ints(d.len() as c_int, coords, "coords")? };
        let r = rank_of(&d, &p, c)?;
        // SAFETY: C caller's pointer.
        unsafe { put(rank, r, "rank") }
    })
}

/// `MPI_Cart_coords`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_coords(
    comm: MPI_Comm,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (_, d, _) = cart(comm)?;
        let c = lookup(comm)?;
        rank_arg(&c, rank, "rank")?;
        // SAFETY: C array of maxdims ints.
        unsafe { out_ints(coords, maxdims, &coords_of(&d, rank)) }
    })
}

fn shift(d: &[i32], p: &[bool], me: i32, dir: usize, disp: i32) -> (i32, i32) {
    let c = coords_of(d, me);
    let at = |delta: i32| {
        let mut x = c.clone();
        x[dir] += delta;
        rank_of(d, p, &x).unwrap_or(MPI_PROC_NULL)
    };
    (at(-disp), at(disp))
}

/// `MPI_Cart_shift`: `MPI_PROC_NULL` off the edge of a non-periodic dimension.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_shift(
    comm: MPI_Comm,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (_, d, p) = cart(comm)?;
        if direction < 0 || direction as usize >= d.len() {
            return Err(err(
                MPI_ERR_ARG,
                format!("direction {direction} is not a dimension (0..{})", d.len()),
            ));
        }
        let me = lookup(comm)?.rank() as i32;
        let (s, t) = shift(&d, &p, me, direction as usize, disp);
        // SAFETY: C caller's pointers.
        unsafe {
            put(rank_source, s, "rank_source")?;
            put(rank_dest, t, "rank_dest")
        }
    })
}

/// `MPI_Cart_sub`: the sub-grids keeping the `remain_dims` dimensions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_sub(
    comm: MPI_Comm,
    remain_dims: *const c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard(comm, || {
        let (_, d, p) = cart(comm)?;
        let c = lookup(comm)?;
        // SAFETY: C array of ndims ints.
        let keep = unsafe { ints(d.len() as c_int, remain_dims, "remain_dims")? };
        let co = coords_of(&d, c.rank() as i32);
        let (mut color, mut key) = (0i64, 0i64);
        let (mut nd, mut np) = (Vec::new(), Vec::new());
        for i in 0..d.len() {
            if keep[i] != 0 {
                key = key * d[i] as i64 + co[i] as i64;
                nd.push(d[i]);
                np.push(p[i]);
            } else {
                color = color * d[i] as i64 + co[i] as i64;
            }
        }
        let s = c
            .split(Some(color as u32), key as i32)?
            .expect("every rank has a color");
        let topo = if nd.is_empty() {
            Topo::Cart {
                dims: vec![1],
                periods: vec![false],
            }
        } else {
            Topo::Cart {
                dims: nd,
                periods: np,
            }
        };
        let h = attach(s, comm, topo)?;
        // SAFETY: C caller's pointer.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Cart_map`: ranks are not reordered: rank r < prod(dims) keeps r.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_map(
    comm: MPI_Comm,
    ndims: c_int,
    dims: *const c_int,
    _periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        // SAFETY: C array.
        let d = unsafe { ints(ndims, dims, "dims")? };
        let total: i64 = d.iter().map(|&x| x as i64).product();
        let r = if (c.rank() as i64) < total {
            c.rank() as c_int
        } else {
            MPI_UNDEFINED
        };
        // SAFETY: C caller's pointer.
        unsafe { put(newrank, r, "newrank") }
    })
}

/// `MPI_Graph_map`: ranks are not reordered: rank r < nnodes keeps r, the others get
/// `MPI_UNDEFINED` (MPI 4.1 §8.5.8 allows any mapping; this one is the identity).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_map(
    comm: MPI_Comm,
    nnodes: c_int,
    _index: *const c_int,
    _edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if nnodes < 0 || nnodes as usize > c.size() {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "nnodes {nnodes} is outside 0..={} (the communicator's size)",
                    c.size()
                ),
            ));
        }
        let r = if c.rank() < nnodes as usize {
            c.rank() as c_int
        } else {
            MPI_UNDEFINED
        };
        // SAFETY: C caller's pointer.
        unsafe { put(newrank, r, "newrank") }
    })
}

/// `MPI_Dims_create`: fills the zero entries of `dims` so that the product is
/// `nnodes`, the dimensions as close to each other as possible, non-increasing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        // SAFETY: C array of ndims ints.
        let d = unsafe { ints(ndims, dims, "dims")? }.to_vec();
        let fixed: i64 = d.iter().filter(|&&x| x > 0).map(|&x| x as i64).product();
        if d.iter().any(|&x| x < 0) || nnodes <= 0 || nnodes as i64 % fixed != 0 {
            return Err(err(
                MPI_ERR_DIMS,
                format!("cannot factor {nnodes} ranks into dims {d:?}"),
            ));
        }
        let free = d.iter().filter(|&&x| x == 0).count();
        let f = balanced(nnodes as i64 / fixed, free);
        let mut it = f.into_iter();
        let out: Vec<c_int> = d
            .iter()
            .map(|&x| {
                if x == 0 {
                    it.next().unwrap_or(1) as c_int
                } else {
                    x
                }
            })
            .collect();
        // SAFETY: C array of ndims ints.
        unsafe { out_ints(dims, ndims, &out) }
    })
}

/// `k` factors of `n`, as equal as possible, in non-increasing order.
fn balanced(n: i64, k: usize) -> Vec<i64> {
    if k == 0 {
        return Vec::new();
    }
    let mut f = vec![1i64; k];
    // Prime factors, largest first, each to the currently smallest dimension.
    let mut primes = Vec::new();
    let mut m = n;
    let mut p = 2;
    while p * p <= m {
        while m % p == 0 {
            primes.push(p);
            m /= p;
        }
        p += 1;
    }
    if m > 1 {
        primes.push(m);
    }
    primes.sort_unstable_by(|a, b| b.cmp(a));
    for q in primes {
        let i = (0..k).min_by_key(|&i| f[i]).unwrap_or(0);
        f[i] *= q;
    }
    f.sort_unstable_by(|a, b| b.cmp(a));
    f
}

/// `MPI_Topo_test`: `MPI_CART`, `MPI_GRAPH`, `MPI_DIST_GRAPH` or `MPI_UNDEFINED`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Topo_test(comm: MPI_Comm, status: *mut c_int) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        let v = match topo_of(comm).map(|t| t.topo.clone()) {
            Some(Topo::Cart { .. }) => MPI_CART,
            Some(Topo::Graph { .. }) => MPI_GRAPH,
            Some(Topo::Dist { .. }) => MPI_DIST_GRAPH,
            None => MPI_UNDEFINED,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(status, v, "status") }
    })
}

// ---- graphs ----------------------------------------------------------------------

/// `MPI_Graph_create`: ranks `0..nnodes` form the graph; the others get
/// `MPI_COMM_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_create(
    comm_old: MPI_Comm,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    comm_graph: *mut MPI_Comm,
) -> c_int {
    guard(comm_old, || {
        let c = lookup(comm_old)?;
        // SAFETY: C arrays.
        let idx = unsafe { ints(nnodes, index, "index")? }.to_vec();
        let ne = idx.last().copied().unwrap_or(0);
        // SAFETY: C array of index[nnodes-1] ints.
        let e = unsafe { ints(ne, edges, "edges")? }.to_vec();
        if nnodes as usize > c.size()
            || e.iter().any(|&x| x < 0 || x >= nnodes)
            || idx.windows(2).any(|w| w[1] < w[0])
        {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "invalid graph: {nnodes} nodes (communicator of {}), index {idx:?}",
                    c.size()
                ),
            ));
        }
        let member = c.rank() < nnodes as usize;
        let sub = c.split(member.then_some(0), c.rank() as i32)?;
        let h = match sub {
            Some(s) => attach(
                s,
                comm_old,
                Topo::Graph {
                    index: idx,
                    edges: e,
                },
            )?,
            None => MPI_COMM_NULL,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(comm_graph, h, "comm_graph") }
    })
}

fn graph_neighbors(index: &[i32], edges: &[i32], r: usize) -> Vec<i32> {
    let lo = if r == 0 { 0 } else { index[r - 1] as usize };
    edges[lo..index[r] as usize].to_vec()
}

fn graph(comm: MPI_Comm) -> R<(Vec<i32>, Vec<i32>)> {
    match need_topo(comm)?.topo.clone() {
        Topo::Graph { index, edges } => Ok((index, edges)),
        _ => Err(err(
            MPI_ERR_TOPOLOGY,
            "communicator has no MPI_GRAPH topology",
        )),
    }
}

/// `MPI_Graphdims_get`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graphdims_get(
    comm: MPI_Comm,
    nnodes: *mut c_int,
    nedges: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (i, e) = graph(comm)?;
        // SAFETY: C caller's pointers.
        unsafe {
            put(nnodes, i.len() as c_int, "nnodes")?;
            put(nedges, e.len() as c_int, "nedges")
        }
    })
}

/// `MPI_Graph_get`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_get(
    comm: MPI_Comm,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (i, e) = graph(comm)?;
        // SAFETY: C arrays.
        unsafe {
            out_ints(index, maxindex, &i)?;
            out_ints(edges, maxedges, &e)
        }
    })
}

/// `MPI_Graph_neighbors_count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_neighbors_count(
    comm: MPI_Comm,
    rank: c_int,
    n: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (i, e) = graph(comm)?;
        rank_arg(&*lookup(comm)?, rank, "rank")?;
        // SAFETY: C caller's pointer.
        unsafe {
            put(
                n,
                graph_neighbors(&i, &e, rank as usize).len() as c_int,
                "nneighbors",
            )
        }
    })
}

/// `MPI_Graph_neighbors`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_neighbors(
    comm: MPI_Comm,
    rank: c_int,
    max: c_int,
    neighbors: *mut c_int,
) -> c_int {
    guard(comm, || {
        let (i, e) = graph(comm)?;
        rank_arg(&*lookup(comm)?, rank, "rank")?;
        // SAFETY: C array.
        unsafe { out_ints(neighbors, max, &graph_neighbors(&i, &e, rank as usize)) }
    })
}

/// Weights argument: `MPI_UNWEIGHTED` (10) and `MPI_WEIGHTS_EMPTY` (11) are the ABI's
/// sentinel addresses.
unsafe fn weights(n: c_int, w: *const c_int) -> R<(Vec<i32>, bool)> {
    let a = w as usize;
    if a == MPI_UNWEIGHTED || a == MPI_WEIGHTS_EMPTY || n == 0 {
        return Ok((vec![1; n.max(0) as usize], a != MPI_UNWEIGHTED));
    }
    // SAFETY: C array of n ints.
    Ok((unsafe { ints(n, w, "weights")? }.to_vec(), true))
}

/// `MPI_Dist_graph_create_adjacent`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Dist_graph_create_adjacent(
    comm_old: MPI_Comm,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    _info: MPI_Info,
    _reorder: c_int,
    comm_dist_graph: *mut MPI_Comm,
) -> c_int {
    guard(comm_old, || {
        let c = lookup(comm_old)?;
        // SAFETY: C arrays.
        let (s, d) = unsafe {
            (
                ints(indegree, sources, "sources")?.to_vec(),
                ints(outdegree, destinations, "destinations")?.to_vec(),
            )
        };
        for &x in s.iter().chain(d.iter()) {
            rank_arg(&c, x, "neighbor")?;
        }
        // SAFETY: C arrays.
        let ((sw, w1), (dw, w2)) = unsafe {
            (
                weights(indegree, sourceweights)?,
                weights(outdegree, destweights)?,
            )
        };
        let n = c.dup()?;
        let h = attach(
            n,
            comm_old,
            Topo::Dist {
                sources: s,
                sweights: sw,
                dests: d,
                dweights: dw,
                weighted: w1 || w2,
            },
        )?;
        // SAFETY: C caller's pointer.
        unsafe { put(comm_dist_graph, h, "comm_dist_graph") }
    })
}

/// `MPI_Dist_graph_create`: each rank gives any edges; ranks learn their own in- and
/// out-neighbors by an all-to-all exchange of the edges.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Dist_graph_create(
    comm_old: MPI_Comm,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    w: *const c_int,
    _info: MPI_Info,
    _reorder: c_int,
    comm_dist_graph: *mut MPI_Comm,
) -> c_int {
    guard(comm_old, || {
        let c = lookup(comm_old)?;
        let p = c.size();
        // SAFETY: C arrays.
        let (src, deg) = unsafe { (ints(n, sources, "sources")?, ints(n, degrees, "degrees")?) };
        let total: c_int = deg.iter().sum();
        // SAFETY: C arrays of `total` entries.
        let dst = unsafe { ints(total, destinations, "destinations")? };
        let (wt, weighted) = unsafe { weights(total, w)? };
        // Edges (s -> d, weight) go to both s (as out) and d (as in): [kind, peer, weight].
        let mut out: Vec<Vec<i32>> = vec![Vec::new(); p];
        let mut k = 0;
        for (i, &s) in src.iter().enumerate() {
            rank_arg(&c, s, "source")?;
            for _ in 0..deg[i] {
                let d = dst[k];
                rank_arg(&c, d, "destination")?;
                out[s as usize].extend([0, d, wt[k]]);
                out[d as usize].extend([1, s, wt[k]]);
                k += 1;
            }
        }
        let counts: Vec<usize> = out.iter().map(|v| v.len()).collect();
        let mut rcounts = vec![0usize; p];
        c.alltoall(&counts, &mut rcounts)?;
        let send: Vec<i32> = out.concat();
        let mut recv = vec![0i32; rcounts.iter().sum()];
        let displ = |v: &[usize]| -> Vec<usize> {
            v.iter()
                .scan(0, |a, &x| {
                    let d = *a;
                    *a += x;
                    Some(d)
                })
                .collect()
        };
        c.alltoallv(
            &send,
            &counts,
            &displ(&counts),
            &mut recv,
            &rcounts,
            &displ(&rcounts),
        )?;
        let (mut s, mut sw, mut d, mut dw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for e in recv.chunks(3) {
            if e[0] == 0 {
                d.push(e[1]);
                dw.push(e[2]);
            } else {
                s.push(e[1]);
                sw.push(e[2]);
            }
        }
        let nc = c.dup()?;
        let h = attach(
            nc,
            comm_old,
            Topo::Dist {
                sources: s,
                sweights: sw,
                dests: d,
                dweights: dw,
                weighted,
            },
        )?;
        // SAFETY: C caller's pointer.
        unsafe { put(comm_dist_graph, h, "comm_dist_graph") }
    })
}

/// In- and out-neighbors of this rank, in MPI 4.1 §8.6's order.
fn neighbors(comm: MPI_Comm) -> R<(Arc<TopoComm>, Vec<i32>, Vec<i32>)> {
    let t = need_topo(comm)?;
    let me = lookup(comm)?.rank();
    let (i, o) = match &t.topo {
        Topo::Cart { dims, periods } => {
            let mut v = Vec::new();
            for dir in 0..dims.len() {
                let (s, d) = shift(dims, periods, me as i32, dir, 1);
                v.push(s);
                v.push(d);
            }
            (v.clone(), v)
        }
        Topo::Graph { index, edges } => {
            let v = graph_neighbors(index, edges, me);
            (v.clone(), v)
        }
        Topo::Dist { sources, dests, .. } => (sources.clone(), dests.clone()),
    };
    Ok((t, i, o))
}

/// `MPI_Dist_graph_neighbors_count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors_count(
    comm: MPI_Comm,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    guard(comm, || {
        let t = need_topo(comm)?;
        let Topo::Dist {
            sources,
            dests,
            weighted: w,
            ..
        } = &t.topo
        else {
            return Err(err(
                MPI_ERR_TOPOLOGY,
                "communicator has no MPI_DIST_GRAPH topology",
            ));
        };
        // SAFETY: C caller's pointers.
        unsafe {
            put(indegree, sources.len() as c_int, "indegree")?;
            put(outdegree, dests.len() as c_int, "outdegree")?;
            put(weighted, *w as c_int, "weighted")
        }
    })
}

/// `MPI_Dist_graph_neighbors`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors(
    comm: MPI_Comm,
    maxin: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxout: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    guard(comm, || {
        let t = need_topo(comm)?;
        let Topo::Dist {
            sources: s,
            sweights,
            dests,
            dweights,
            ..
        } = &t.topo
        else {
            return Err(err(
                MPI_ERR_TOPOLOGY,
                "communicator has no MPI_DIST_GRAPH topology",
            ));
        };
        // SAFETY: C arrays; weights may be MPI_UNWEIGHTED.
        unsafe {
            out_ints(sources, maxin, s)?;
            out_ints(destinations, maxout, dests)?;
            if sourceweights as usize > MPI_WEIGHTS_EMPTY {
                out_ints(sourceweights, maxin, sweights)?;
            }
            if destweights as usize > MPI_WEIGHTS_EMPTY {
                out_ints(destweights, maxout, dweights)?;
            }
        }
        Ok(())
    })
}

// ---- neighborhood collectives ------------------------------------------------------

/// Tag of the message a rank sends to out-neighbor `k` (and the tag the receiver
/// expects): Cartesian topologies tag by direction so that a neighbor reached in both
/// directions (a periodic dimension of extent 1 or 2) is told apart; graphs rely on
/// MPI's in-order matching between a pair of ranks.
fn out_tag(t: &Topo, k: usize) -> i32 {
    match t {
        Topo::Cart { .. } => k as i32,
        _ => 0,
    }
}

fn in_tag(t: &Topo, k: usize) -> i32 {
    match t {
        // In-block 2d comes from the negative neighbor, which sent it to its positive
        // direction (its out-block 2d+1); and conversely.
        Topo::Cart { .. } => (k ^ 1) as i32,
        _ => 0,
    }
}

/// One block of a neighborhood exchange: (address, count, datatype).
type Block = (usize, i64, MPI_Datatype);

/// Starts the sends and receives of a neighborhood collective.
fn start_neighbor(comm: MPI_Comm, sends: Vec<Block>, recvs: Vec<Block>) -> R<Started> {
    let (t, ins, outs) = neighbors(comm)?;
    let c = &t.hidden;
    let mut reqs = Vec::new();
    let mut finishes = Vec::new();
    let mut keep: crate::request::Keep = Vec::new();
    for (k, (&src, &(addr, n, dt))) in ins.iter().zip(recvs.iter()).enumerate() {
        if src == MPI_PROC_NULL {
            continue;
        }
        // SAFETY: the C caller's receive block, valid until completion.
        let b = unsafe { recv_buf(addr as *mut u8, n, dt)? };
        // SAFETY: as above.
        let r = unsafe { c.irecv_raw(b.ptr, b.len, src as usize, in_tag(&t.topo, k))? };
        reqs.push(r);
        finishes.push(b);
    }
    for (k, (&dst, &(addr, n, dt))) in outs.iter().zip(sends.iter()).enumerate() {
        if dst == MPI_PROC_NULL {
            continue;
        }
        // SAFETY: the C caller's send block, valid until completion.
        let b = unsafe { send_buf(addr as *const u8, n, dt)? };
        // SAFETY: as above.
        let r = unsafe { c.isend_raw(b.ptr, b.len, dst as usize, out_tag(&t.topo, k))? };
        reqs.push(r);
        keep.push(Box::new(b));
    }
    let fin = Mutex::new(finishes);
    Ok(Started {
        active: Active::Multi(reqs),
        // Received blocks are complete bytes: unpack all of each.
        finish: Some(Box::new(move |_| {
            for b in std::mem::take(&mut *fin.lock().unwrap_or_else(|e| e.into_inner())) {
                let n = b.len;
                b.finish(n)?;
            }
            Ok(())
        })),
        keep,
    })
}

fn degrees(comm: MPI_Comm) -> R<(usize, usize)> {
    let (_, i, o) = neighbors(comm)?;
    Ok((i.len(), o.len()))
}

fn extent(dt: MPI_Datatype) -> R<isize> {
    Ok(info(dt)?.extent)
}

unsafe fn counts_arg<'a>(n: usize, p: *const c_int, what: &str) -> R<&'a [c_int]> {
    // SAFETY: forwarded.
    unsafe { ints(n as c_int, p, what) }
}

fn run(comm: MPI_Comm, s: Started, request: *mut MPI_Request) -> R {
    if request.is_null() {
        let mut h = insert(comm, s);
        // SAFETY: local handle.
        let rc = unsafe { crate::request::MPI_Wait(&mut h, std::ptr::null_mut()) };
        if rc != MPI_SUCCESS {
            return Err(err(rc, "neighborhood collective failed"));
        }
        Ok(())
    } else {
        // SAFETY: C caller's pointer.
        unsafe { put(request, insert(comm, s), "request") }
    }
}

unsafe fn allgather_start(
    sb: *const std::ffi::c_void,
    sc: c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rc: c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
) -> R<Started> {
    let (ni, no) = degrees(comm)?;
    let ext = extent(rt)? * rc as isize;
    let sends = vec![(sb as usize, sc as i64, st); no];
    let recvs = (0..ni)
        .map(|k| ((rb as isize + k as isize * ext) as usize, rc as i64, rt))
        .collect();
    start_neighbor(comm, sends, recvs)
}

unsafe fn allgather_impl(
    sb: *const std::ffi::c_void,
    sc: c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rc: c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
    req: *mut MPI_Request,
) -> R {
    // SAFETY: forwarded.
    run(
        comm,
        unsafe { allgather_start(sb, sc, st, rb, rc, rt, comm)? },
        req,
    )
}

/// `MPI_Neighbor_allgather`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_allgather(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        allgather_impl(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            comm,
            std::ptr::null_mut(),
        )
    })
}

/// `MPI_Ineighbor_allgather`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Ineighbor_allgather(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        allgather_impl(
            sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request,
        )
    })
}

unsafe fn allgatherv_start(
    sb: *const std::ffi::c_void,
    sc: c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rcs: *const c_int,
    displs: *const c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
) -> R<Started> {
    let (ni, no) = degrees(comm)?;
    let ext = extent(rt)?;
    // SAFETY: C arrays of indegree ints.
    let (rc, dp) = unsafe {
        (
            counts_arg(ni, rcs, "recvcounts")?,
            counts_arg(ni, displs, "displs")?,
        )
    };
    let sends = vec![(sb as usize, sc as i64, st); no];
    let recvs = (0..ni)
        .map(|k| {
            (
                (rb as isize + dp[k] as isize * ext) as usize,
                rc[k] as i64,
                rt,
            )
        })
        .collect();
    start_neighbor(comm, sends, recvs)
}

unsafe fn allgatherv_impl(
    sb: *const std::ffi::c_void,
    sc: c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rcs: *const c_int,
    displs: *const c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
    req: *mut MPI_Request,
) -> R {
    // SAFETY: forwarded.
    run(
        comm,
        unsafe { allgatherv_start(sb, sc, st, rb, rcs, displs, rt, comm)? },
        req,
    )
}

/// `MPI_Neighbor_allgatherv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_allgatherv(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        allgatherv_impl(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcounts,
            displs,
            recvtype,
            comm,
            std::ptr::null_mut(),
        )
    })
}

/// `MPI_Ineighbor_allgatherv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Ineighbor_allgatherv(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        allgatherv_impl(
            sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request,
        )
    })
}

unsafe fn alltoall_start(
    sb: *const std::ffi::c_void,
    sc: c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rc: c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
) -> R<Started> {
    let (ni, no) = degrees(comm)?;
    let (se, re) = (extent(st)? * sc as isize, extent(rt)? * rc as isize);
    let sends = (0..no)
        .map(|k| ((sb as isize + k as isize * se) as usize, sc as i64, st))
        .collect();
    let recvs = (0..ni)
        .map(|k| ((rb as isize + k as isize * re) as usize, rc as i64, rt))
        .collect();
    start_neighbor(comm, sends, recvs)
}

unsafe fn alltoall_impl(
    sb: *const std::ffi::c_void,
    sc: c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rc: c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
    req: *mut MPI_Request,
) -> R {
    // SAFETY: forwarded.
    run(
        comm,
        unsafe { alltoall_start(sb, sc, st, rb, rc, rt, comm)? },
        req,
    )
}

/// `MPI_Neighbor_alltoall`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_alltoall(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        alltoall_impl(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            comm,
            std::ptr::null_mut(),
        )
    })
}

/// `MPI_Ineighbor_alltoall`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Ineighbor_alltoall(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        alltoall_impl(
            sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn alltoallv_start(
    sb: *const std::ffi::c_void,
    scs: *const c_int,
    sds: *const c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rcs: *const c_int,
    rds: *const c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
) -> R<Started> {
    let (ni, no) = degrees(comm)?;
    let (se, re) = (extent(st)?, extent(rt)?);
    // SAFETY: C arrays of outdegree / indegree ints.
    let (sc, sd, rc, rd) = unsafe {
        (
            counts_arg(no, scs, "sendcounts")?,
            counts_arg(no, sds, "sdispls")?,
            counts_arg(ni, rcs, "recvcounts")?,
            counts_arg(ni, rds, "rdispls")?,
        )
    };
    let sends = (0..no)
        .map(|k| {
            (
                (sb as isize + sd[k] as isize * se) as usize,
                sc[k] as i64,
                st,
            )
        })
        .collect();
    let recvs = (0..ni)
        .map(|k| {
            (
                (rb as isize + rd[k] as isize * re) as usize,
                rc[k] as i64,
                rt,
            )
        })
        .collect();
    start_neighbor(comm, sends, recvs)
}

unsafe fn alltoallv_impl(
    sb: *const std::ffi::c_void,
    scs: *const c_int,
    sds: *const c_int,
    st: MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rcs: *const c_int,
    rds: *const c_int,
    rt: MPI_Datatype,
    comm: MPI_Comm,
    req: *mut MPI_Request,
) -> R {
    // SAFETY: forwarded.
    run(
        comm,
        unsafe { alltoallv_start(sb, scs, sds, st, rb, rcs, rds, rt, comm)? },
        req,
    )
}

/// `MPI_Neighbor_alltoallv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_alltoallv(
    sendbuf: *const std::ffi::c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        alltoallv_impl(
            sendbuf,
            sendcounts,
            sdispls,
            sendtype,
            recvbuf,
            recvcounts,
            rdispls,
            recvtype,
            comm,
            std::ptr::null_mut(),
        )
    })
}

/// `MPI_Ineighbor_alltoallv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Ineighbor_alltoallv(
    sendbuf: *const std::ffi::c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        alltoallv_impl(
            sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
            request,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn alltoallw_start(
    sb: *const std::ffi::c_void,
    scs: *const c_int,
    sds: *const MPI_Aint,
    sts: *const MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rcs: *const c_int,
    rds: *const MPI_Aint,
    rts: *const MPI_Datatype,
    comm: MPI_Comm,
) -> R<Started> {
    let (ni, no) = degrees(comm)?;
    let arr = |p: *const usize, n: usize| -> R<Vec<usize>> {
        if n > 0 && p.is_null() {
            return Err(err(MPI_ERR_ARG, "array argument is a null pointer"));
        }
        // SAFETY: C arrays of n entries.
        Ok(if n == 0 {
            Vec::new()
        } else {
            unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
        })
    };
    // SAFETY: C arrays.
    let (sc, rc) = unsafe {
        (
            counts_arg(no, scs, "sendcounts")?,
            counts_arg(ni, rcs, "recvcounts")?,
        )
    };
    let (sd, rd) = (arr(sds as *const usize, no)?, arr(rds as *const usize, ni)?);
    let (st, rt) = (arr(sts, no)?, arr(rts, ni)?);
    // Displacements of alltoallw are in bytes.
    let sends = (0..no)
        .map(|k| ((sb as isize + sd[k] as isize) as usize, sc[k] as i64, st[k]))
        .collect();
    let recvs = (0..ni)
        .map(|k| ((rb as isize + rd[k] as isize) as usize, rc[k] as i64, rt[k]))
        .collect();
    start_neighbor(comm, sends, recvs)
}

unsafe fn alltoallw_impl(
    sb: *const std::ffi::c_void,
    scs: *const c_int,
    sds: *const MPI_Aint,
    sts: *const MPI_Datatype,
    rb: *mut std::ffi::c_void,
    rcs: *const c_int,
    rds: *const MPI_Aint,
    rts: *const MPI_Datatype,
    comm: MPI_Comm,
    req: *mut MPI_Request,
) -> R {
    // SAFETY: forwarded.
    run(
        comm,
        unsafe { alltoallw_start(sb, scs, sds, sts, rb, rcs, rds, rts, comm)? },
        req,
    )
}

/// `MPI_Neighbor_alltoallw` (displacements in bytes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_alltoallw(
    sendbuf: *const std::ffi::c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        alltoallw_impl(
            sendbuf,
            sendcounts,
            sdispls,
            sendtypes,
            recvbuf,
            recvcounts,
            rdispls,
            recvtypes,
            comm,
            std::ptr::null_mut(),
        )
    })
}

/// `MPI_Ineighbor_alltoallw`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Ineighbor_alltoallw(
    sendbuf: *const std::ffi::c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: C caller's buffers.
    guard(comm, || unsafe {
        alltoallw_impl(
            sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
            request,
        )
    })
}

/// Gives `new` (a dup of `old`) the topology of `old`, with its own hidden duplicate
/// (`MPI_Comm_dup` keeps the topology, MPI 4.1 §7.4.2). Collective when `old` has one.
///
/// # Errors
/// As `Communicator::dup`.
pub fn copy_topology(old: MPI_Comm, new: MPI_Comm) -> R {
    let Some(t) = topo_of(old) else { return Ok(()) };
    let hidden = t.hidden.dup()?;
    TOPOS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(
            new,
            Arc::new(TopoComm {
                topo: t.topo.clone(),
                hidden,
            }),
        );
    Ok(())
}

// ---- persistent neighborhood collectives (MPI 4.1 §8.7) ---------------------------
//
// `MPI_Neighbor_*_init` makes an inactive persistent request; each `MPI_Start` runs the
// nonblocking form on the same buffers. The count, displacement and type arrays are
// copied at init (the standard lets the caller change or free them afterwards); the
// buffers themselves are the caller's until the request is freed.

/// A C array of `n` elements as an owned copy (`n == 0`: empty, the pointer unread).
///
/// # Safety
/// `p` valid for `n` reads when `n > 0`.
unsafe fn copied<T: Copy>(n: usize, p: *const T, what: &str) -> R<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            format!("{what} is a null pointer with {n} neighbors"),
        ));
    }
    // SAFETY: caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

/// Registers `start` as the persistent request of `comm` in `*request`.
///
/// # Safety
/// `request` valid for a write.
unsafe fn persistent(
    comm: MPI_Comm,
    request: *mut MPI_Request,
    start: impl Fn() -> R<Started> + Send + Sync + 'static,
) -> R {
    // Errors of the arguments that do not change between starts show up here.
    degrees(comm)?;
    let h = crate::request::insert_persistent(comm, Box::new(start));
    // SAFETY: caller's contract.
    unsafe { put(request, h, "request") }
}

/// `MPI_Neighbor_allgather_init`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_allgather_init(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    _info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    let (sb, rb) = (sendbuf as usize, recvbuf as usize);
    // SAFETY: the C caller's buffers stay valid while the request lives (MPI's contract).
    guard(comm, || unsafe {
        persistent(comm, request, move || {
            allgather_start(
                sb as _, sendcount, sendtype, rb as _, recvcount, recvtype, comm,
            )
        })
    })
}

/// `MPI_Neighbor_alltoall_init`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_alltoall_init(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    _info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    let (sb, rb) = (sendbuf as usize, recvbuf as usize);
    // SAFETY: as MPI_Neighbor_allgather_init.
    guard(comm, || unsafe {
        persistent(comm, request, move || {
            alltoall_start(
                sb as _, sendcount, sendtype, rb as _, recvcount, recvtype, comm,
            )
        })
    })
}

/// `MPI_Neighbor_allgatherv_init`: `recvcounts` and `displs` (indegree ints each) are
/// copied.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_allgatherv_init(
    sendbuf: *const std::ffi::c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    _info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    let (sb, rb) = (sendbuf as usize, recvbuf as usize);
    // SAFETY: C arrays of indegree ints; buffers as MPI_Neighbor_allgather_init.
    guard(comm, || unsafe {
        let (ni, _) = degrees(comm)?;
        let rc = copied(ni, recvcounts, "recvcounts")?;
        let dp = copied(ni, displs, "displs")?;
        persistent(comm, request, move || {
            allgatherv_start(
                sb as _,
                sendcount,
                sendtype,
                rb as _,
                rc.as_ptr(),
                dp.as_ptr(),
                recvtype,
                comm,
            )
        })
    })
}

/// `MPI_Neighbor_alltoallv_init`: the count and displacement arrays (outdegree ints for
/// the send side, indegree for the receive side) are copied.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_alltoallv_init(
    sendbuf: *const std::ffi::c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    _info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    let (sb, rb) = (sendbuf as usize, recvbuf as usize);
    // SAFETY: C arrays of the degrees' lengths; buffers as MPI_Neighbor_allgather_init.
    guard(comm, || unsafe {
        let (ni, no) = degrees(comm)?;
        let sc = copied(no, sendcounts, "sendcounts")?;
        let sd = copied(no, sdispls, "sdispls")?;
        let rc = copied(ni, recvcounts, "recvcounts")?;
        let rd = copied(ni, rdispls, "rdispls")?;
        persistent(comm, request, move || {
            alltoallv_start(
                sb as _,
                sc.as_ptr(),
                sd.as_ptr(),
                sendtype,
                rb as _,
                rc.as_ptr(),
                rd.as_ptr(),
                recvtype,
                comm,
            )
        })
    })
}

/// `MPI_Neighbor_alltoallw_init`: the count, byte-displacement and type arrays are
/// copied.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Neighbor_alltoallw_init(
    sendbuf: *const std::ffi::c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut std::ffi::c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    _info: MPI_Info,
    request: *mut MPI_Request,
) -> c_int {
    let (sb, rb) = (sendbuf as usize, recvbuf as usize);
    // SAFETY: C arrays of the degrees' lengths; buffers as MPI_Neighbor_allgather_init.
    guard(comm, || unsafe {
        let (ni, no) = degrees(comm)?;
        let sc = copied(no, sendcounts, "sendcounts")?;
        let sd = copied(no, sdispls, "sdispls")?;
        let st = copied(no, sendtypes, "sendtypes")?;
        let rc = copied(ni, recvcounts, "recvcounts")?;
        let rd = copied(ni, rdispls, "rdispls")?;
        let rt = copied(ni, recvtypes, "recvtypes")?;
        persistent(comm, request, move || {
            alltoallw_start(
                sb as _,
                sc.as_ptr(),
                sd.as_ptr(),
                st.as_ptr(),
                rb as _,
                rc.as_ptr(),
                rd.as_ptr(),
                rt.as_ptr(),
                comm,
            )
        })
    })
}
