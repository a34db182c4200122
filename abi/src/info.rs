//! `MPI_Info` (MPI 4.1 §10): ordered (key, value) string maps. rankwire takes no hints
//! from them; they are stored and returned as the standard requires.

use crate::consts::*;
use crate::error::{R, err, guard, put};
use crate::handles::{Kind, Table};
use std::ffi::{CStr, c_char, c_int};
use std::sync::Mutex;

type Map = Mutex<Vec<(String, String)>>;

/// Created info objects.
static INFOS: Table<Map> = Table::new(Kind::Info);

fn lookup(i: MPI_Info) -> R<std::sync::Arc<Map>> {
    if i == MPI_INFO_ENV {
        static ENV: std::sync::OnceLock<std::sync::Arc<Map>> = std::sync::OnceLock::new();
        return Ok(ENV
            .get_or_init(|| std::sync::Arc::new(Mutex::new(Vec::new())))
            .clone());
    }
    INFOS.get(i).ok_or_else(|| {
        err(
            MPI_ERR_INFO,
            format!("info {i:#x} is not an info object (MPI_INFO_NULL, freed, or unknown)"),
        )
    })
}

unsafe fn cstr(p: *const c_char, what: &str) -> R<String> {
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, format!("{what} is a null pointer")));
    }
    // SAFETY: NUL-terminated C string.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    Ok(s)
}

fn check_key(k: &str) -> R {
    if k.is_empty() || k.len() >= MPI_MAX_INFO_KEY as usize {
        return Err(err(
            MPI_ERR_INFO_KEY,
            format!(
                "info key of {} bytes: must be 1..{} bytes",
                k.len(),
                MPI_MAX_INFO_KEY
            ),
        ));
    }
    Ok(())
}

/// `MPI_Info_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_create(info: *mut MPI_Info) -> c_int {
    // SAFETY: C caller's pointer.
    guard(MPI_COMM_SELF, || unsafe {
        put(info, INFOS.insert(Mutex::new(Vec::new())), "info")
    })
}

/// `MPI_Info_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_free(info: *mut MPI_Info) -> c_int {
    guard(MPI_COMM_SELF, || {
        if info.is_null() {
            return Err(err(MPI_ERR_ARG, "info is a null pointer"));
        }
        // SAFETY: non-null.
        let h = unsafe { *info };
        INFOS.remove(h).ok_or_else(|| {
            err(
                MPI_ERR_INFO,
                format!("info {h:#x} is not a live info object"),
            )
        })?;
        // SAFETY: non-null.
        unsafe { *info = MPI_INFO_NULL };
        Ok(())
    })
}

/// `MPI_Info_dup`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_dup(info: MPI_Info, newinfo: *mut MPI_Info) -> c_int {
    guard(MPI_COMM_SELF, || {
        let m = lookup(info)?;
        let v = m.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // SAFETY: C caller's pointer.
        unsafe { put(newinfo, INFOS.insert(Mutex::new(v)), "newinfo") }
    })
}

/// `MPI_Info_set`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_set(
    info: MPI_Info,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let m = lookup(info)?;
        // SAFETY: C strings.
        let (k, v) = unsafe { (cstr(key, "key")?, cstr(value, "value")?) };
        check_key(&k)?;
        if v.len() >= MPI_MAX_INFO_VAL as usize {
            return Err(err(
                MPI_ERR_INFO_VALUE,
                format!("info value of {} bytes exceeds MPI_MAX_INFO_VAL", v.len()),
            ));
        }
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        match g.iter_mut().find(|(kk, _)| *kk == k) {
            Some(e) => e.1 = v,
            None => g.push((k, v)),
        }
        Ok(())
    })
}

/// `MPI_Info_delete`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_delete(info: MPI_Info, key: *const c_char) -> c_int {
    guard(MPI_COMM_SELF, || {
        let m = lookup(info)?;
        // SAFETY: C string.
        let k = unsafe { cstr(key, "key")? };
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        let before = g.len();
        g.retain(|(kk, _)| *kk != k);
        if g.len() == before {
            return Err(err(MPI_ERR_INFO_NOKEY, format!("info has no key {k:?}")));
        }
        Ok(())
    })
}

