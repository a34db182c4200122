//! Handle tables: the objects behind `MPI_Comm`, `MPI_Datatype`, `MPI_Request`, ...
//!
//! The standard ABI fixes the values of predefined handles (all below `0x400`, see
//! `consts.rs`); handles we create are table entries encoded as
//! `(index + 1) << 12 | kind`, so they never collide with a predefined value, a bad or
//! freed handle is detected (kind mismatch, empty slot) instead of dereferenced, and a
//! handle is 64 bits like the ABI's pointer types.
//!
//! Each kind has one `Table<T>` behind a mutex; objects are kept in `Arc`s so that a
//! call can drop the lock before it works with the object.

use std::sync::{Arc, Mutex};

/// Low 12 bits of a created handle: which kind of object it names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub enum Kind {
    /// `MPI_Comm`.
    Comm = 0x1,
    /// `MPI_Group`.
    Group = 0x2,
    /// `MPI_Datatype`.
    Datatype = 0x3,
    /// `MPI_Op`.
    Op = 0x4,
    /// `MPI_Request`.
    Request = 0x5,
    /// `MPI_Errhandler`.
    Errhandler = 0x6,
    /// `MPI_Message`.
    Message = 0x7,
    /// `MPI_Info`.
    Info = 0x8,
    /// `MPI_Win`.
    Win = 0x9,
}

/// Objects of one kind, addressed by handle.
pub struct Table<T> {
    kind: Kind,
    slots: Mutex<Slots<T>>,
}

struct Slots<T> {
    items: Vec<Option<Arc<T>>>,
    free: Vec<usize>,
}

impl<T> Table<T> {
    /// An empty table for handles of `kind`.
    pub const fn new(kind: Kind) -> Self {
        Table {
            kind,
            slots: Mutex::new(Slots {
                items: Vec::new(),
                free: Vec::new(),
            }),
        }
    }

    fn index(&self, handle: usize) -> Option<usize> {
        if handle & 0xfff != self.kind as usize || handle >> 12 == 0 {
            return None;
        }
        Some((handle >> 12) - 1)
    }

    /// Whether `handle` has this table's kind (it may still be freed).
    pub fn is_created(&self, handle: usize) -> bool {
        self.index(handle).is_some()
    }

    /// Stores `obj`; returns its new handle.
    pub fn insert(&self, obj: T) -> usize {
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let idx = match s.free.pop() {
            Some(i) => {
                s.items[i] = Some(Arc::new(obj));
                i
            }
            None => {
                s.items.push(Some(Arc::new(obj)));
                s.items.len() - 1
            }
        };
        ((idx + 1) << 12) | self.kind as usize
    }

    /// The object of `handle`, or `None` for a handle of another kind, never created,
    /// or freed.
    pub fn get(&self, handle: usize) -> Option<Arc<T>> {
        let idx = self.index(handle)?;
        let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        s.items.get(idx)?.clone()
    }

    /// Replaces the object of a live `handle`; returns false if it is not live.
    pub fn replace(&self, handle: usize, obj: T) -> bool {
        let Some(idx) = self.index(handle) else {
            return false;
        };
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        match s.items.get_mut(idx) {
            Some(slot @ Some(_)) => {
                *slot = Some(Arc::new(obj));
                true
            }
            _ => false,
        }
    }

    /// Removes `handle`'s object and returns it; `None` if it was not live. The slot
    /// is reused by a later `insert` (so a stale copy of the handle may then name a
    /// new object, as with any MPI implementation's freed handles).
    pub fn remove(&self, handle: usize) -> Option<Arc<T>> {
        let idx = self.index(handle)?;
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let obj = s.items.get_mut(idx)?.take()?;
        s.free.push(idx);
        Some(obj)
    }

    /// Takes `handle`'s object out like [`Table::remove`] (later lookups of the handle
    /// fail) but keeps its slot reserved: no later `insert` gets this handle until
    /// [`Table::release`]. For objects that outlive their handle (a communicator freed
    /// while operations on it are pending, MPI 4.1 §7.4.3).
    pub fn hide(&self, handle: usize) -> Option<Arc<T>> {
        let idx = self.index(handle)?;
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        s.items.get_mut(idx)?.take()
    }

