//! Attribute caching on communicators (MPI 4.1 §7.7): keyvals with copy and delete
//! callbacks, and the predefined attributes `MPI_TAG_UB`, `MPI_HOST`, `MPI_IO`,
//! `MPI_WTIME_IS_GLOBAL`, `MPI_APPNUM`, `MPI_UNIVERSE_SIZE`, `MPI_LASTUSEDCODE`.

use crate::consts::*;
use crate::error::{R, err, guard, put};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// `MPI_Comm_copy_attr_function`.
pub type CopyFn = unsafe extern "C" fn(
    MPI_Comm,
    c_int,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_int,
) -> c_int;
/// `MPI_Comm_delete_attr_function`.
pub type DeleteFn = unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int;

/// Copy behaviour of a keyval: the ABI passes `MPI_COMM_NULL_COPY_FN` as 0 and
/// `MPI_COMM_DUP_FN` as 1 (mpi_abi.h), other values are functions.
#[derive(Clone, Copy)]
enum Copy {
    Null,
    Dup,
    Fn(CopyFn),
}

#[derive(Clone, Copy)]
struct Keyval {
    copy: Copy,
    delete: Option<DeleteFn>,
    extra: usize,
}

#[derive(Default)]
struct Attrs {
    keyvals: HashMap<c_int, Keyval>,
    next: c_int,
    /// (communicator, keyval) -> attribute value.
    values: HashMap<MPI_Comm, Vec<(c_int, usize)>>,
}

static ATTRS: Mutex<Option<Attrs>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Attrs) -> T) -> T {
    let mut g = ATTRS.lock().unwrap_or_else(|e| e.into_inner());
    let a = g.get_or_insert_with(|| Attrs {
        next: 1000,
        ..Default::default()
    });
    f(a)
}

fn keyval(k: c_int) -> R<Keyval> {
    with(|a| a.keyvals.get(&k).copied()).ok_or_else(|| {
        err(
            MPI_ERR_KEYVAL,
            format!("keyval {k} is not a live keyval; fix: create it with MPI_Comm_create_keyval"),
        )
    })
}

/// Copies `from`'s attributes to `to` through their copy callbacks (`MPI_Comm_dup`).
///
/// # Errors
/// The error a copy callback returns.
pub fn copy_all(from: MPI_Comm, to: MPI_Comm) -> R {
    let items = with(|a| a.values.get(&from).cloned().unwrap_or_default());
    for (k, v) in items {
        let Ok(kv) = keyval(k) else { continue };
        let out = match kv.copy {
            Copy::Null => None,
            Copy::Dup => Some(v),
            Copy::Fn(f) => {
                let mut out: *mut c_void = std::ptr::null_mut();
                let mut flag: c_int = 0;
                // SAFETY: the user's registered copy callback, called as MPI specifies.
                let rc = unsafe {
                    f(
                        from,
                        k,
                        kv.extra as *mut c_void,
                        v as *mut c_void,
                        &mut out as *mut _ as *mut c_void,
                        &mut flag,
                    )
                };
                if rc != MPI_SUCCESS {
                    return Err(err(
                        rc,
                        format!("the copy callback of keyval {k} returned {rc}"),
                    ));
                }
                (flag != 0).then_some(out as usize)
            }
        };
        if let Some(v) = out {
            with(|a| a.values.entry(to).or_default().push((k, v)));
        }
    }
    Ok(())
}

fn delete_one(comm: MPI_Comm, k: c_int, v: usize) -> R {
    if let Ok(kv) = keyval(k)
        && let Some(f) = kv.delete
    {
        // SAFETY: the user's registered delete callback.
        let rc = unsafe { f(comm, k, v as *mut c_void, kv.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            return Err(err(
                rc,
                format!("the delete callback of keyval {k} returned {rc}"),
            ));
        }
    }
    Ok(())
}

/// Deletes every attribute of `comm` (its delete callbacks run), at `MPI_Comm_free`.
///
/// # Errors
/// The first error a delete callback returns.
pub fn delete_all(comm: MPI_Comm) -> R {
    let items = with(|a| a.values.remove(&comm).unwrap_or_default());
    let mut first = Ok(());
    for (k, v) in items.into_iter().rev() {
        if let Err(e) = delete_one(comm, k, v)
            && first.is_ok()
        {
            first = Err(e);
        }
    }
    first
}

/// `MPI_Comm_create_keyval`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create_keyval(
    copy: usize,
    delete: usize,
    keyval_out: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let copy = match copy {
            0 => Copy::Null,
            1 => Copy::Dup,
            // SAFETY: the ABI passes a function pointer of this type.
            f => Copy::Fn(unsafe { std::mem::transmute::<usize, CopyFn>(f) }),
        };
        // SAFETY: as above; 0 is MPI_COMM_NULL_DELETE_FN.
        let delete =
            (delete != 0).then(|| unsafe { std::mem::transmute::<usize, DeleteFn>(delete) });
        let k = with(|a| {
            let k = a.next;
            a.next += 1;
            a.keyvals.insert(
                k,
                Keyval {
                    copy,
                    delete,
                    extra: extra_state as usize,
                },
            );
            k
        });
        // SAFETY: C caller's pointer.
        unsafe { put(keyval_out, k, "comm_keyval") }
    })
}

