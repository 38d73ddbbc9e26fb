//! kbind-cluster's planted bugs for the anti-toy gate (the engine's `planted-bugs` feature turns
//! this crate's on): `KBIND_PLANT=<name>` switches one on at run time. The seam cannot depend on
//! the engine, so its plants are checked here by name.

/// Whether the plant named `name` is switched on in this process.
#[cfg(feature = "planted-bugs")]
fn planted(name: &str) -> bool {
    std::env::var("KBIND_PLANT").is_ok_and(|v| v == name)
}

/// Whether the plant named `name` is switched on (never, without the `planted-bugs` feature).
#[cfg(not(feature = "planted-bugs"))]
fn planted(_name: &str) -> bool {
    false
}

/// Plant `non-status-404-is-absent`: any 404 reads as "the object is absent".
pub(crate) fn non_status_404_is_absent() -> bool {
    planted("non-status-404-is-absent")
}
