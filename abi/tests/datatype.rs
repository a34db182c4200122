//! Derived datatypes through the exported C functions, without `MPI_Init`: layouts of
//! every constructor against hand-computed values (MPI 4.1 §5.1 examples and odd
//! cases: negative strides and extents, resized, nested, struct padding — the values
//! MPICH 5.0.2's `libmpi_abi.so.1` gives for the same calls), element counts of a
//! status, envelopes and contents, names, freeing, bad input, and pack/unpack round
//! trips over random layouts checked against an independent model of the type map.

use mpi_abi::consts::*;
use mpi_abi::datatype::{TYPES, for_comm, info};
use mpi_abi::dtype_ctor_c::*;
use mpi_abi::dtype_pack::*;
use mpi_abi::dtype_query::*;
use mpi_abi::request::{set_status_bytes, status_bytes};
use proptest::prelude::*;
use std::ffi::{CStr, c_int};
use std::ptr::{null, null_mut};

const CHAR: MPI_Datatype = 0x243;
const SHORT: MPI_Datatype = 0x208;
const INT: MPI_Datatype = 0x209;
const FLOAT: MPI_Datatype = 0x210;
const DOUBLE: MPI_Datatype = 0x214;
const LONG_DOUBLE: MPI_Datatype = 0x220;
const DOUBLE_INT: MPI_Datatype = 0x229;
const BYTE: MPI_Datatype = 0x247;

/// Errors come back as return codes (the default handler would end the process).
fn setup() {
    mpi_abi::error::set_handler(MPI_COMM_SELF, MPI_ERRORS_RETURN).unwrap();
    mpi_abi::error::set_handler(MPI_COMM_WORLD, MPI_ERRORS_RETURN).unwrap();
}

fn ok(rc: c_int) {
    assert_eq!(
        rc,
        MPI_SUCCESS,
        "call failed: {:?}",
        mpi_abi::error::last_message(rc)
    );
}

/// (lb, extent, true_lb, true_extent, size) of a type.
type Shape = (isize, isize, isize, isize, i64);

/// The [`Shape`] through the C queries.
fn shape(t: MPI_Datatype) -> Shape {
    let (mut lb, mut ex, mut tlb, mut tex) = (0, 0, 0, 0);
    let mut sz: MPI_Count = 0;
    unsafe {
        ok(MPI_Type_get_extent(t, &mut lb, &mut ex));
        ok(MPI_Type_get_true_extent(t, &mut tlb, &mut tex));
        ok(MPI_Type_size_c(t, &mut sz));
    }
    (lb, ex, tlb, tex, sz)
}

fn vector(count: c_int, bl: c_int, stride: c_int, old: MPI_Datatype) -> MPI_Datatype {
    let mut t = 0;
    ok(unsafe { MPI_Type_vector(count, bl, stride, old, &mut t) });
    t
}

fn resized(old: MPI_Datatype, lb: isize, ex: isize) -> MPI_Datatype {
    let mut t = 0;
    ok(unsafe { MPI_Type_create_resized(old, lb, ex, &mut t) });
    t
}

fn strukt(bl: &[c_int], d: &[isize], ty: &[MPI_Datatype]) -> MPI_Datatype {
    let mut t = 0;
    ok(unsafe {
        MPI_Type_create_struct(
            bl.len() as c_int,
            bl.as_ptr(),
            d.as_ptr(),
            ty.as_ptr(),
            &mut t,
        )
    });
    t
}

fn free(mut t: MPI_Datatype) {
    ok(unsafe { MPI_Type_free(&mut t) });
    assert_eq!(t, MPI_DATATYPE_NULL);
}

#[test]
fn vector_and_contiguous_layouts() {
    setup();
    // MPI 4.1 §5.1.2 example: vector(2, 3, 4) of a type with extent 16 ({double, char}).
    let dc = strukt(&[1, 1], &[0, 8], &[DOUBLE, CHAR]);
    assert_eq!(shape(dc), (0, 16, 0, 9, 9));
    let v = vector(2, 3, 4, dc);
    assert_eq!(shape(v), (0, 112, 0, 105, 54));
    let segs = &info(v).unwrap().segments;
    assert_eq!(segs.len(), 6);
    assert_eq!(segs[0], (0, 9));
    assert_eq!(segs[3], (64, 9));
    // Negative stride: blocks at 0, -16, -32.
    let n = vector(3, 2, -4, INT);
    assert_eq!(shape(n), (-32, 40, -32, 40, 24));
    assert_eq!(info(n).unwrap().segments, vec![(0, 8), (-16, 8), (-32, 8)]);
    // stride == blocklength: one merged segment.
    let c = vector(4, 2, 2, DOUBLE);
    assert_eq!(info(c).unwrap().segments, vec![(0, 64)]);
    assert_eq!(info(c).unwrap().contiguous_span(3), Some((0, 192)));
    // Zero count.
    let z = vector(0, 2, 4, INT);
    assert_eq!(shape(z), (0, 0, 0, 0, 0));
    // hvector in bytes.
    let mut h = 0;
    ok(unsafe { MPI_Type_create_hvector(3, 1, 6, SHORT, &mut h) });
    assert_eq!(shape(h), (0, 14, 0, 14, 6));
    assert_eq!(info(h).unwrap().segments, vec![(0, 2), (6, 2), (12, 2)]);
    // contiguous of a negative-extent type.
    let r = resized(INT, 4, -8);
    assert_eq!(shape(r), (4, -8, 0, 4, 4));
    let mut cr = 0;
    ok(unsafe { MPI_Type_contiguous(3, r, &mut cr) });
    assert_eq!(shape(cr), (-12, 8, -16, 20, 12));
    // vector of a resized type with a negative lb.
    let rd = resized(DOUBLE, -4, 20);
    let vr = vector(2, 2, 3, rd);
    assert_eq!(shape(vr), (-4, 100, 0, 88, 32));
    for t in [dc, v, n, c, z, h, r, cr, rd, vr] {
        free(t);
    }
}

