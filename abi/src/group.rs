//! `MPI_Group` (MPI 4.1 §7.3): local operations on ordered sets of processes, on
//! rankwire's [`Group`].

use crate::comm::lookup;
use crate::consts::*;
use crate::error::{R, err, guard, put};
use crate::handles::{Kind, Table};
use rankwire::{Group, GroupRelation};
use std::ffi::c_int;

/// Created groups.
pub static GROUPS: Table<Group> = Table::new(Kind::Group);

/// The group of handle `g` (`MPI_GROUP_EMPTY` included).
///
/// # Errors
/// `MPI_ERR_GROUP` for `MPI_GROUP_NULL` or a freed/unknown handle.
pub fn lookup_group(g: MPI_Group) -> R<Group> {
    if g == MPI_GROUP_EMPTY {
        return Ok(crate::env::world()?.group().incl(&[])?);
    }
    GROUPS.get(g).map(|x| (*x).clone()).ok_or_else(|| {
        err(MPI_ERR_GROUP, format!("group {g:#x} is not a group (MPI_GROUP_NULL, freed, or unknown); fix: pass one from MPI_Comm_group or a group constructor"))
    })
}

/// A new group handle (`MPI_GROUP_EMPTY` for an empty group, as MPI allows).
pub fn new_group(g: Group) -> MPI_Group {
    if g.size() == 0 {
        MPI_GROUP_EMPTY
    } else {
        GROUPS.insert(g)
    }
}

unsafe fn ranks_arg<'a>(n: c_int, ranks: *const c_int) -> R<&'a [c_int]> {
    if n < 0 {
        return Err(err(MPI_ERR_ARG, format!("number of ranks {n} is negative")));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if ranks.is_null() {
        return Err(err(MPI_ERR_ARG, "ranks array is a null pointer"));
    }
    // SAFETY: caller's array of n ints.
    Ok(unsafe { std::slice::from_raw_parts(ranks, n as usize) })
}

fn to_usize(g: &Group, r: &[c_int]) -> R<Vec<usize>> {
    r.iter()
        .map(|&x| {
            if x < 0 || x as usize >= g.size() {
                Err(err(
                    MPI_ERR_RANK,
                    format!("rank {x} is out of range for a group of size {}", g.size()),
                ))
            } else {
                Ok(x as usize)
            }
        })
        .collect()
}

/// `MPI_Comm_group`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_group(comm: MPI_Comm, group: *mut MPI_Group) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        // SAFETY: C caller's pointer.
        unsafe { put(group, new_group(c.group()), "group") }
    })
}

/// `MPI_Group_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_size(group: MPI_Group, size: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = lookup_group(group)?;
        // SAFETY: C caller's pointer.
        unsafe { put(size, g.size() as c_int, "size") }
    })
}

/// `MPI_Group_rank`: `MPI_UNDEFINED` when the caller is not a member.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_rank(group: MPI_Group, rank: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = lookup_group(group)?;
        // SAFETY: C caller's pointer.
        unsafe {
            put(
                rank,
                g.rank().map(|r| r as c_int).unwrap_or(MPI_UNDEFINED),
                "rank",
            )
        }
    })
}

/// `MPI_Group_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_free(group: *mut MPI_Group) -> c_int {
    guard(MPI_COMM_SELF, || {
        if group.is_null() {
            return Err(err(MPI_ERR_ARG, "group is a null pointer"));
        }
        // SAFETY: non-null.
        let h = unsafe { *group };
        if h != MPI_GROUP_EMPTY && GROUPS.remove(h).is_none() {
            return Err(err(
                MPI_ERR_GROUP,
                format!("group {h:#x} is not a live group (freed twice?)"),
            ));
        }
        // SAFETY: non-null.
        unsafe { *group = MPI_GROUP_NULL };
        Ok(())
    })
}

/// `MPI_Group_incl`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_incl(
    group: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = lookup_group(group)?;
        // SAFETY: C array.
        let r = to_usize(&g, unsafe { ranks_arg(n, ranks)? })?;
        let ng = g.incl(&r)?;
        // SAFETY: C caller's pointer.
        unsafe { put(newgroup, new_group(ng), "newgroup") }
    })
}

/// `MPI_Group_excl`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_excl(
    group: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = lookup_group(group)?;
        // SAFETY: C array.
        let r = to_usize(&g, unsafe { ranks_arg(n, ranks)? })?;
        let ng = g.excl(&r)?;
        // SAFETY: C caller's pointer.
        unsafe { put(newgroup, new_group(ng), "newgroup") }
    })
}

