//! Rebuilds the backend when the embedded web UI changes: `include_dir!` tracks its files only on
//! nightly, so without this an edit under `web/static/` would not reach the binary.

fn main() {
    println!("cargo:rerun-if-changed=../web/static");
}