#[test]
fn indexed_family_layouts() {
    setup();
    // A zero-length block does not count for the bounds.
    let mut t = 0;
    let bl = [2, 0, 1];
    let d = [5, -10, 1];
    ok(unsafe { MPI_Type_indexed(3, bl.as_ptr(), d.as_ptr(), INT, &mut t) });
    assert_eq!(shape(t), (4, 24, 4, 24, 12));
    assert_eq!(info(t).unwrap().segments, vec![(20, 8), (4, 4)]);
    let mut h = 0;
    let hbl = [2, 1];
    let hd: [isize; 2] = [100, -7];
    ok(unsafe { MPI_Type_create_hindexed(2, hbl.as_ptr(), hd.as_ptr(), SHORT, &mut h) });
    assert_eq!(shape(h), (-7, 111, -7, 111, 6));
    let mut ib = 0;
    let id = [4, -2, 0];
    ok(unsafe { MPI_Type_create_indexed_block(3, 2, id.as_ptr(), FLOAT, &mut ib) });
    assert_eq!(shape(ib), (-8, 32, -8, 32, 24));
    assert_eq!(info(ib).unwrap().segments, vec![(16, 8), (-8, 16)]);
    let mut hb = 0;
    let hbd: [isize; 3] = [0, 4, 3];
    ok(unsafe { MPI_Type_create_hindexed_block(3, 1, hbd.as_ptr(), INT, &mut hb) });
    assert_eq!(shape(hb), (0, 8, 0, 8, 12));
    assert_eq!(
        info(hb).unwrap().segments,
        vec![(0, 8), (3, 4)],
        "adjacent runs merge, overlapping ones stay in type-map order"
    );
    // Large-count forms give the same layouts.
    let mut tc = 0;
    let blc = [2i64, 0, 1];
    let dc = [5i64, -10, 1];
    ok(unsafe { MPI_Type_indexed_c(3, blc.as_ptr(), dc.as_ptr(), INT, &mut tc) });
    assert_eq!(shape(tc), shape(t));
    for x in [t, h, ib, hb, tc] {
        free(x);
    }
}

#[test]
fn struct_padding_follows_mpich() {
    setup();
    let cases: Vec<(MPI_Datatype, Shape)> = vec![
        (strukt(&[1, 1], &[0, 8], &[DOUBLE, CHAR]), (0, 16, 0, 9, 9)),
        (
            strukt(&[1, 1], &[-3, 8], &[DOUBLE, CHAR]),
            (-3, 16, -3, 12, 9),
        ),
        (
            strukt(&[1, 1], &[0, 8], &[LONG_DOUBLE, CHAR]),
            (0, 16, 0, 16, 17),
        ),
        (
            strukt(&[1, 1], &[0, 16], &[DOUBLE_INT, CHAR]),
            (0, 24, 0, 17, 13),
        ),
        // One type only: laid out as hindexed, no padding.
        (strukt(&[1, 1], &[0, -5], &[CHAR, CHAR]), (-5, 6, -5, 6, 2)),
        (strukt(&[1], &[1], &[DOUBLE]), (1, 8, 1, 8, 8)),
        // Zero-length blocks are ignored; no blocks at all: lb = ub = 0.
        (strukt(&[1, 0], &[0, 20], &[DOUBLE, CHAR]), (0, 8, 0, 8, 8)),
        (strukt(&[0, 0], &[4, 16], &[INT, DOUBLE]), (0, 0, 0, 0, 0)),
    ];
    for (t, want) in &cases {
        assert_eq!(shape(*t), *want, "struct {t:#x}");
    }
    let r = resized(DOUBLE, 0, 9);
    let same = strukt(&[2], &[0], &[r]);
    assert_eq!(shape(same).1, 18, "one resized type: no padding");
    let mixed = strukt(&[1, 1], &[0, 2], &[r, CHAR]);
    assert_eq!(
        shape(mixed).1,
        16,
        "mixed: padded to the double's alignment"
    );
    let rc = resized(CHAR, 0, 9);
    let s2 = strukt(&[1, 1], &[0, 8], &[DOUBLE, rc]);
    assert_eq!(shape(s2), (0, 24, 0, 9, 9));
    // A nested vector of a struct keeps the struct's extent (no extra padding).
    let v = vector(2, 1, 1, cases[0].0);
    assert_eq!(shape(v), (0, 32, 0, 25, 18));
    let outer = strukt(&[1], &[1], &[cases[0].0]);
    assert_eq!(shape(outer), (1, 16, 1, 9, 9));
    assert!(info(cases[0].0).unwrap().basic.is_none(), "mixed kinds");
    assert_eq!(info(v).unwrap().nbasic, 4);
    for (t, _) in cases {
        free(t);
    }
    for t in [r, same, mixed, rc, s2, v, outer] {
        free(t);
    }
}