    /// Makes the slot of a hidden `handle` (see [`Table::hide`]) reusable. A handle that is live
    /// or not of this table is left alone.
    pub fn release(&self, handle: usize) {
        let Some(idx) = self.index(handle) else {
            return;
        };
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(s.items.get(idx), Some(None)) && !s.free.contains(&idx) {
            s.free.push(idx);
        }
    }

    /// Whether some live object satisfies `f` (a scan under the table's lock).
    pub fn any(&self, f: impl Fn(&T) -> bool) -> bool {
        let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        s.items.iter().flatten().any(|x| f(x))
    }

    /// Number of live objects (tests and leak reports).
    pub fn live(&self) -> usize {
        let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        s.items.iter().filter(|x| x.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_other_kinds() {
        let t: Table<u32> = Table::new(Kind::Datatype);
        let a = t.insert(7);
        let b = t.insert(8);
        assert_ne!(a, b);
        assert!(
            a >= 0x1000,
            "created handles stay above the predefined range"
        );
        assert_eq!(*t.get(a).unwrap(), 7);
        assert_eq!(t.get(a & !0xfff | Kind::Comm as usize), None);
        assert_eq!(
            t.get(0x209),
            None,
            "a predefined value is not a table entry"
        );
        assert_eq!(*t.remove(a).unwrap(), 7);
        assert!(t.get(a).is_none());
        assert!(t.remove(a).is_none(), "double free is detected");
        assert_eq!(t.live(), 1);
    }

    #[test]
    fn a_hidden_handle_is_not_reused_until_released() {
        let t: Table<u32> = Table::new(Kind::Comm);
        let a = t.insert(1);
        assert_eq!(*t.hide(a).unwrap(), 1);
        assert!(
            t.get(a).is_none(),
            "a hidden handle no longer names its object"
        );
        let b = t.insert(2);
        assert_ne!(a, b, "a hidden handle's slot stays reserved");
        t.release(a);
        t.release(a);
        assert_eq!(t.insert(3), a, "released once, reused once");
        assert_ne!(t.insert(4), a);
        t.release(b);
        assert_eq!(
            *t.get(b).unwrap(),
            2,
            "releasing a live handle does nothing"
        );
    }
}

/// `MPI_<Kind>_toint` / `MPI_<Kind>_fromint` (MPI 5.0 ABI: the Fortran integer of a
/// handle): predefined handles keep their ABI value, created ones are
/// `(index + 1) << 12 | kind`, which fits in 31 bits below 2^19 live objects of a kind
/// (more than that is not supported by these conversions). A value that is not a handle
/// converts to one that every later call rejects with the kind's error class.
/// `MPI_Request_toint` is in `request.rs` (a fast request handle gets a slot first).
macro_rules! int_conversions {
    ($($to:ident, $from:ident, $ty:ident;)*) => {$(
        #[doc = concat!("`", stringify!($to), "`: the handle as an `int` (see the module).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $to(h: crate::consts::$ty) -> std::ffi::c_int {
            h as std::ffi::c_int
        }
        #[doc = concat!("`", stringify!($from), "`: the handle of an `int` from `", stringify!($to), "`.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $from(i: std::ffi::c_int) -> crate::consts::$ty {
            i as u32 as crate::consts::$ty
        }
    )*};
}

int_conversions! {
    MPI_Comm_toint, MPI_Comm_fromint, MPI_Comm;
    MPI_Errhandler_toint, MPI_Errhandler_fromint, MPI_Errhandler;
    MPI_File_toint, MPI_File_fromint, MPI_File;
    MPI_Group_toint, MPI_Group_fromint, MPI_Group;
    MPI_Info_toint, MPI_Info_fromint, MPI_Info;
    MPI_Message_toint, MPI_Message_fromint, MPI_Message;
    MPI_Session_toint, MPI_Session_fromint, MPI_Session;
    MPI_Type_toint, MPI_Type_fromint, MPI_Datatype;
    MPI_Win_toint, MPI_Win_fromint, MPI_Win;
}
