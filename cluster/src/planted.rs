//! The switch of the anti-toy gate's planted bugs (the engine's `planted-bugs` feature turns
//! this crate's on): `KBIND_PLANT=<name>` switches one on at run time. It lives in the lowest
//! crate so the seam's own plants and the engine's (`kbind_engine::planted`) share it.

/// Whether the plant named `name` is switched on in this process.
#[cfg(feature = "planted-bugs")]
pub fn planted(name: &str) -> bool {
    std::env::var("KBIND_PLANT").is_ok_and(|v| v == name)
}

/// Whether the plant named `name` is switched on (never, without the `planted-bugs` feature).
#[cfg(not(feature = "planted-bugs"))]
pub fn planted(_name: &str) -> bool {
    false
}

/// Plant `non-status-404-is-absent`: any 404 reads as "the object is absent".
pub(crate) fn non_status_404_is_absent() -> bool {
    planted("non-status-404-is-absent")
}