#[test]
fn subarray_layouts_c_and_fortran() {
    setup();
    let (sz, sub, st) = ([4, 5], [2, 3], [1, 2]);
    let mut t = 0;
    ok(unsafe {
        MPI_Type_create_subarray(
            2,
            sz.as_ptr(),
            sub.as_ptr(),
            st.as_ptr(),
            MPI_ORDER_C,
            INT,
            &mut t,
        )
    });
    assert_eq!(shape(t), (0, 80, 28, 32, 24));
    assert_eq!(info(t).unwrap().segments, vec![(28, 12), (48, 12)]);
    let (sz3, sub3, st3) = ([4, 5, 6], [2, 3, 1], [1, 2, 5]);
    let mut f = 0;
    ok(unsafe {
        MPI_Type_create_subarray(
            3,
            sz3.as_ptr(),
            sub3.as_ptr(),
            st3.as_ptr(),
            MPI_ORDER_FORTRAN,
            DOUBLE,
            &mut f,
        )
    });
    assert_eq!(shape(f), (0, 960, 872, 80, 48));
    let mut c3 = 0;
    ok(unsafe {
        MPI_Type_create_subarray(
            3,
            sz3.as_ptr(),
            sub3.as_ptr(),
            st3.as_ptr(),
            MPI_ORDER_C,
            DOUBLE,
            &mut c3,
        )
    });
    assert_eq!(shape(c3), (0, 960, 376, 344, 48));
    // Of a resized type.
    let rd = resized(DOUBLE, -4, 20);
    let mut r1 = 0;
    ok(unsafe {
        MPI_Type_create_subarray(
            1,
            sz.as_ptr(),
            sub.as_ptr(),
            st.as_ptr(),
            MPI_ORDER_C,
            rd,
            &mut r1,
        )
    });
    assert_eq!(shape(r1), (0, 80, 20, 28, 16));
    // Bad arguments.
    let bad_start = [3, 2];
    let mut x = 0;
    let rc = unsafe {
        MPI_Type_create_subarray(
            2,
            sz.as_ptr(),
            sub.as_ptr(),
            bad_start.as_ptr(),
            MPI_ORDER_C,
            INT,
            &mut x,
        )
    };
    assert_eq!(rc, MPI_ERR_ARG);
    let rc = unsafe {
        MPI_Type_create_subarray(2, sz.as_ptr(), sub.as_ptr(), st.as_ptr(), 3, INT, &mut x)
    };
    assert_eq!(rc, MPI_ERR_ARG);
    let rc =
        unsafe { MPI_Type_create_subarray(0, null(), null(), null(), MPI_ORDER_C, INT, &mut x) };
    assert_eq!(rc, MPI_ERR_ARG);
    // Envelope: ndims, sizes, subsizes, starts, order.
    let mut ints = [0; 11];
    let mut types = [0usize; 1];
    ok(unsafe {
        MPI_Type_get_contents(
            f,
            11,
            0,
            1,
            ints.as_mut_ptr(),
            null_mut(),
            types.as_mut_ptr(),
        )
    });
    assert_eq!(ints, [3, 4, 5, 6, 2, 3, 1, 1, 2, 5, MPI_ORDER_FORTRAN]);
    assert_eq!(types[0], DOUBLE);
    for x in [t, f, c3, rd, r1] {
        free(x);
    }
}

/// Packs one element of `t` over the ints 0..n: the global indices its type map names.
fn indices(t: MPI_Datatype, n: usize) -> Vec<i32> {
    let mut h = t;
    ok(unsafe { MPI_Type_commit(&mut h) });
    let a: Vec<i32> = (0..n as i32).collect();
    let size = shape(t).4 as usize;
    let mut out = vec![0i32; size / 4];
    let mut pos = 0;
    ok(unsafe {
        MPI_Pack(
            a.as_ptr() as *const _,
            1,
            t,
            out.as_mut_ptr() as *mut _,
            size as c_int,
            &mut pos,
            MPI_COMM_SELF,
        )
    });
    out
}

#[test]
fn darray_matches_mpich() {
    setup();
    let (b, c, none, dflt) = (
        MPI_DISTRIBUTE_BLOCK,
        MPI_DISTRIBUTE_CYCLIC,
        MPI_DISTRIBUTE_NONE,
        MPI_DISTRIBUTE_DFLT_DARG,
    );
    // Expected values: MPICH 5.0.2's libmpi_abi.so.1 for the same calls.
    let mut t = 0;
    let (g, d, a, p) = ([7, 5], [b, c], [dflt, dflt], [3, 2]);
    ok(unsafe {
        MPI_Type_create_darray(
            6,
            0,
            2,
            g.as_ptr(),
            d.as_ptr(),
            a.as_ptr(),
            p.as_ptr(),
            MPI_ORDER_C,
            INT,
            &mut t,
        )
    });
    assert_eq!(shape(t), (0, 140, 0, 60, 36));
    assert_eq!(indices(t, 35), vec![0, 2, 4, 5, 7, 9, 10, 12, 14]);
    let mut f = 0;
    let (d2, a2) = ([c, b], [2, 3]);
    ok(unsafe {
        MPI_Type_create_darray(
            6,
            3,
            2,
            g.as_ptr(),
            d2.as_ptr(),
            a2.as_ptr(),
            p.as_ptr(),
            MPI_ORDER_FORTRAN,
            INT,
            &mut f,
        )
    });
    assert_eq!(shape(f), (0, 140, 92, 36, 16));
    assert_eq!(indices(f, 35), vec![23, 24, 30, 31]);
    let mut t3 = 0;
    let (g3, d3, a3, p3) = ([4, 3, 5], [c, none, b], [1, dflt, dflt], [2, 1, 3]);
    ok(unsafe {
        MPI_Type_create_darray(
            6,
            4,
            3,
            g3.as_ptr(),
            d3.as_ptr(),
            a3.as_ptr(),
            p3.as_ptr(),
            MPI_ORDER_FORTRAN,
            INT,
            &mut t3,
        )
    });
    assert_eq!(shape(t3), (0, 240, 100, 92, 48));
    assert_eq!(indices(t3, 60), (25..48).step_by(2).collect::<Vec<i32>>());
    let (mut ni, mut na, mut nd, mut comb) = (0, 0, 0, 0);
    ok(unsafe { MPI_Type_get_envelope(t3, &mut ni, &mut na, &mut nd, &mut comb) });
    assert_eq!((ni, na, nd, comb), (16, 0, 1, MPI_COMBINER_DARRAY));
    // Bad grids.
    let mut x = 0;
    let rc = unsafe {
        MPI_Type_create_darray(
            5,
            0,
            2,
            g.as_ptr(),
            d.as_ptr(),
            a.as_ptr(),
            p.as_ptr(),
            MPI_ORDER_C,
            INT,
            &mut x,
        )
    };
    assert_eq!(rc, MPI_ERR_ARG, "grid of 6 for size 5");
    let small = [1, 1];
    let rc = unsafe {
        MPI_Type_create_darray(
            6,
            0,
            2,
            g.as_ptr(),
            [b, b].as_ptr(),
            small.as_ptr(),
            p.as_ptr(),
            MPI_ORDER_C,
            INT,
            &mut x,
        )
    };
    assert_eq!(
        rc, MPI_ERR_ARG,
        "blocks of 1 over 3 processes do not cover 7"
    );
    for x in [t, f, t3] {
        free(x);
    }
}

fn status_of(bytes: u64) -> MPI_Status {
    let mut s = MPI_Status::default();
    set_status_bytes(&mut s, bytes);
    s
}

fn elements(bytes: u64, t: MPI_Datatype) -> c_int {
    let mut c = 0;
    ok(unsafe { MPI_Get_elements(&status_of(bytes), t, &mut c) });
    c
}

