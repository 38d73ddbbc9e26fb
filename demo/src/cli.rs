//! The `kbind` and `kubectl-bind` the printed commands run. `cargo run -p kbind-demo` builds the
//! demo only (it links kbind-cli as a library), so the demo is its own CLI: `<dir>/bin/kbind` and
//! `<dir>/bin/kubectl-bind` link to the demo's binary, which, started under either name, runs
//! [`kbind_cli::run_process`] — the entry point of the CLI's own binaries — and nothing else. The
//! printed `export PATH=...` puts that folder first, so `kbind ...` and kubectl's plugin lookup
//! for `kubectl bind ...` find them as printed, always built from the same code as the demo.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::world::step;

/// The names the CLI answers to.
const NAMES: [&str; 2] = ["kbind", "kubectl-bind"];

/// Whether this process was started as `kbind` or `kubectl-bind` (through a link [`link`] made).
pub fn invoked_as_cli() -> bool {
    std::env::args_os()
        .next()
        .as_deref()
        .map(Path::new)
        .and_then(Path::file_name)
        .and_then(|name| name.to_str())
        .is_some_and(|name| NAMES.contains(&name))
}

/// The folder with `kbind` and `kubectl-bind` in it, for the printed `export PATH=...`.
pub struct Binaries {
    /// `<dir>/bin`.
    pub bin_dir: PathBuf,
}

/// Links `dir/bin/kbind` and `dir/bin/kubectl-bind` to this binary.
pub fn link(dir: &Path) -> anyhow::Result<Binaries> {
    let exe = std::env::current_exe().context("cannot find the demo's own binary")?;
    let bin_dir = dir.join("bin");
    std::fs::create_dir_all(&bin_dir).with_context(|| format!("cannot create {}", bin_dir.display()))?;
    for name in NAMES {
        let path = bin_dir.join(name);
        // A restart with the same --dir finds the links of the run before.
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot replace {}", path.display())),
        }
        #[cfg(unix)]
        let made = std::os::unix::fs::symlink(&exe, &path);
        #[cfg(not(unix))]
        let made = std::fs::copy(&exe, &path).map(|_| ());
        made.with_context(|| format!("cannot link {} to {}", path.display(), exe.display()))?;
    }
    step(&format!("CLI: kbind and kubectl-bind linked in {}", bin_dir.display()));
    Ok(Binaries { bin_dir })
}
