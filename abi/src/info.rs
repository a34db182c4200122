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
            .get_or_init(|| std::sync::Arc::new(Mutex::new(env_entries(None))))
            .clone());
    }
    INFOS.get(i).ok_or_else(|| {
        err(
            MPI_ERR_INFO,
            format!("info {i:#x} is not an info object (MPI_INFO_NULL, freed, or unknown)"),
        )
    })
}

/// The keys of `MPI_INFO_ENV` (MPI 4.1 §11.2.3) that rankwire knows: `command` and
/// `argv` (this process's, from `/proc/self/cmdline`, or `args` of
/// `MPI_Info_create_env`), `maxprocs` (the size of `MPI_COMM_WORLD`), `host`, `wdir`,
/// `thread_level`. Keys without a value here (`soft`, `arch`, `file`) are absent.
fn env_entries(args: Option<Vec<String>>) -> Vec<(String, String)> {
    let args = args.unwrap_or_else(|| {
        std::fs::read("/proc/self/cmdline")
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    });
    let mut v = Vec::new();
    if let Some((cmd, rest)) = args.split_first() {
        v.push(("command".to_string(), cmd.clone()));
        if !rest.is_empty() {
            v.push(("argv".to_string(), rest.join(" ")));
        }
    }
    if let Ok(w) = crate::env::world() {
        v.push(("maxprocs".to_string(), w.size().to_string()));
    }
    let mut b = [0u8; 256];
    // SAFETY: a buffer of b.len() bytes.
    if unsafe { libc::gethostname(b.as_mut_ptr() as *mut c_char, b.len()) } == 0 {
        let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        v.push((
            "host".to_string(),
            String::from_utf8_lossy(&b[..n]).into_owned(),
        ));
    }
    if let Ok(d) = std::env::current_dir() {
        v.push(("wdir".to_string(), d.to_string_lossy().into_owned()));
    }
    let mut level = 0;
    // SAFETY: a local int.
    if unsafe { crate::env::MPI_Query_thread(&mut level) } == MPI_SUCCESS {
        let name = match level {
            MPI_THREAD_SINGLE => "MPI_THREAD_SINGLE",
            MPI_THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
            MPI_THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
            _ => "MPI_THREAD_MULTIPLE",
        };
        v.push(("thread_level".to_string(), name.to_string()));
    }
    v
}

/// `MPI_Info_create_env` (MPI 4.1 §11.2.3): a new info object with the keys of
/// `MPI_INFO_ENV`, `command`/`argv` taken from `argv` when `argc > 0`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_create_env(
    argc: c_int,
    argv: *mut *mut c_char,
    info: *mut MPI_Info,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let args = if argc > 0 && !argv.is_null() {
            let mut a = Vec::with_capacity(argc as usize);
            for k in 0..argc as usize {
                // SAFETY: argc entries of NUL-terminated strings (C's argv).
                let p = unsafe { *argv.add(k) };
                if p.is_null() {
                    break;
                }
                // SAFETY: as above.
                a.push(unsafe { cstr(p, "argv entry")? });
            }
            Some(a)
        } else {
            None
        };
        let h = INFOS.insert(Mutex::new(env_entries(args)));
        // SAFETY: C caller's pointer.
        unsafe { put(info, h, "info") }
    })
}

/// `MPI_Get_hw_resource_info` (MPI 4.1 §11.4): a new info object describing the
/// hardware rankwire knows of: `mpi_hw_resource_type` = `mpi_shared_memory` (the node,
/// the one level `MPI_Comm_split_type` splits on).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_hw_resource_info(hw_info: *mut MPI_Info) -> c_int {
    guard(MPI_COMM_SELF, || {
        let v = vec![(
            "mpi_hw_resource_type".to_string(),
            "mpi_shared_memory".to_string(),
        )];
        // SAFETY: C caller's pointer.
        unsafe { put(hw_info, INFOS.insert(Mutex::new(v)), "hw_info") }
    })
}

/// The value of `key` in info `i` (`MPI_INFO_NULL`: none).
///
/// # Errors
/// `MPI_ERR_INFO` for a freed or unknown handle.
pub fn value_of(i: MPI_Info, key: &str) -> R<Option<String>> {
    if i == MPI_INFO_NULL {
        return Ok(None);
    }
    let m = lookup(i)?;
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    Ok(g.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
}

/// Sets `key` to `value` in info `i` (an output of the call, e.g. of
/// `MPI_Comm_split_type`); `MPI_INFO_NULL` is left alone.
///
/// # Errors
/// `MPI_ERR_INFO` for a freed or unknown handle.
pub fn set_value(i: MPI_Info, key: &str, value: &str) -> R {
    if i == MPI_INFO_NULL {
        return Ok(());
    }
    let m = lookup(i)?;
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    match g.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = value.to_string(),
        None => g.push((key.to_string(), value.to_string())),
    }
    Ok(())
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

/// `MPI_Comm_get_info`: a new info with the hints in use: the memory-kind assertion
/// `mpi_assert_memory_alloc_kinds` where the program set one (see `memkind.rs`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_info(comm: MPI_Comm, info_used: *mut MPI_Info) -> c_int {
    guard(comm, || {
        crate::comm::lookup(comm)?;
        let used: Vec<(String, String)> = crate::memkind::asserted(comm)
            .map(|v| (crate::memkind::ASSERT_KEY.to_string(), v))
            .into_iter()
            .collect();
        // SAFETY: C caller's pointer.
        unsafe { put(info_used, INFOS.insert(Mutex::new(used)), "info_used") }
    })
}

/// `MPI_Comm_set_info` (collective): takes the memory-kind assertion
/// `mpi_assert_memory_alloc_kinds` (`memkind.rs`); other keys are ignored.
///
/// # Errors
/// `MPI_ERR_COMM`, `MPI_ERR_INFO` (a freed info handle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_set_info(comm: MPI_Comm, info: MPI_Info) -> c_int {
    guard(comm, || {
        let c = crate::comm::lookup(comm)?;
        crate::memkind::set_from_info(&c, comm, info)
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