fn count(bytes: u64, t: MPI_Datatype) -> c_int {
    let mut c = 0;
    ok(unsafe { MPI_Get_count(&status_of(bytes), t, &mut c) });
    c
}

#[test]
fn counts_and_elements_of_partial_data() {
    setup();
    assert_eq!(count(12, INT), 3);
    assert_eq!(count(6, INT), MPI_UNDEFINED);
    assert_eq!(elements(6, INT), MPI_UNDEFINED, "ends inside an int");
    assert_eq!(elements(12, DOUBLE_INT), 2, "a pair counts two");
    assert_eq!(count(12, DOUBLE_INT), 1);
    assert_eq!(elements(8, DOUBLE_INT), 1);
    assert_eq!(elements(16, DOUBLE_INT), MPI_UNDEFINED);
    let dc = strukt(&[1, 1], &[0, 8], &[DOUBLE, CHAR]);
    assert_eq!(elements(9 * 3 + 8, dc), 7);
    assert_eq!(count(9 * 3 + 8, dc), MPI_UNDEFINED);
    assert_eq!(elements(13, dc), MPI_UNDEFINED);
    let z = vector(0, 1, 1, INT);
    assert_eq!(count(0, z), 0);
    assert_eq!(elements(0, z), 0);
    // Large counts.
    let mut c: MPI_Count = 0;
    ok(unsafe { MPI_Get_count_c(&status_of(1 << 34), DOUBLE, &mut c) });
    assert_eq!(c, 1 << 31);
    let mut ci = 0;
    ok(unsafe { MPI_Get_count(&status_of(1 << 34), DOUBLE, &mut ci) });
    assert_eq!(ci, MPI_UNDEFINED, "does not fit in an int");
    // set_elements is the inverse.
    let mut s = MPI_Status::default();
    ok(unsafe { MPI_Status_set_elements(&mut s, DOUBLE_INT, 3) });
    assert_eq!(status_bytes(&s), 20);
    let v = vector(2, 1, 3, INT);
    ok(unsafe { MPI_Status_set_elements(&mut s, v, 3) });
    assert_eq!(status_bytes(&s), 12);
    ok(unsafe { MPI_Status_set_elements_c(&mut s, dc, 5) });
    assert_eq!(status_bytes(&s), 9 * 2 + 8);
    assert_eq!(elements(status_bytes(&s), dc), 5);
    assert_eq!(
        unsafe { MPI_Status_set_elements(&mut s, INT, -1) },
        MPI_ERR_COUNT
    );
    assert_eq!(
        unsafe { MPI_Status_set_elements(null_mut(), INT, 1) },
        MPI_ERR_ARG
    );
    assert_eq!(unsafe { MPI_Get_count(null(), INT, &mut ci) }, MPI_ERR_ARG);
    // Cancelled flag.
    let mut flag = 0;
    ok(unsafe { MPI_Status_set_cancelled(&mut s, 1) });
    ok(unsafe { mpi_abi::request::MPI_Test_cancelled(&s, &mut flag) });
    assert_eq!(flag, 1);
    ok(unsafe { MPI_Status_set_cancelled(&mut s, 0) });
    ok(unsafe { mpi_abi::request::MPI_Test_cancelled(&s, &mut flag) });
    assert_eq!(flag, 0);
    assert_eq!(status_bytes(&s), 26, "the count survives");
    free(dc);
    free(z);
    free(v);
}