/// `MPI_Info_get_string` (MPI 4.0): `*buflen` in = buffer size, out = value length + 1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_get_string(
    info: MPI_Info,
    key: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let m = lookup(info)?;
        // SAFETY: C string.
        let k = unsafe { cstr(key, "key")? };
        if buflen.is_null() || flag.is_null() {
            return Err(err(MPI_ERR_ARG, "buflen or flag is a null pointer"));
        }
        let v = m
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(kk, _)| *kk == k)
            .map(|x| x.1.clone());
        // SAFETY: checked pointers; value has *buflen bytes.
        unsafe {
            match v {
                Some(v) => {
                    let cap = *buflen;
                    if cap > 0 && !value.is_null() {
                        let n = v.len().min(cap as usize - 1);
                        std::ptr::copy_nonoverlapping(v.as_ptr(), value as *mut u8, n);
                        *value.add(n) = 0;
                    }
                    *buflen = v.len() as c_int + 1;
                    *flag = 1;
                }
                None => *flag = 0,
            }
        }
        Ok(())
    })
}

/// `MPI_Info_get_nkeys`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_get_nkeys(info: MPI_Info, nkeys: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let m = lookup(info)?;
        let n = m.lock().unwrap_or_else(|e| e.into_inner()).len();
        // SAFETY: C caller's pointer.
        unsafe { put(nkeys, n as c_int, "nkeys") }
    })
}

/// `MPI_Info_get_nthkey`: `key` has room for `MPI_MAX_INFO_KEY` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_get_nthkey(info: MPI_Info, n: c_int, key: *mut c_char) -> c_int {
    guard(MPI_COMM_SELF, || {
        let m = lookup(info)?;
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let k = usize::try_from(n)
            .ok()
            .and_then(|i| g.get(i))
            .map(|x| x.0.clone())
            .ok_or_else(|| {
                err(
                    MPI_ERR_ARG,
                    format!(
                        "key index {n} is out of range for an info with {} keys",
                        g.len()
                    ),
                )
            })?;
        let mut len = 0;
        // SAFETY: key has MPI_MAX_INFO_KEY bytes.
        unsafe { crate::env::put_str(key, MPI_MAX_INFO_KEY as usize, &mut len, &k) }
    })
}

/// `MPI_Comm_get_info`: a new, empty info (no hints are in use).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_info(comm: MPI_Comm, info_used: *mut MPI_Info) -> c_int {
    guard(comm, || {
        crate::comm::lookup(comm)?;
        // SAFETY: C caller's pointer.
        unsafe { put(info_used, INFOS.insert(Mutex::new(Vec::new())), "info_used") }
    })
}

/// `MPI_Comm_set_info`: accepted and ignored (rankwire takes no communicator hints).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_set_info(comm: MPI_Comm, info: MPI_Info) -> c_int {
    guard(comm, || {
        crate::comm::lookup(comm)?;
        if info != MPI_INFO_NULL {
            lookup(info)?;
        }
        Ok(())
    })
}

/// `MPI_Alloc_mem`: host memory from the C allocator (`*(void**)baseptr`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Alloc_mem(
    size: MPI_Aint,
    _info: MPI_Info,
    baseptr: *mut std::ffi::c_void,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        if size < 0 || baseptr.is_null() {
            return Err(err(
                MPI_ERR_ARG,
                format!("MPI_Alloc_mem of {size} bytes into a null pointer or negative size"),
            ));
        }
        // SAFETY: plain allocation.
        let p = unsafe { libc::malloc((size as usize).max(1)) };
        if p.is_null() {
            return Err(err(
                MPI_ERR_NO_MEM,
                format!("MPI_Alloc_mem: no memory for {size} bytes"),
            ));
        }
        // SAFETY: baseptr is a `void**` in C.
        unsafe { *(baseptr as *mut *mut std::ffi::c_void) = p };
        Ok(())
    })
}

/// `MPI_Free_mem`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Free_mem(base: *mut std::ffi::c_void) -> c_int {
    // SAFETY: memory from MPI_Alloc_mem (malloc).
    unsafe { libc::free(base) };
    MPI_SUCCESS
}
