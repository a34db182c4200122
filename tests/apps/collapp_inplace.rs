//! The `inplace <count>...` scenario of rw-collapp: every in-place collective
//! (MPI_IN_PLACE forms), blocking and nonblocking, against the out-of-place form on the
//! same inputs (bit for bit, on non-integer f32 sums whose rounding depends on the
//! reduction order) and against the sequential reference (exact i64 sums, a
//! non-commutative operation); and their argument errors.

use rankwire::{Communicator, Error, Op, Result, wait_all_coll};

use super::{concat, expect, val, vals};

/// Rank `r`'s non-integer input element `i` (sums round differently in different
/// orders, so equal bits mean the same reduction order).
fn fval(r: usize, i: usize) -> f32 {
    ((r * 7919 + i * 104_729) as f32).sin() * 1e3 / (1 + i % 13) as f32
}

fn fvals(r: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| fval(r, i)).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Every in-place form at `count` elements (per rank, or per block).
pub(crate) fn inplace(w: &Communicator, count: usize) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let c = |what: &str| format!("{what} (p={p}, count={count}, rank {me})");
    let x = fvals(me, count);
    let sum: Vec<i64> = (0..count)
        .map(|i| (0..p).map(|r| val(r, i)).sum())
        .collect();

    // allreduce: blocking (the direct path for small vectors, single copy for large
    // ones), nonblocking (always the schedule), each against the out-of-place bits of
    // the same form.
    let mut out = vec![0f32; count];
    w.allreduce(&x, &mut out, Op::Sum)?;
    let mut buf = x.clone();
    w.allreduce_in_place(&mut buf, Op::Sum)?;
    expect(&c("allreduce_in_place bits"), &bits(&buf), &bits(&out))?;
    let mut nout = vec![0f32; count];
    w.iallreduce(&x, &mut nout, Op::Sum)?.wait()?;
    let mut nb = x.clone();
    w.iallreduce_in_place(&mut nb, Op::Sum)?.wait()?;
    expect(&c("iallreduce_in_place bits"), &bits(&nb), &bits(&nout))?;
    let mut ib = vals(me, count);
    w.allreduce_in_place(&mut ib, Op::Sum)?;
    expect(&c("allreduce_in_place i64 sum"), &ib, &sum)?;
    let mut mx = vals(me, count);
    w.iallreduce_in_place(&mut mx, Op::Max)?.wait()?;
    expect(
        &c("iallreduce_in_place max"),
        &mx,
        &(0..count)
            .map(|i| (0..p).map(|r| val(r, i)).max().unwrap_or(0))
            .collect(),
    )?;
    let n64 = count.min(64);
    let mut ord = vec![[me as i64, me as i64]; n64];
    w.allreduce_in_place(&mut ord, concat())?;
    expect(
        &c("allreduce_in_place non-commutative"),
        &ord,
        &vec![[0, p as i64 - 1]; n64],
    )?;

    // reduce: the root gets the out-of-place bits, the others keep their input.
    for root in [0, p - 1, p / 2] {
        let mut out = vec![0f32; if me == root { count } else { 0 }];
        w.reduce(&x, &mut out, Op::Sum, root)?;
        let mut buf = x.clone();
        w.reduce_in_place(&mut buf, Op::Sum, root)?;
        let mut nb = x.clone();
        w.ireduce_in_place(&mut nb, Op::Sum, root)?.wait()?;
        let want = if me == root { bits(&out) } else { bits(&x) };
        expect(
            &c(&format!("reduce_in_place root {root}")),
            &bits(&buf),
            &want,
        )?;
        expect(
            &c(&format!("ireduce_in_place root {root}")),
            &bits(&nb),
            &want,
        )?;
        let mut ord = vec![[me as i64, me as i64]; n64];
        w.reduce_in_place(&mut ord, concat(), root)?;
        let want = if me == root {
            vec![[0, p as i64 - 1]; n64]
        } else {
            vec![[me as i64, me as i64]; n64]
        };
        expect(
            &c(&format!("reduce_in_place non-commutative root {root}")),
            &ord,
            &want,
        )?;
    }

    // allgather: the own block in place, garbage elsewhere that must be overwritten.
    let all: Vec<i64> = (0..p).flat_map(|r| vals(r, count)).collect();
    let mut out = vec![0i64; p * count];
    w.allgather(&vals(me, count), &mut out)?;
    expect(&c("allgather (reference)"), &out, &all)?;
    let placed = || {
        let mut v = vec![-999i64; p * count];
        v[me * count..(me + 1) * count].copy_from_slice(&vals(me, count));
        v
    };
    let mut buf = placed();
    w.allgather_in_place(&mut buf)?;
    expect(&c("allgather_in_place"), &buf, &all)?;
    let mut nb = placed();
    w.iallgather_in_place(&mut nb)?.wait()?;
    expect(&c("iallgather_in_place"), &nb, &all)?;

    // reduce_scatter_block: the first `count` elements are this rank's block.
    let rin: Vec<f32> = (0..p * count).map(|i| fval(me, i)).collect();
    let mut out = vec![0f32; count];
    w.reduce_scatter_block(&rin, &mut out, Op::Sum)?;
    let mut buf = rin.clone();
    w.reduce_scatter_block_in_place(&mut buf, Op::Sum)?;
    expect(
        &c("reduce_scatter_block_in_place bits"),
        &bits(&buf[..count]),
        &bits(&out),
    )?;
    let mut nb = rin.clone();
    w.ireduce_scatter_block_in_place(&mut nb, Op::Sum)?.wait()?;
    expect(
        &c("ireduce_scatter_block_in_place bits"),
        &bits(&nb[..count]),
        &bits(&out),
    )?;
    let mut ib: Vec<i64> = (0..p * count).map(|i| val(me, i)).collect();
    w.reduce_scatter_block_in_place(&mut ib, Op::Sum)?;
    expect(
        &c("reduce_scatter_block_in_place i64 sum"),
        &ib[..count].to_vec(),
        &(0..count)
            .map(|t| (0..p).map(|r| val(r, me * count + t)).sum())
            .collect(),
    )?;
    let mut ord = vec![[me as i64, me as i64]; 2 * p];
    w.reduce_scatter_block_in_place(&mut ord, concat())?;
    expect(
        &c("reduce_scatter_block_in_place non-commutative"),
        &ord[..2].to_vec(),
        &vec![[0, p as i64 - 1]; 2],
    )?;

    // scan and exscan; exscan leaves rank 0's buffer as it was.
    let mut out = vec![0f32; count];
    w.scan(&x, &mut out, Op::Sum)?;
    let mut buf = x.clone();
    w.scan_in_place(&mut buf, Op::Sum)?;
    expect(&c("scan_in_place bits"), &bits(&buf), &bits(&out))?;
    let mut nb = x.clone();
    w.iscan_in_place(&mut nb, Op::Sum)?.wait()?;
    expect(&c("iscan_in_place bits"), &bits(&nb), &bits(&out))?;
    let mut out = x.clone();
    w.exscan(&x, &mut out, Op::Sum)?;
    let mut buf = x.clone();
    w.exscan_in_place(&mut buf, Op::Sum)?;
    expect(&c("exscan_in_place bits"), &bits(&buf), &bits(&out))?;
    let mut nb = x.clone();
    w.iexscan_in_place(&mut nb, Op::Sum)?.wait()?;
    expect(&c("iexscan_in_place bits"), &bits(&nb), &bits(&out))?;
    if me == 0 {
        expect(&c("exscan_in_place on rank 0"), &bits(&buf), &bits(&x))?;
    }
    let mut ex = vals(me, count);
    w.exscan_in_place(&mut ex, Op::Sum)?;
    let exw: Vec<i64> = if me == 0 {
        vals(0, count)
    } else {
        (0..count)
            .map(|i| (0..me).map(|r| val(r, i)).sum())
            .collect()
    };
    expect(&c("exscan_in_place i64 sum"), &ex, &exw)?;
    let mut so = vec![[me as i64, me as i64]; 3];
    w.scan_in_place(&mut so, concat())?;
    expect(
        &c("scan_in_place non-commutative"),
        &so,
        &vec![[0, me as i64]; 3],
    )?;

    // Several nonblocking in-place collectives in flight at once, waited together.
    let mut a = vals(me, count);
    let mut g = placed();
    let mut s = vals(me, count);
    let reqs = vec![
        w.iallreduce_in_place(&mut a, Op::Sum)?,
        w.iallgather_in_place(&mut g)?,
        w.iscan_in_place(&mut s, Op::Sum)?,
    ];
    wait_all_coll(reqs)?;
    expect(&c("overlapped iallreduce_in_place"), &a, &sum)?;
    expect(&c("overlapped iallgather_in_place"), &g, &all)?;
    expect(
        &c("overlapped iscan_in_place"),
        &s,
        &(0..count)
            .map(|i| (0..=me).map(|r| val(r, i)).sum())
            .collect(),
    )?;

    errors(w, count)
}