#[test]
fn envelopes_and_contents() {
    setup();
    let (mut ni, mut na, mut nd, mut comb) = (0, 0, 0, 0);
    ok(unsafe { MPI_Type_get_envelope(INT, &mut ni, &mut na, &mut nd, &mut comb) });
    assert_eq!((ni, na, nd, comb), (0, 0, 0, MPI_COMBINER_NAMED));
    let mut i4 = [0; 4];
    let mut a4: [isize; 4] = [0; 4];
    let mut t4 = [0usize; 4];
    let rc = unsafe {
        MPI_Type_get_contents(
            INT,
            4,
            4,
            4,
            i4.as_mut_ptr(),
            a4.as_mut_ptr(),
            t4.as_mut_ptr(),
        )
    };
    assert_eq!(rc, MPI_ERR_TYPE, "predefined types have no contents");
    let v = vector(2, 1, 3, INT);
    ok(unsafe { MPI_Type_get_envelope(v, &mut ni, &mut na, &mut nd, &mut comb) });
    assert_eq!((ni, na, nd, comb), (3, 0, 1, MPI_COMBINER_VECTOR));
    ok(unsafe {
        MPI_Type_get_contents(
            v,
            4,
            4,
            4,
            i4.as_mut_ptr(),
            a4.as_mut_ptr(),
            t4.as_mut_ptr(),
        )
    });
    assert_eq!(&i4[..3], &[2, 1, 3]);
    assert_eq!(t4[0], INT);
    // Large-count constructor: only the _c queries.
    let mut vc = 0;
    ok(unsafe { MPI_Type_vector_c(2, 1, 3, INT, &mut vc) });
    assert_eq!(
        unsafe { MPI_Type_get_envelope(vc, &mut ni, &mut na, &mut nd, &mut comb) },
        MPI_ERR_TYPE
    );
    let (mut ci, mut ca, mut cc, mut cd) = (0, 0, 0, 0);
    ok(unsafe { MPI_Type_get_envelope_c(vc, &mut ci, &mut ca, &mut cc, &mut cd, &mut comb) });
    assert_eq!((ci, ca, cc, cd, comb), (0, 0, 3, 1, MPI_COMBINER_VECTOR));
    let mut counts = [0i64; 3];
    ok(unsafe {
        MPI_Type_get_contents_c(
            vc,
            0,
            0,
            3,
            1,
            null_mut(),
            null_mut(),
            counts.as_mut_ptr(),
            t4.as_mut_ptr(),
        )
    });
    assert_eq!(counts, [2, 1, 3]);
    // hvector: count and blocklength as ints, stride as an address.
    let mut hv = 0;
    ok(unsafe { MPI_Type_create_hvector(2, 3, 40, DOUBLE, &mut hv) });
    ok(unsafe { MPI_Type_get_envelope(hv, &mut ni, &mut na, &mut nd, &mut comb) });
    assert_eq!((ni, na, nd, comb), (2, 1, 1, MPI_COMBINER_HVECTOR));
    ok(unsafe {
        MPI_Type_get_contents(
            hv,
            2,
            1,
            1,
            i4.as_mut_ptr(),
            a4.as_mut_ptr(),
            t4.as_mut_ptr(),
        )
    });
    assert_eq!((&i4[..2], a4[0], t4[0]), (&[2, 3][..], 40, DOUBLE));
    // struct: count, blocklengths; displacements; types.
    let s = strukt(&[1, 2], &[0, 8], &[DOUBLE, v]);
    ok(unsafe { MPI_Type_get_envelope(s, &mut ni, &mut na, &mut nd, &mut comb) });
    assert_eq!((ni, na, nd, comb), (3, 2, 2, MPI_COMBINER_STRUCT));
    ok(unsafe {
        MPI_Type_get_contents(
            s,
            3,
            2,
            2,
            i4.as_mut_ptr(),
            a4.as_mut_ptr(),
            t4.as_mut_ptr(),
        )
    });
    assert_eq!((&i4[..3], &a4[..2]), (&[2, 1, 2][..], &[0, 8][..]));
    assert_eq!(t4[0], DOUBLE, "predefined: the same handle");
    assert_ne!(t4[1], v, "derived: a new handle to free");
    assert_eq!(shape(t4[1]), shape(v));
    free(t4[1]);
    // A derived argument type freed after construction still decodes.
    let c = {
        let mut c = 0;
        ok(unsafe { MPI_Type_contiguous(2, v, &mut c) });
        c
    };
    free(v);
    ok(unsafe { MPI_Type_get_contents(c, 1, 0, 1, i4.as_mut_ptr(), null_mut(), t4.as_mut_ptr()) });
    assert_eq!(i4[0], 2);
    assert_eq!(shape(t4[0]).4, 8);
    free(t4[0]);
    // Too small arrays: an error, no handle created.
    let live = TYPES.live();
    let rc = unsafe {
        MPI_Type_get_contents(
            s,
            1,
            2,
            2,
            i4.as_mut_ptr(),
            a4.as_mut_ptr(),
            t4.as_mut_ptr(),
        )
    };
    assert_eq!(rc, MPI_ERR_ARG);
    assert!(TYPES.live() <= live);
    // dup and resized.
    let mut d = 0;
    ok(unsafe { MPI_Type_dup(s, &mut d) });
    ok(unsafe { MPI_Type_get_envelope(d, &mut ni, &mut na, &mut nd, &mut comb) });
    assert_eq!((ni, na, nd, comb), (0, 0, 1, MPI_COMBINER_DUP));
    assert_eq!(shape(d), shape(s));
    let r = resized(s, -2, 64);
    ok(unsafe { MPI_Type_get_envelope(r, &mut ni, &mut na, &mut nd, &mut comb) });
    assert_eq!((ni, na, nd, comb), (0, 2, 1, MPI_COMBINER_RESIZED));
    ok(unsafe { MPI_Type_get_contents(r, 0, 2, 1, null_mut(), a4.as_mut_ptr(), t4.as_mut_ptr()) });
    assert_eq!(&a4[..2], &[-2, 64]);
    free(t4[0]);
    for x in [vc, hv, s, c, d, r] {
        free(x);
    }
}

fn name_of(t: MPI_Datatype) -> String {
    let mut buf = [0 as std::ffi::c_char; MPI_MAX_OBJECT_NAME as usize];
    let mut len = 0;
    ok(unsafe { MPI_Type_get_name(t, buf.as_mut_ptr(), &mut len) });
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(s.len(), len as usize);
    s
}

#[test]
fn names_sizes_and_match_size() {
    setup();
    assert_eq!(name_of(INT), "MPI_INT");
    assert_eq!(name_of(DOUBLE_INT), "MPI_DOUBLE_INT");
    let v = vector(2, 1, 3, INT);
    assert_eq!(name_of(v), "");
    ok(unsafe { MPI_Type_set_name(v, c"halo".as_ptr()) });
    assert_eq!(name_of(v), "halo");
    let mut d = 0;
    ok(unsafe { MPI_Type_dup(v, &mut d) });
    assert_eq!(name_of(d), "", "names are not copied by dup");
    let long = std::ffi::CString::new("x".repeat(300)).unwrap();
    ok(unsafe { MPI_Type_set_name(v, long.as_ptr()) });
    assert_eq!(name_of(v).len(), 127);
    let mut s = 0;
    ok(unsafe { MPI_Type_size(DOUBLE_INT, &mut s) });
    assert_eq!(s, 12);
    let mut big = 0;
    ok(unsafe { MPI_Type_contiguous(1 << 30, DOUBLE, &mut big) });
    ok(unsafe { MPI_Type_size(big, &mut s) });
    assert_eq!(s, MPI_UNDEFINED, "8 GiB does not fit in an int");
    assert_eq!(shape(big), (0, 1 << 33, 0, 1 << 33, 1 << 33));
    let mut m = 0;
    ok(unsafe { MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 8, &mut m) });
    assert_eq!(m, MPI_INTEGER8);
    ok(unsafe { MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 16, &mut m) });
    assert_eq!(name_of(m), "MPI_COMPLEX16");
    assert_eq!(shape(m).4, 16);
    assert_eq!(
        unsafe { MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 3, &mut m) },
        MPI_ERR_ARG
    );
    let mut p = 0;
    ok(unsafe { MPI_Type_get_value_index(DOUBLE, INT, &mut p) });
    assert_eq!(p, DOUBLE_INT);
    ok(unsafe { MPI_Type_get_value_index(SHORT, SHORT, &mut p) });
    assert_eq!(p, MPI_DATATYPE_NULL, "no predefined pair");
    assert_eq!(
        unsafe { MPI_Type_get_value_index(0x3, INT, &mut p) },
        MPI_ERR_TYPE
    );
    let mut a: MPI_Aint = 0;
    let x = 5u64;
    ok(unsafe { MPI_Get_address(&x as *const u64 as *const _, &mut a) });
    assert_eq!(a, &x as *const u64 as isize);
    assert_eq!(MPI_Aint_add(a, 8), a + 8);
    assert_eq!(MPI_Aint_diff(a + 24, a), 24);
    for t in [v, d, big] {
        free(t);
    }
}

