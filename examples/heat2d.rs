//! heat2d: the 2D heat equation by Jacobi iteration on an NX × NY grid (NY rows of NX
//! cells, boundary included), rows decomposed across ranks with halo exchange by
//! nonblocking send/recv.
//!
//! The top boundary row is held at 1.0, the other boundaries at 0.0, the interior
//! starts at 0.0. Each iteration sets every interior cell to the mean of its four
//! neighbours. After ITERATIONS steps rank 0 gathers the grid and prints the residual
//! (the 2-norm of the discrete Laplacian over the interior) and `checksum <value>` (the
//! sum of all cells in row-major order). Every cell sees the same floating-point
//! operations whatever the decomposition, so both lines are identical for any rank
//! count, which the tests check against a 1-rank run.
//!
//! Usage: `rwrun -n 4 target/release/examples/heat2d NX NY ITERATIONS`

use std::time::Instant;

use rankwire::Result;

const USAGE: &str = "usage: heat2d NX NY ITERATIONS   (NX, NY >= 3; NY - 2 >= number of ranks)";
const TAG_UP: i32 = 1;
const TAG_DOWN: i32 = 2;
const TAG_GATHER: i32 = 3;

fn main() {
    if let Err(e) = run() {
        // Display, not Debug: the message names the layer and the fix.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let nx: usize = rankwire_examples::arg(1, 512, USAGE);
    let ny: usize = rankwire_examples::arg(2, 512, USAGE);
    let iters: usize = rankwire_examples::arg(3, 200, USAGE);
    if nx < 3 || ny < 3 {
        rankwire_examples::usage_exit(USAGE);
    }
    let universe = rankwire::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let interior = ny - 2;
    if interior < size {
        rankwire_examples::usage_exit(&format!(
            "heat2d: {interior} interior rows cannot be split over {size} ranks\n{USAGE}"
        ));
    }
    // Rows [first, first + rows) of the global grid (interior rows 1..ny-1) are ours.
    let (first, rows) = block(interior, size, rank);
    let first = first + 1;
    // Local array: rows + 2 halo rows, nx columns.
    let mut u = vec![0.0f64; (rows + 2) * nx];
    let mut v = u.clone();
    if first == 1 {
        u[..nx].fill(1.0); // the halo above our first row is the hot top boundary
        v[..nx].fill(1.0);
    }
    let up = (rank > 0).then(|| rank - 1);
    let down = (rank + 1 < size).then(|| rank + 1);
    let t = Instant::now();
    for _ in 0..iters {
        exchange_halos(&world, &mut u, nx, rows, up, down)?;
        for i in 1..=rows {
            for j in 1..nx - 1 {
                let c = i * nx + j;
                v[c] = 0.25 * (u[c - nx] + u[c + nx] + u[c - 1] + u[c + 1]);
            }
        }
        // Keep boundary columns and halos; swap interiors.
        std::mem::swap(&mut u, &mut v);
    }
    let elapsed = t.elapsed();
    // Gather full grid at rank 0.
    if rank == 0 {
        let mut grid = vec![0.0f64; ny * nx];
        grid[..nx].fill(1.0);
        grid[nx * first..nx * (first + rows)].copy_from_slice(&u[nx..nx * (rows + 1)]);
        for r in 1..size {
            let (f, n) = block(interior, size, r);
            let f = f + 1;
            world.recv(&mut grid[nx * f..nx * (f + n)], r, TAG_GATHER)?;
        }
        let (residual, checksum) = summarize(&grid, nx, ny);
        println!(
            "heat2d: {nx}x{ny} grid, {iters} iterations, {size} ranks, {:.3} s",
            elapsed.as_secs_f64()
        );
        println!("residual {residual:.15e}");
        println!("checksum {checksum:.15e}");
    } else {
        world.send(&u[nx..nx * (rows + 1)], 0, TAG_GATHER)?;
    }
    universe.finalize()
}

/// Rows `[first, first + n)` of `total` that `rank` of `size` owns (block distribution,
/// the first `total % size` ranks get one extra row).
fn block(total: usize, size: usize, rank: usize) -> (usize, usize) {
    let base = total / size;
    let extra = total % size;
    let n = base + usize::from(rank < extra);
    let first = rank * base + rank.min(extra);
    (first, n)
}

fn exchange_halos(
    world: &rankwire::Communicator,
    u: &mut [f64],
    nx: usize,
    rows: usize,
    up: Option<usize>,
    down: Option<usize>,
) -> Result<()> {
    // Split the array into: top halo | our rows | bottom halo.
    let (top_halo, rest) = u.split_at_mut(nx);
    let (ours, bottom_halo) = rest.split_at_mut(rows * nx);
    let first_row = &ours[..nx];
    let last_row = &ours[(rows - 1) * nx..];
    // The four operations of the exchange in one request set, completed together.
    let mut reqs = rankwire::RequestSet::with_capacity(4);
    if let Some(p) = up {
        reqs.irecv(world, top_halo, p, TAG_DOWN)?;
        reqs.isend(world, first_row, p, TAG_UP)?;
    }
    if let Some(n) = down {
        reqs.irecv(world, bottom_halo, n, TAG_UP)?;
        reqs.isend(world, last_row, n, TAG_DOWN)?;
    }
    reqs.wait_all()?;
    Ok(())
}

fn summarize(grid: &[f64], nx: usize, ny: usize) -> (f64, f64) {
    let mut r2 = 0.0f64;
    for i in 1..ny - 1 {
        for j in 1..nx - 1 {
            let c = i * nx + j;
            let lap = grid[c - nx] + grid[c + nx] + grid[c - 1] + grid[c + 1] - 4.0 * grid[c];
            r2 += lap * lap;
        }
    }
    let checksum: f64 = grid.iter().sum();
    (r2.sqrt(), checksum)
}
