//! Child processes that cannot outlive the test: each in its own process group, killed on drop and on the test process's death.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{OnceLock, mpsc};

use parking_lot::Mutex;

use crate::Error;

/// A running server process whose stdout and stderr go to a log file; dropping it kills its process group.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program args…` in a new process group, logging to `log`.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: PathBuf) -> Result<Self, Error> {
        let out = File::create(&log).map_err(|e| Error::io(format!("failed to create {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io(format!("failed to reopen {}", log.display()), e))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        die_with_parent(&mut command);
        let child = spawn_from_long_lived_thread(command).map_err(|source| Error::Spawn {
            name: name.to_string(),
            program: program.to_path_buf(),
            source,
        })?;
        Ok(Process {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// The process id (also its process group id).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The file the process logs to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status if the process has already ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the process's log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Fails with the exit status and log tail when the process has ended.
    pub fn check_running(&mut self) -> Result<(), Error> {
        match self.exited() {
            Some(status) => Err(Error::Exited {
                name: self.name.clone(),
                status,
                log: self.log_tail(30),
            }),
            None => Ok(()),
        }
    }

    /// Kills the whole process group and reaps the process.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let Ok(pgid) = libc::pid_t::try_from(self.child.id()) else {
                return;
            };
            // SAFETY: kill(2) with a negative pid signals the process group we created; no memory is shared.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a log file (empty when unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Asks the kernel to SIGKILL the child when its parent dies, so a test process that aborts or is killed
/// (where no `Drop` runs) still takes its servers with it.
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe functions.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Why: the parent may have died before prctl took effect.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

type SpawnRequest = (Command, mpsc::SyncSender<io::Result<Child>>);

/// Spawns on one thread that lives as long as the process: PR_SET_PDEATHSIG fires when the *thread* that
/// forked the child ends, and test or runtime threads end long before the servers should.
fn spawn_from_long_lived_thread(command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("kbind-testenv-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("kbind-testenv: no spawner thread ({e}); children spawn in place"));
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let sent = spawner.lock().send((command, reply_tx));
    match sent {
        Ok(()) => reply_rx.recv().map_err(|_| io::Error::other("spawner thread gone"))?,
        Err(mpsc::SendError((mut command, _))) => command.spawn(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Running or sleeping; a zombie waiting for a reaper counts as gone.
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    }

    /// Polls `done` until it holds, failing with `what` after ten seconds.
    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn dropping_a_process_kills_its_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
        let process = Process::spawn(
            "sh",
            Path::new("/bin/sh"),
            &["-c".into(), script],
            dir.path().join("sh.log"),
        )
        .unwrap();
        let pid = process.id();
        let read_pid = || {
            std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
        };
        wait_until("the shell never wrote its child's pid", || read_pid().is_some());
        let grandchild = read_pid().unwrap();
        assert!(alive(pid) && alive(grandchild));
        drop(process);
        assert!(!alive(pid), "the shell was reaped");
        wait_until(&format!("grandchild {grandchild} survived the group kill"), || {
            !alive(grandchild)
        });
    }

    #[test]
    fn an_ended_process_reports_its_status_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut process = Process::spawn(
            "sh",
            Path::new("/bin/sh"),
            &["-c".into(), "echo boom; exit 3".into()],
            dir.path().join("l"),
        )
        .unwrap();
        wait_until("sh -c 'exit 3' never ended", || process.exited().is_some());
        let text = process.check_running().unwrap_err().to_string();
        assert!(text.contains("boom") && text.contains('3'), "{text}");
    }
}
