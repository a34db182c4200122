//! x86-64 `long double` (80-bit extended precision in 16 bytes) arithmetic on the
//! x87 unit, for the predefined reductions on `MPI_LONG_DOUBLE`,
//! `MPI_C_LONG_DOUBLE_COMPLEX` and `MPI_LONG_DOUBLE_INT` (Rust has no such type):
//! each operation loads the operands with `fld tbyte`, computes at 64-bit
//! significand precision (Linux's default x87 control word) and stores with `fstp
//! tbyte`, as C code on `long double` does.

use super::Builtin;

/// One x87 operation `l ∘ r` on 80-bit values (the 6 padding bytes of the result
/// are zero).
#[cfg(target_arch = "x86_64")]
fn x87(kind: u8, l: &[u8; 16], r: &[u8; 16]) -> [u8; 16] {
    use std::arch::asm;
    let mut out = [0u8; 16];
    // SAFETY: loads 10 bytes from each input and stores 10 bytes into `out`, all
    // within 16-byte arrays; the x87 stack is left as it was (two loads, one
    // arithmetic pop, one store pop).
    unsafe {
        match kind {
            0 => asm!(
                "fld tbyte ptr [{l}]",
                "fld tbyte ptr [{r}]",
                "faddp",
                "fstp tbyte ptr [{o}]",
                l = in(reg) l.as_ptr(), r = in(reg) r.as_ptr(), o = in(reg) out.as_mut_ptr(),
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            ),
            1 => asm!(
                "fld tbyte ptr [{l}]",
                "fld tbyte ptr [{r}]",
                "fmulp",
                "fstp tbyte ptr [{o}]",
                l = in(reg) l.as_ptr(), r = in(reg) r.as_ptr(), o = in(reg) out.as_mut_ptr(),
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            ),
            _ => asm!(
                // l + (-r): avoids the operand-order ambiguity of fsubp.
                "fld tbyte ptr [{l}]",
                "fld tbyte ptr [{r}]",
                "fchs",
                "faddp",
                "fstp tbyte ptr [{o}]",
                l = in(reg) l.as_ptr(), r = in(reg) r.as_ptr(), o = in(reg) out.as_mut_ptr(),
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            ),
        }
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
fn x87(_kind: u8, l: &[u8; 16], _r: &[u8; 16]) -> [u8; 16] {
    // Unreachable: `Builtin::defined_on` rejects long double types off x86-64.
    *l
}

/// `l + r`.
pub fn add(l: &[u8; 16], r: &[u8; 16]) -> [u8; 16] {
    x87(0, l, r)
}

/// `l * r`.
pub fn mul(l: &[u8; 16], r: &[u8; 16]) -> [u8; 16] {
    x87(1, l, r)
}

/// `l - r`.
pub fn sub(l: &[u8; 16], r: &[u8; 16]) -> [u8; 16] {
    x87(2, l, r)
}

/// Compares `l` with `r`; `None` when either is a NaN.
pub fn cmp(l: &[u8; 16], r: &[u8; 16]) -> Option<std::cmp::Ordering> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::asm;
        let (below, equal, unordered): (u8, u8, u8);
        // SAFETY: two 10-byte loads from 16-byte arrays; both values are popped.
        unsafe {
            asm!(
                "fld tbyte ptr [{r}]",
                "fld tbyte ptr [{l}]",
                "fucomip st, st(1)",
                "fstp st(0)",
                "setb {b}",
                "sete {e}",
                "setp {u}",
                l = in(reg) l.as_ptr(), r = in(reg) r.as_ptr(),
                b = out(reg_byte) below, e = out(reg_byte) equal, u = out(reg_byte) unordered,
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            );
        }
        use std::cmp::Ordering::*;
        if unordered != 0 {
            None
        } else if below != 0 {
            Some(Less)
        } else if equal != 0 {
            Some(Equal)
        } else {
            Some(Greater)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (l, r);
        None
    }
}

fn is_nan(v: &[u8; 16]) -> bool {
    cmp(v, v).is_none()
}

/// `l ∘ r` for SUM, PROD, MIN, MAX (MIN/MAX return the non-NaN operand when one is
/// a NaN, as rankwire's floating-point MIN/MAX do).
pub fn binop(op: Builtin, l: &[u8; 16], r: &[u8; 16]) -> [u8; 16] {
    use std::cmp::Ordering::*;
    let keep = |v: &[u8; 16]| {
        let mut o = [0u8; 16];
        o[..10].copy_from_slice(&v[..10]);
        o
    };
    match op {
        Builtin::Sum => add(l, r),
        Builtin::Prod => mul(l, r),
        Builtin::Min | Builtin::Max => {
            if is_nan(l) {
                return keep(r);
            }
            if is_nan(r) {
                return keep(l);
            }
            let want = if op == Builtin::Min { Less } else { Greater };
            match cmp(l, r) {
                Some(o) if o == want => keep(l),
                Some(Equal) => keep(l),
                _ => keep(r),
            }
        }
        _ => keep(r),
    }
}

/// The 80-bit value of `v` (exact), for tests and conversions.
pub fn from_f64(v: f64) -> [u8; 16] {
    let mut out = [0u8; 16];
    #[cfg(target_arch = "x86_64")]
    // SAFETY: one 8-byte load, one 10-byte store into a 16-byte array.
    unsafe {
        std::arch::asm!(
            "fld qword ptr [{v}]",
            "fstp tbyte ptr [{o}]",
            v = in(reg) &v as *const f64, o = in(reg) out.as_mut_ptr(),
            out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
            out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
            options(nostack),
        );
    }
    out
}

/// `v` rounded to `f64`.
pub fn to_f64(v: &[u8; 16]) -> f64 {
    let mut out = 0f64;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: one 10-byte load, one 8-byte store.
    unsafe {
        std::arch::asm!(
            "fld tbyte ptr [{v}]",
            "fstp qword ptr [{o}]",
            v = in(reg) v.as_ptr(), o = in(reg) &mut out as *mut f64,
            out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
            out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
            options(nostack),
        );
    }
    out
}
