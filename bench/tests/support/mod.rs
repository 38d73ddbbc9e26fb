//! What the bench smokes share: the konnector binary they run.

use std::path::PathBuf;
use std::process::Command;

use parking_lot::Mutex;

/// `konnector` of this build's profile, beside this package's binary; built when missing (Cargo
/// gives a test only its own package's binaries).
pub fn konnector_binary() -> PathBuf {
    static BUILT: Mutex<()> = Mutex::new(());
    let _guard = BUILT.lock();
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_kbind-bench"));
    let path = bench.parent().expect("the binary has a folder").join("konnector");
    if !path.exists() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-p", "konnector", "--bin", "konnector"]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        assert!(
            build.status().expect("cargo runs").success(),
            "building konnector failed"
        );
    }
    assert!(path.exists(), "no konnector at {}", path.display());
    path
}