#[test]
fn commit_free_and_bad_input() {
    setup();
    let v = vector(2, 1, 3, INT);
    assert!(for_comm(v).is_err(), "not committed yet");
    let mut h = v;
    ok(unsafe { MPI_Type_commit(&mut h) });
    assert!(for_comm(v).unwrap().committed);
    let mut d = 0;
    ok(unsafe { MPI_Type_dup(v, &mut d) });
    assert!(for_comm(d).is_ok(), "dup keeps the committed state");
    let mut i = INT;
    ok(unsafe { MPI_Type_commit(&mut i) });
    assert_eq!(unsafe { MPI_Type_free(&mut i) }, MPI_ERR_TYPE, "predefined");
    assert_eq!(i, INT);
    let mut c = 0;
    ok(unsafe { MPI_Type_contiguous(2, v, &mut c) });
    free(v);
    let mut stale = v;
    assert_eq!(
        unsafe { MPI_Type_free(&mut stale) },
        MPI_ERR_TYPE,
        "double free"
    );
    assert_eq!(
        shape(c),
        (0, 32, 0, 32, 16),
        "built from a freed type: unaffected"
    );
    let mut n = MPI_DATATYPE_NULL;
    assert_eq!(unsafe { MPI_Type_commit(&mut n) }, MPI_ERR_TYPE);
    assert_eq!(unsafe { MPI_Type_commit(null_mut()) }, MPI_ERR_ARG);
    let mut x = 0;
    assert_eq!(
        unsafe { MPI_Type_contiguous(-1, INT, &mut x) },
        MPI_ERR_COUNT
    );
    assert_eq!(
        unsafe { MPI_Type_contiguous(1, INT, null_mut()) },
        MPI_ERR_ARG
    );
    assert_eq!(
        unsafe { MPI_Type_contiguous(1, MPI_DATATYPE_NULL, &mut x) },
        MPI_ERR_TYPE
    );
    assert_eq!(
        unsafe { MPI_Type_vector(2, -1, 1, INT, &mut x) },
        MPI_ERR_ARG
    );
    assert_eq!(
        unsafe { MPI_Type_indexed(2, null(), null(), INT, &mut x) },
        MPI_ERR_ARG
    );
    assert_eq!(
        unsafe { MPI_Type_create_struct(1, [1].as_ptr(), [0isize].as_ptr(), null(), &mut x) },
        MPI_ERR_ARG
    );
    assert_eq!(
        unsafe {
            MPI_Type_create_struct(
                1,
                [1].as_ptr(),
                [0isize].as_ptr(),
                [0x3usize].as_ptr(),
                &mut x,
            )
        },
        MPI_ERR_TYPE
    );
    // Overflow is an error, never a wrap.
    assert_eq!(
        unsafe { MPI_Type_contiguous_c(i64::MAX, DOUBLE, &mut x) },
        MPI_ERR_ARG
    );
    let mut big = 0;
    ok(unsafe { MPI_Type_contiguous(2_000_000_000, DOUBLE, &mut big) });
    assert_eq!(
        unsafe { MPI_Type_contiguous(2_000_000_000, big, &mut x) },
        MPI_ERR_ARG
    );
    assert_eq!(
        unsafe { MPI_Type_create_hvector_c(3, 1, i64::MAX / 2, INT, &mut x) },
        MPI_ERR_ARG
    );
    assert_eq!(
        unsafe { MPI_Type_create_resized(INT, isize::MAX, 2, &mut x) },
        MPI_ERR_ARG
    );
    // Too fragmented a layout is refused before allocating.
    let v2 = vector(1 << 16, 1, 2, INT);
    assert_eq!(
        unsafe { MPI_Type_contiguous(1 << 10, v2, &mut x) },
        MPI_ERR_NO_MEM
    );
    let live = TYPES.live();
    assert_eq!(
        unsafe { MPI_Type_vector_c(1 << 25, 1, 2, INT, &mut x) },
        MPI_ERR_NO_MEM
    );
    assert!(TYPES.live() <= live, "no handle on error");
    for t in [d, c, big, v2] {
        free(t);
    }
}

