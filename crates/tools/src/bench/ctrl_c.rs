//! Ctrl-C during `kura bench`: the first ends the phase being measured,
//! which still reports what it measured over the time it ran (a scenario
//! runs no further phase); the second ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::SIGINT;
use signal_hook::flag;

static PRESSED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Catches Ctrl-C from now on (the first call installs the handlers).
pub fn catch() {
    PRESSED.get_or_init(|| {
        let pressed = Arc::new(AtomicBool::new(false));
        // Installed first, so that it sees the flag as the first Ctrl-C left
        // it: set, and the process exits as an interrupted one does.
        let _ = flag::register_conditional_shutdown(SIGINT, 130, pressed.clone());
        let _ = flag::register(SIGINT, pressed.clone());
        pressed
    });
}

pub fn pressed() -> bool {
    PRESSED
        .get()
        .is_some_and(|pressed| pressed.load(Ordering::Relaxed))
}