/// Expands `MPI_Group_range_incl`/`excl` triplets (first, last, stride).
unsafe fn ranges(g: &Group, n: c_int, r: *const [c_int; 3]) -> R<Vec<usize>> {
    if n < 0 {
        return Err(err(
            MPI_ERR_ARG,
            format!("number of ranges {n} is negative"),
        ));
    }
    if n > 0 && r.is_null() {
        return Err(err(MPI_ERR_ARG, "ranges is a null pointer"));
    }
    let mut out = Vec::new();
    for i in 0..n as usize {
        // SAFETY: caller's array of n triplets.
        let [first, last, stride] = unsafe { *r.add(i) };
        if stride == 0 {
            return Err(err(MPI_ERR_ARG, "range stride is 0"));
        }
        let mut x = first;
        while (stride > 0 && x <= last) || (stride < 0 && x >= last) {
            out.push(x);
            x += stride;
        }
    }
    to_usize(g, &out)
}

/// `MPI_Group_range_incl`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_range_incl(
    group: MPI_Group,
    n: c_int,
    r: *const [c_int; 3],
    newgroup: *mut MPI_Group,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = lookup_group(group)?;
        // SAFETY: C array.
        let ng = g.incl(&unsafe { ranges(&g, n, r)? })?;
        // SAFETY: C caller's pointer.
        unsafe { put(newgroup, new_group(ng), "newgroup") }
    })
}

/// `MPI_Group_range_excl`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_range_excl(
    group: MPI_Group,
    n: c_int,
    r: *const [c_int; 3],
    newgroup: *mut MPI_Group,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = lookup_group(group)?;
        // SAFETY: C array.
        let ng = g.excl(&unsafe { ranges(&g, n, r)? })?;
        // SAFETY: C caller's pointer.
        unsafe { put(newgroup, new_group(ng), "newgroup") }
    })
}

macro_rules! setop {
    ($name:ident, $m:ident, $doc:literal) => {
        #[doc = $doc]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            g1: MPI_Group,
            g2: MPI_Group,
            newgroup: *mut MPI_Group,
        ) -> c_int {
            guard(MPI_COMM_SELF, || {
                let a = lookup_group(g1)?;
                let b = lookup_group(g2)?;
                // SAFETY: C caller's pointer.
                unsafe { put(newgroup, new_group(a.$m(&b)), "newgroup") }
            })
        }
    };
}
setop!(MPI_Group_union, union, "`MPI_Group_union`.");
setop!(
    MPI_Group_intersection,
    intersection,
    "`MPI_Group_intersection`."
);
setop!(MPI_Group_difference, difference, "`MPI_Group_difference`.");

/// `MPI_Group_translate_ranks`: `MPI_UNDEFINED` for ranks not in `g2`;
/// `MPI_PROC_NULL` translates to itself.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_translate_ranks(
    g1: MPI_Group,
    n: c_int,
    ranks1: *const c_int,
    g2: MPI_Group,
    ranks2: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let a = lookup_group(g1)?;
        let b = lookup_group(g2)?;
        // SAFETY: C array.
        let r = unsafe { ranks_arg(n, ranks1)? };
        if n > 0 && ranks2.is_null() {
            return Err(err(MPI_ERR_ARG, "ranks2 is a null pointer"));
        }
        let real: Vec<c_int> = r.iter().copied().filter(|&x| x != MPI_PROC_NULL).collect();
        let t = a.translate_ranks(&to_usize(&a, &real)?, &b)?;
        let mut it = t.into_iter();
        for (i, &x) in r.iter().enumerate() {
            let v = if x == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                it.next()
                    .flatten()
                    .map(|y| y as c_int)
                    .unwrap_or(MPI_UNDEFINED)
            };
            // SAFETY: caller's array of n ints.
            unsafe { *ranks2.add(i) = v };
        }
        Ok(())
    })
}

/// `MPI_Group_compare`: `MPI_IDENT`, `MPI_SIMILAR` or `MPI_UNEQUAL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_compare(
    g1: MPI_Group,
    g2: MPI_Group,
    result: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let a = lookup_group(g1)?;
        let b = lookup_group(g2)?;
        let v = match a.compare(&b) {
            GroupRelation::Identical => MPI_IDENT,
            GroupRelation::Similar => MPI_SIMILAR,
            GroupRelation::Unequal => MPI_UNEQUAL,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(result, v, "result") }
    })
}