#[test]
fn pack_unpack_and_sizes() {
    setup();
    let v = vector(3, 1, 2, INT);
    let mut h = v;
    ok(unsafe { MPI_Type_commit(&mut h) });
    let src: [i32; 6] = [1, 2, 3, 4, 5, 6];
    let mut packed = [0u8; 20];
    let mut pos = 0;
    let mut one = 7i32;
    ok(unsafe {
        MPI_Pack(
            &mut one as *mut i32 as *const _,
            1,
            INT,
            packed.as_mut_ptr() as *mut _,
            20,
            &mut pos,
            MPI_COMM_WORLD,
        )
    });
    ok(unsafe {
        MPI_Pack(
            src.as_ptr() as *const _,
            1,
            v,
            packed.as_mut_ptr() as *mut _,
            20,
            &mut pos,
            MPI_COMM_WORLD,
        )
    });
    assert_eq!(pos, 16);
    let words: Vec<i32> = packed[..16]
        .chunks(4)
        .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, vec![7, 1, 3, 5]);
    let rc = unsafe {
        MPI_Pack(
            src.as_ptr() as *const _,
            1,
            v,
            packed.as_mut_ptr() as *mut _,
            20,
            &mut pos,
            MPI_COMM_WORLD,
        )
    };
    assert_eq!(rc, MPI_ERR_TRUNCATE, "12 more bytes do not fit");
    assert_eq!(pos, 16, "position unchanged on error");
    let mut dst = [0i32; 6];
    let mut first = 0i32;
    let mut p = 0;
    ok(unsafe {
        MPI_Unpack(
            packed.as_ptr() as *const _,
            16,
            &mut p,
            &mut first as *mut i32 as *mut _,
            1,
            INT,
            MPI_COMM_WORLD,
        )
    });
    ok(unsafe {
        MPI_Unpack(
            packed.as_ptr() as *const _,
            16,
            &mut p,
            dst.as_mut_ptr() as *mut _,
            1,
            v,
            MPI_COMM_WORLD,
        )
    });
    assert_eq!((first, dst, p), (7, [1, 0, 3, 0, 5, 0], 16));
    let rc = unsafe {
        MPI_Unpack(
            packed.as_ptr() as *const _,
            16,
            &mut p,
            dst.as_mut_ptr() as *mut _,
            1,
            INT,
            MPI_COMM_WORLD,
        )
    };
    assert_eq!(rc, MPI_ERR_TRUNCATE);
    let mut s = 0;
    ok(unsafe { MPI_Pack_size(3, v, MPI_COMM_WORLD, &mut s) });
    assert_eq!(s, 36);
    let mut sc: MPI_Count = 0;
    ok(unsafe { MPI_Pack_size_c(1 << 40, v, MPI_COMM_WORLD, &mut sc) });
    assert_eq!(sc, 12 << 40);
    assert_eq!(
        unsafe { MPI_Pack_size(1 << 30, v, MPI_COMM_WORLD, &mut s) },
        MPI_ERR_COUNT
    );
    let u = vector(2, 1, 2, INT);
    let mut q = 0;
    assert_eq!(
        unsafe {
            MPI_Pack(
                src.as_ptr() as *const _,
                1,
                u,
                packed.as_mut_ptr() as *mut _,
                20,
                &mut q,
                MPI_COMM_WORLD,
            )
        },
        MPI_ERR_TYPE,
        "uncommitted"
    );
    assert_eq!(
        unsafe {
            MPI_Pack(
                src.as_ptr() as *const _,
                1,
                v,
                packed.as_mut_ptr() as *mut _,
                20,
                null_mut(),
                MPI_COMM_WORLD,
            )
        },
        MPI_ERR_ARG
    );
    assert_eq!(
        unsafe {
            MPI_Pack(
                src.as_ptr() as *const _,
                1,
                v,
                packed.as_mut_ptr() as *mut _,
                20,
                &mut q,
                MPI_COMM_NULL,
            )
        },
        MPI_ERR_COMM
    );
    assert_eq!(
        unsafe {
            MPI_Pack(
                src.as_ptr() as *const _,
                -1,
                v,
                packed.as_mut_ptr() as *mut _,
                20,
                &mut q,
                MPI_COMM_WORLD,
            )
        },
        MPI_ERR_COUNT
    );
    // Large-count form.
    let mut qc: MPI_Count = 0;
    ok(unsafe {
        MPI_Pack_c(
            src.as_ptr() as *const _,
            2,
            BYTE,
            packed.as_mut_ptr() as *mut _,
            20,
            &mut qc,
            MPI_COMM_SELF,
        )
    });
    assert_eq!(qc, 2);
    free(v);
    free(u);
}

// ---------------------------------------------------------------------------------
// Random layouts: an independent model of the type map (a list of (offset, length)
// byte entries per element, never merged), built by the textbook definitions of
// §5.1, against what the library packs.

#[derive(Clone, Debug)]
enum Spec {
    Basic(usize), // index into BASICS
    Contig(u8, Box<Spec>),
    Vector(u8, u8, i8, Box<Spec>),
    Hvector(u8, u8, i16, Box<Spec>),
    Indexed(Vec<(u8, i8)>, Box<Spec>),
    Struct(Vec<(u8, i16, Spec)>),
    Resized(i8, u8, Box<Spec>),
}

const BASICS: [(MPI_Datatype, usize); 5] = [
    (CHAR, 1),
    (SHORT, 2),
    (INT, 4),
    (DOUBLE, 8),
    (DOUBLE_INT, 16),
];

struct Model {
    entries: Vec<(i64, usize)>,
    lb: i64,
    ub: i64,
}

fn model(s: &Spec) -> Model {
    let blocks = |parts: Vec<(i64, usize, Model)>| -> Model {
        let mut entries = Vec::new();
        let mut b: Option<(i64, i64)> = None;
        for (disp, len, m) in parts {
            let ext = m.ub - m.lb;
            for k in 0..len as i64 {
                let base = disp + k * ext;
                entries.extend(m.entries.iter().map(|&(o, l)| (base + o, l)));
                let (lo, hi) = (base + m.lb, base + m.ub);
                b = Some(b.map_or((lo, hi), |(a, c)| (a.min(lo), c.max(hi))));
            }
        }
        let (lb, ub) = b.unwrap_or((0, 0));
        Model { entries, lb, ub }
    };
    match s {
        Spec::Basic(i) => {
            let (_, ext) = BASICS[*i];
            let entries = if ext == 16 {
                vec![(0, 8), (8, 4)]
            } else {
                vec![(0, ext)]
            };
            Model {
                entries,
                lb: 0,
                ub: ext as i64,
            }
        }
        Spec::Contig(n, t) => blocks(vec![(0, *n as usize, model(t))]),
        Spec::Vector(n, bl, st, t) => {
            let m = model(t);
            let ext = m.ub - m.lb;
            blocks(
                (0..*n as i64)
                    .map(|i| (i * *st as i64 * ext, *bl as usize, model(t)))
                    .collect(),
            )
        }
        Spec::Hvector(n, bl, st, t) => blocks(
            (0..*n as i64)
                .map(|i| (i * *st as i64, *bl as usize, model(t)))
                .collect(),
        ),
        Spec::Indexed(v, t) => {
            let m = model(t);
            let ext = m.ub - m.lb;
            blocks(
                v.iter()
                    .map(|&(bl, d)| (d as i64 * ext, bl as usize, model(t)))
                    .collect(),
            )
        }
        Spec::Struct(v) => blocks(
            v.iter()
                .map(|(bl, d, t)| (*d as i64, *bl as usize, model(t)))
                .collect(),
        ),
        Spec::Resized(lb, ex, t) => {
            let m = model(t);
            Model {
                entries: m.entries,
                lb: *lb as i64,
                ub: *lb as i64 + *ex as i64,
            }
        }
    }
}

