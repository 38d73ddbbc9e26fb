//! The gateway: the HTTP API of DESIGN.md §7 (`kbind_api::service`) and the embedded UI.
