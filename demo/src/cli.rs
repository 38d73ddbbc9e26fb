//! The `kbind` and `kubectl-bind` binaries the printed commands run. `cargo run -p kbind-demo`
//! builds the demo only (it links kbind-cli as a library), so under cargo they are built here,
//! into the demo's own target folder and profile (a no-op when they are fresh), and linked into
//! `<dir>/bin`, which the printed `export PATH=...` puts first: `kbind ...` and kubectl's plugin
//! lookup for `kubectl bind ...` then find them as printed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};

use crate::world::step;

/// The CLI's binaries, as the printed commands find them.
pub struct Binaries {
    /// The folder to put first on PATH; `None` when `kbind` was found on PATH already.
    pub bin_dir: Option<PathBuf>,
}

/// The binaries of kbind-cli.
const NAMES: [&str; 2] = ["kbind", "kubectl-bind"];

impl Binaries {
    /// Builds the binaries when run by cargo, links them into `dir/bin`; else uses those next to
    /// the demo, else those on PATH.
    pub fn find_or_build(dir: &Path) -> anyhow::Result<Binaries> {
        let exe = std::env::current_exe().context("cannot find the demo's own binary")?;
        let beside = exe.parent().context("the demo's binary has no folder")?.to_path_buf();
        if let Some(cargo) = std::env::var_os("CARGO")
            && !fresh(&exe, &beside)
        {
            build(cargo, &beside)?;
        }
        if NAMES.iter().all(|name| beside.join(name).is_file()) {
            let bin_dir = dir.join("bin");
            std::fs::create_dir_all(&bin_dir).with_context(|| format!("cannot create {}", bin_dir.display()))?;
            for name in NAMES {
                link(&beside.join(name), &bin_dir.join(name))?;
            }
            step(&format!("CLI: kbind and kubectl-bind linked in {}", bin_dir.display()));
            return Ok(Binaries { bin_dir: Some(bin_dir) });
        }
        if on_path("kbind") && on_path("kubectl-bind") {
            step("CLI: kbind and kubectl-bind from your PATH");
            return Ok(Binaries { bin_dir: None });
        }
        bail!(
            "kbind and kubectl-bind are neither next to {} nor on PATH: run the demo with `cargo run -p kbind-demo`, \
             or build them with `cargo build -p kbind-cli --bins`",
            exe.display()
        )
    }
}

/// Whether both binaries exist and are no older than the demo's: cargo rebuilds the demo whenever
/// kbind-cli's code changes, so older binaries may be stale, and newer ones were built from the
/// code the demo was. Spares a cargo run (and waiting on its lock) on every start.
fn fresh(exe: &Path, beside: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(demo) = modified(exe) else { return false };
    NAMES
        .iter()
        .all(|name| modified(&beside.join(name)).is_some_and(|built| built >= demo))
}

/// `cargo build -p kbind-demo -p kbind-cli --bins` into the target folder and profile of the
/// demo's binary (`<target>/<profile>/kbind-demo`). Why the demo too: with the same packages
/// selected, cargo resolves the same features as for `cargo run -p kbind-demo`, so it reuses
/// every library that run built and only links the two binaries.
fn build(cargo: OsString, beside: &Path) -> anyhow::Result<()> {
    let profile = beside
        .file_name()
        .and_then(|p| p.to_str())
        .context("the demo's binary is not in a cargo profile folder")?;
    let target_dir = beside
        .parent()
        .context("the demo's binary is not in a cargo target folder")?;
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "-q",
            "-p",
            "kbind-demo",
            "-p",
            "kbind-cli",
            "--bins",
            "--target-dir",
        ])
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    println!("  … building kbind and kubectl-bind (cargo build -p kbind-cli --bins)");
    let status = command
        .status()
        .context("cannot run cargo to build kbind and kubectl-bind")?;
    ensure!(
        status.success(),
        "`cargo build -p kbind-cli --bins` failed ({status}); its errors are above"
    );
    Ok(())
}

/// Points `link` at `target`, replacing what was there (a restart with the same `--dir`).
fn link(target: &Path, link: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(link) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot replace {}", link.display())),
    }
    #[cfg(unix)]
    let made = std::os::unix::fs::symlink(target, link);
    #[cfg(not(unix))]
    let made = std::fs::copy(target, link).map(|_| ());
    made.with_context(|| format!("cannot link {} to {}", link.display(), target.display()))
}

/// Whether an executable file `name` is in a folder of PATH.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}