/// Builds `s` through the C API; returns the handle and the handles to free.
fn build(s: &Spec, made: &mut Vec<MPI_Datatype>) -> MPI_Datatype {
    let mut t = 0;
    unsafe {
        match s {
            Spec::Basic(i) => return BASICS[*i].0,
            Spec::Contig(n, x) => ok(MPI_Type_contiguous(*n as c_int, build(x, made), &mut t)),
            Spec::Vector(n, bl, st, x) => ok(MPI_Type_vector(
                *n as c_int,
                *bl as c_int,
                *st as c_int,
                build(x, made),
                &mut t,
            )),
            Spec::Hvector(n, bl, st, x) => ok(MPI_Type_create_hvector(
                *n as c_int,
                *bl as c_int,
                *st as isize,
                build(x, made),
                &mut t,
            )),
            Spec::Indexed(v, x) => {
                let bl: Vec<c_int> = v.iter().map(|p| p.0 as c_int).collect();
                let d: Vec<c_int> = v.iter().map(|p| p.1 as c_int).collect();
                ok(MPI_Type_indexed(
                    v.len() as c_int,
                    bl.as_ptr(),
                    d.as_ptr(),
                    build(x, made),
                    &mut t,
                ))
            }
            Spec::Struct(v) => {
                let bl: Vec<c_int> = v.iter().map(|p| p.0 as c_int).collect();
                let d: Vec<isize> = v.iter().map(|p| p.1 as isize).collect();
                // Every member has the same spec: build it once, so the struct has one
                // member type (no padding, as in the model).
                let one = v.first().map(|p| build(&p.2, made)).unwrap_or(INT);
                let ty: Vec<MPI_Datatype> = v.iter().map(|_| one).collect();
                ok(MPI_Type_create_struct(
                    v.len() as c_int,
                    bl.as_ptr(),
                    d.as_ptr(),
                    ty.as_ptr(),
                    &mut t,
                ))
            }
            Spec::Resized(lb, ex, x) => ok(MPI_Type_create_resized(
                build(x, made),
                *lb as isize,
                *ex as isize,
                &mut t,
            )),
        }
    }
    made.push(t);
    t
}

/// Struct padding aside (the model has no epsilon), so structs in the random specs use
/// one member type.
fn spec() -> impl Strategy<Value = Spec> {
    let leaf = (0..BASICS.len()).prop_map(Spec::Basic);
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (1u8..4, inner.clone()).prop_map(|(n, t)| Spec::Contig(n, Box::new(t))),
            (1u8..4, 1u8..3, -3i8..4, inner.clone()).prop_map(|(n, b, s, t)| Spec::Vector(
                n,
                b,
                s,
                Box::new(t)
            )),
            (1u8..4, 1u8..3, -40i16..40, inner.clone()).prop_map(|(n, b, s, t)| Spec::Hvector(
                n,
                b,
                s,
                Box::new(t)
            )),
            (
                proptest::collection::vec((0u8..3, -4i8..5), 1..4),
                inner.clone()
            )
                .prop_map(|(v, t)| Spec::Indexed(v, Box::new(t))),
            (
                proptest::collection::vec((0u8..3, -30i16..30), 1..4),
                inner.clone()
            )
                .prop_map(|(v, t)| Spec::Struct(
                    v.into_iter().map(|(b, d)| (b, d, t.clone())).collect()
                )),
            (-8i8..8, 1u8..40, inner).prop_map(|(lb, ex, t)| Spec::Resized(lb, ex, Box::new(t))),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn pack_matches_the_type_map_model(s in spec(), count in 0usize..5) {
        setup();
        let mut made = Vec::new();
        let t = build(&s, &mut made);
        let m = model(&s);
        let ti = info(t).unwrap();
        let size: usize = m.entries.iter().map(|e| e.1).sum();
        prop_assert_eq!(ti.size, size);
        prop_assert_eq!((ti.lb as i64, ti.extent as i64), (m.lb, m.ub - m.lb));
        if size > 0 {
            let lo = m.entries.iter().map(|e| e.0).min().unwrap();
            let hi = m.entries.iter().map(|e| e.0 + e.1 as i64).max().unwrap();
            prop_assert_eq!((ti.true_lb as i64, ti.true_extent as i64), (lo, hi - lo));
        }
        // A buffer covering every byte the count elements touch, filled with a pattern.
        let ext = m.ub - m.lb;
        let offs: Vec<i64> = (0..count as i64)
            .flat_map(|k| m.entries.iter().map(move |&(o, l)| (k * ext + o, l)))
            .flat_map(|(o, l)| o..o + l as i64)
            .collect();
        let lo = offs.iter().copied().min().unwrap_or(0).min(0);
        let hi = offs.iter().copied().max().unwrap_or(0).max(0) + 1;
        let buf: Vec<u8> = (0..(hi - lo)).map(|i| (i * 7 + 3) as u8).collect();
        let base = unsafe { buf.as_ptr().offset(-lo as isize) };
        let mut h = t;
        ok(unsafe { MPI_Type_commit(&mut h) });
        let mut packed = vec![0u8; count * size];
        let mut pos = 0;
        ok(unsafe {
            MPI_Pack(base as *const _, count as c_int, t, packed.as_mut_ptr() as *mut _, packed.len() as c_int, &mut pos, MPI_COMM_SELF)
        });
        prop_assert_eq!(pos as usize, count * size);
        let want: Vec<u8> = offs.iter().map(|&o| buf[(o - lo) as usize]).collect();
        prop_assert_eq!(&packed, &want);
        // Unpack into a zeroed buffer: exactly the type map's bytes come back (a byte
        // named twice by the type map gets its last value, as in the model).
        let mut out = vec![0u8; buf.len()];
        let obase = unsafe { out.as_mut_ptr().offset(-lo as isize) };
        let mut p = 0;
        ok(unsafe {
            MPI_Unpack(packed.as_ptr() as *const _, packed.len() as c_int, &mut p, obase as *mut _, count as c_int, t, MPI_COMM_SELF)
        });
        let mut expect = vec![0u8; buf.len()];
        for (i, &o) in offs.iter().enumerate() {
            expect[(o - lo) as usize] = packed[i];
        }
        prop_assert_eq!(out, expect);
        // Element counts of the packed bytes agree with the model's entries.
        let mut c = 0;
        ok(unsafe { MPI_Get_elements(&status_of((count * size) as u64), t, &mut c) });
        prop_assert_eq!(c as usize, count * m.entries.len());
        for x in made.into_iter().rev() {
            free(x);
        }
    }
}