/// Wrong arguments are `Usage` errors naming the in-place function, on every rank (all
/// ranks pass the same wrong arguments, so with `RANKWIRE_COLL_CHECK=1` too).
fn errors(w: &Communicator, count: usize) -> Result<()> {
    let p = w.size();
    let usage = |what: &str, r: Result<()>, needle: &str| -> Result<()> {
        match r {
            Err(Error::Usage(m)) if m.contains(needle) => Ok(()),
            other => expect(
                what,
                &format!("{other:?}"),
                &format!("Usage error with {needle:?}"),
            ),
        }
    };
    let mut b = vec![1i64; count.max(1)];
    usage(
        "reduce_in_place with root = size",
        w.reduce_in_place(&mut b, Op::Sum, p),
        &format!("reduce_in_place: root {p} is out of range for a communicator of size {p}"),
    )?;
    if p > 1 {
        let len = p * count + 1;
        let mut b = vec![0i64; len];
        usage(
            "allgather_in_place of a length not a multiple of size",
            w.allgather_in_place(&mut b),
            &format!(
                "allgather_in_place: the buffer holds {len} elements, not a multiple of the communicator size {p}"
            ),
        )?;
        usage(
            "ireduce_scatter_block_in_place of a length not a multiple of size",
            w.ireduce_scatter_block_in_place(&mut b, Op::Sum)
                .and_then(|r| r.wait()),
            &format!(
                "reduce_scatter_block_in_place: the buffer holds {len} elements, not a multiple of the communicator size {p}"
            ),
        )?;
    }
    // The communicator still works after the errors.
    let mut one = [1i64];
    w.allreduce_in_place(&mut one, Op::Sum)?;
    expect("allreduce_in_place after errors", &one[0], &(p as i64))
}