/// `MPI_Comm_free_keyval`: attributes already set keep their callbacks until deleted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if keyval.is_null() {
            return Err(err(MPI_ERR_ARG, "keyval is a null pointer"));
        }
        // SAFETY: non-null.
        let k = unsafe { *keyval };
        if is_predefined(k) {
            return Err(err(
                MPI_ERR_KEYVAL,
                format!("keyval {k} is predefined and cannot be freed"),
            ));
        }
        keyval_check(k)?;
        // Keep the entry while attributes use it (their delete callbacks still run).
        let used = with(|a| a.values.values().any(|v| v.iter().any(|(kk, _)| *kk == k)));
        if !used {
            with(|a| a.keyvals.remove(&k));
        }
        // SAFETY: non-null.
        unsafe { *keyval = MPI_KEYVAL_INVALID };
        Ok(())
    })
}

fn is_predefined(k: c_int) -> bool {
    (MPI_TAG_UB..=MPI_UNIVERSE_SIZE).contains(&k)
}

/// `MPI_Comm_set_attr`: replaces (deleting the old value through the callback).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_set_attr(
    comm: MPI_Comm,
    keyval: c_int,
    value: *mut c_void,
) -> c_int {
    guard(comm, || {
        crate::comm::lookup(comm)?;
        if is_predefined(keyval) {
            return Err(err(
                MPI_ERR_KEYVAL,
                format!("keyval {keyval} is predefined and read-only"),
            ));
        }
        keyval_check(keyval)?;
        let old = with(|a| {
            let v = a.values.entry(comm).or_default();
            let old = v
                .iter()
                .position(|(k, _)| *k == keyval)
                .map(|i| v.remove(i).1);
            v.push((keyval, value as usize));
            old
        });
        if let Some(o) = old {
            delete_one(comm, keyval, o)?;
        }
        Ok(())
    })
}

fn keyval_check(k: c_int) -> R {
    keyval(k).map(|_| ())
}

/// Static storage of the predefined attribute values (the ABI returns pointers to them).
static TAG_UB_VAL: c_int = rankwire::TAG_UB;
static HOST_VAL: c_int = MPI_PROC_NULL;
static IO_VAL: c_int = MPI_ANY_SOURCE;
static WTIME_GLOBAL_VAL: c_int = 0;

/// `MPI_Comm_get_attr`: `*(void**)value` = the attribute; predefined ones are pointers
/// to ints (`MPI_TAG_UB` = 2^30 - 1, `MPI_WTIME_IS_GLOBAL` = 0, `MPI_UNIVERSE_SIZE` =
/// the world size).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_attr(
    comm: MPI_Comm,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    guard(comm, || {
        let c = crate::comm::lookup(comm)?;
        if value.is_null() || flag.is_null() {
            return Err(err(MPI_ERR_ARG, "attribute_val or flag is a null pointer"));
        }
        static UNIVERSE: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();
        let p: Option<usize> = match keyval {
            MPI_TAG_UB => Some(&TAG_UB_VAL as *const c_int as usize),
            MPI_HOST => Some(&HOST_VAL as *const c_int as usize),
            MPI_IO => Some(&IO_VAL as *const c_int as usize),
            MPI_WTIME_IS_GLOBAL => Some(&WTIME_GLOBAL_VAL as *const c_int as usize),
            // An AtomicI32 has the layout of a C int.
            MPI_LASTUSEDCODE => Some(crate::error::LASTUSED.as_ptr() as usize),
            MPI_UNIVERSE_SIZE => {
                let w = crate::env::world()?.size() as c_int;
                Some(UNIVERSE.get_or_init(|| w) as *const c_int as usize)
            }
            MPI_APPNUM => None,
            k => {
                keyval_check(k)?;
                let _ = &c;
                with(|a| {
                    a.values
                        .get(&comm)
                        .and_then(|v| v.iter().find(|(kk, _)| *kk == k).map(|x| x.1))
                })
            }
        };
        // SAFETY: checked non-null; `value` is a `void**` in C.
        unsafe {
            if let Some(p) = p {
                *(value as *mut usize) = p;
            }
            *flag = p.is_some() as c_int;
        }
        Ok(())
    })
}

/// `MPI_Comm_delete_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_delete_attr(comm: MPI_Comm, keyval: c_int) -> c_int {
    guard(comm, || {
        crate::comm::lookup(comm)?;
        keyval_check(keyval)?;
        let old = with(|a| {
            let v = a.values.entry(comm).or_default();
            v.iter()
                .position(|(k, _)| *k == keyval)
                .map(|i| v.remove(i).1)
        });
        match old {
            Some(o) => delete_one(comm, keyval, o),
            None => Err(err(
                MPI_ERR_KEYVAL,
                format!("communicator has no attribute for keyval {keyval}"),
            )),
        }
    })
}
