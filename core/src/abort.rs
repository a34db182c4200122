//! Ending without finalize: a [`crate::Universe`] dropped before
//! [`crate::Universe::finalize`] (an error returned from `main` with `?`, a panic)
//! aborts the job at once instead of waiting in the final fence for ranks that may be
//! waiting for it.
//!
//! The reason sent to the launcher is, in order of preference:
//! - the panic message and location, when the drop happens while panicking (recorded
//!   by the panic hook [`install_panic_hook`] puts in front of the existing one);
//! - the last [`crate::Error`] the runtime handed out (recorded cheaply where errors
//!   are built: [`crate::Error::usage`] and the `From` conversions, see [`note`]), which is
//!   normally the error `main` is returning;
//! - else "dropped without finalize".
//!
//! Rust prints an error returned from `main` only after its locals (the universe) are
//! dropped, so the drop cannot see it; the last error stands in for it.

use std::fmt::Display;
use std::sync::{Mutex, Once};

/// Exit status sent with the abort of a rank that dropped its universe after an error
/// (what Rust's `main` returning `Err` exits with).
pub(crate) const ERROR_EXIT_CODE: i32 = 1;
/// Exit status sent with the abort of a panicking rank (what a Rust panic exits with).
pub(crate) const PANIC_EXIT_CODE: i32 = 101;

// The three statics below are process-wide on purpose; they are the only mutable
// statics of core outside the runtime (`crate::runtime`, "State it owns"), besides the
// init-once flag (`crate::universe`) and the cross-memory-attach probe word:
// - PANIC_MESSAGE and HOOK: a panic hook is a plain `fn` of the process that gets only
//   the `PanicHookInfo`; it can reach no runtime, only statics. Installed once per
//   process (HOOK), whatever the number of `init` calls.
// - LAST_ERROR: an error is recorded where it is built (`Error::usage`, the `From`
//   conversions, `Error::noted`), in every layer, often with no runtime at hand (the
//   bootstrap, settings checks, errors of `init` itself before a runtime exists). A
//   process has at most one universe at a time (`crate::universe`'s init-once flag),
//   so one slot per process is one slot per runtime.
static LAST_ERROR: Mutex<Option<String>> = Mutex::new(None);
static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);
static HOOK: Once = Once::new();

/// Record `e` (an [`crate::Error`]) as the last error handed out (its `Display`
/// form). Cheap enough for error paths; never on a success path.
pub(crate) fn note(e: &dyn Display) {
    if let Ok(mut g) = LAST_ERROR.lock() {
        *g = Some(e.to_string());
    }
}

/// The last error recorded by [`note`], if any (its `Display` form).
pub(crate) fn last_error() -> Option<String> {
    LAST_ERROR.lock().ok().and_then(|g| g.clone())
}

/// Put a hook in front of the current panic hook that records the panic's message
/// and location, then runs the previous hook (which prints it as usual).
pub(crate) fn install_panic_hook() {
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            if let Ok(mut g) = PANIC_MESSAGE.lock() {
                *g = Some(format!("panicked{at}: {msg}"));
            }
            prev(info);
        }));
    });
}

/// Why this rank is leaving without finalize, and the exit status to abort with.
pub(crate) fn reason(panicking: bool) -> (i32, String) {
    if panicking {
        let m = PANIC_MESSAGE.lock().ok().and_then(|g| g.clone());
        return (
            PANIC_EXIT_CODE,
            m.unwrap_or_else(|| "panicked (message not recorded)".into()),
        );
    }
    match last_error() {
        Some(e) => (
            ERROR_EXIT_CODE,
            format!("dropped its Universe without finalize; its last rankwire error: {e}"),
        ),
        None => (
            ERROR_EXIT_CODE,
            "dropped its Universe without finalize (no rankwire error was returned; call \
             universe.finalize() for a clean end)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_the_last_error_or_the_panic() {
        // `crate::Error` records itself through `note` (`Error::noted`); any
        // `Display` value stands in for it here, so that this file names no error type.
        note(&"usage: rank 2 out of range for a communicator of size 2; fix: ...");
        let (code, r) = reason(false);
        assert_eq!(code, ERROR_EXIT_CODE);
        assert!(r.contains("usage: rank 2 out of range"), "{r}");
        assert!(r.contains("fix:"), "{r}");
        let (code, _) = reason(true);
        assert_eq!(code, PANIC_EXIT_CODE);
    }
}
