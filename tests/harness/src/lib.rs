//! Real Kubernetes for tests: N independent clusters (kube-apiserver + kube-controller-manager) on loopback over one etcd.
//!
//! ```no_run
//! # async fn example() -> Result<(), kbind_testenv::Error> {
//! use kbind_testenv::{TestEnv, User};
//! // Prints one line and skips when the binaries are missing, unless KBIND_REQUIRE_REAL_K8S=1.
//! let Some(env) = TestEnv::start_or_skip(2).await? else { return Ok(()) };
//! let admin = env.cluster(0).client(User::Admin).await?;
//! # drop(admin);
//! # Ok(())
//! # }
//! ```

mod binaries;
mod cluster;
mod etcd;
mod net;
mod pki;
mod process;
mod proxy;
mod throttle;
mod users;

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use tokio::time::Instant;

pub use binaries::{Binaries, ETCD_VERSION, KUBE_VERSION, Missing, required, tools_cache};
pub use cluster::{CONTROLLERS, Cluster, ClusterOptions};
pub use proxy::FaultProxy;
pub use throttle::Throttle;
pub use users::User;

use cluster::ClusterKit;
use etcd::Etcd;
use pki::Pki;

/// Start-up deadline when `KBIND_TESTENV_TIMEOUT_SECS` is unset: generous, since the cores are shared.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// Why a test environment could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The binaries are not built (see hack/kube/build.sh).
    #[error(transparent)]
    Missing(#[from] Missing),
    /// A file or socket operation failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Certificate or key generation failed.
    #[error("failed to generate certificates")]
    Pki(#[from] rcgen::Error),
    /// A server process could not be started.
    #[error("failed to start {name} ({})", program.display())]
    Spawn {
        /// Which server.
        name: String,
        /// The executable.
        program: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A server process ended on its own.
    #[error("{name} exited with {status}; log tail:\n{log}")]
    Exited {
        /// Which server.
        name: String,
        /// How it ended.
        status: ExitStatus,
        /// The last lines it logged.
        log: String,
    },
    /// A server did not become ready before the deadline.
    #[error("{what} not ready after {after:?}; log tail:\n{log}")]
    NotReady {
        /// What was awaited.
        what: String,
        /// How long it was awaited.
        after: Duration,
        /// The last lines the server logged.
        log: String,
    },
    /// A generated kubeconfig could not be turned into a client configuration.
    #[error("failed to load a kubeconfig")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A client could not be built.
    #[error("failed to build a client")]
    Client(#[from] kube::Error),
    /// A throttle could not be set up or lifted.
    #[error("throttle: {0}")]
    Throttle(String),
    /// No cluster has that index.
    #[error("no cluster {index}: the environment has {len}")]
    NoSuchCluster {
        /// The index asked for.
        index: usize,
        /// How many clusters there are.
        len: usize,
    },
}

impl Error {
    fn io(context: String, source: std::io::Error) -> Self {
        Error::Io { context, source }
    }
}

/// N running clusters sharing one etcd; dropping it kills every process it started and deletes its files.
#[derive(Debug)]
pub struct TestEnv {
    // Why this order: fields drop in order, so apiservers stop before the etcd they use.
    clusters: Vec<Cluster>,
    etcd: Etcd,
    shared: ClusterKit,
    timeout: Duration,
    started_in: Duration,
    dir: tempfile::TempDir,
}

impl TestEnv {
    /// Finds the binaries: env vars `KBIND_KUBE_APISERVER`, `KBIND_KUBE_CONTROLLER_MANAGER`, `KBIND_ETCD`, else the tools cache.
    pub fn binaries() -> Result<Binaries, Missing> {
        binaries::find()
    }

    /// Starts `n` clusters with the binaries from [`TestEnv::binaries`].
    pub async fn start(n: usize) -> Result<TestEnv, Error> {
        Self::start_with(Self::binaries()?, n).await
    }

    /// Like [`TestEnv::start`], but when binaries are missing prints one line and returns `None` (the test skips),
    /// unless `KBIND_REQUIRE_REAL_K8S=1`, where that is an error.
    pub async fn start_or_skip(n: usize) -> Result<Option<TestEnv>, Error> {
        Self::start_or_skip_with(&vec![ClusterOptions::default(); n]).await
    }

    /// Like [`TestEnv::start_or_skip`], one cluster per entry of `options`, each run as its entry says.
    pub async fn start_or_skip_with(options: &[ClusterOptions]) -> Result<Option<TestEnv>, Error> {
        match Self::binaries() {
            Ok(binaries) => Self::start_with_options(binaries, options).await.map(Some),
            Err(missing) if required() => Err(missing.into()),
            Err(missing) => {
                eprintln!("kbind-testenv: skipped (KBIND_REQUIRE_REAL_K8S=1 fails instead): {missing}");
                Ok(None)
            }
        }
    }

    /// Starts `n` clusters with the given binaries and waits until each is ready.
    pub async fn start_with(binaries: Binaries, n: usize) -> Result<TestEnv, Error> {
        Self::start_with_options(binaries, &vec![ClusterOptions::default(); n]).await
    }

    /// Starts one cluster per entry of `options` with the given binaries and waits until each is ready.
    pub async fn start_with_options(binaries: Binaries, options: &[ClusterOptions]) -> Result<TestEnv, Error> {
        let began = Instant::now();
        let timeout = timeout_from_env();
        let deadline = began + timeout;
        let mut dir = tempfile::Builder::new()
            .prefix("kbind-testenv-")
            .tempdir()
            .map_err(|e| Error::io("failed to create the environment folder".into(), e))?;
        let keep = std::env::var_os("KBIND_TESTENV_KEEP").is_some_and(|v| v == "1");
        if keep {
            // Why: server logs are what explains a failing real-cluster test.
            dir.disable_cleanup(true);
            eprintln!("kbind-testenv: keeping {} (KBIND_TESTENV_KEEP=1)", dir.path().display());
        }
        let root = dir.path().to_path_buf();
        let pki = Pki::generate(&root)?;
        let tokens = users::Tokens::generate();
        let token_file = root.join("tokens.csv");
        std::fs::write(&token_file, tokens.auth_file())
            .map_err(|e| Error::io(format!("failed to write {}", token_file.display()), e))?;
        let etcd = Etcd::start(&binaries.etcd, &root, deadline).await?;
        let shared = ClusterKit {
            binaries,
            pki,
            tokens,
            etcd_url: etcd.url(),
            root,
        };
        let starts = options
            .iter()
            .enumerate()
            .map(|(index, options)| Cluster::start(&shared, index, 0, None, options.clone(), deadline));
        let clusters = futures::future::try_join_all(starts).await?;
        Ok(TestEnv {
            clusters,
            etcd,
            shared,
            timeout,
            started_in: began.elapsed(),
            dir,
        })
    }

    /// Cluster `index`.
    ///
    /// # Panics
    /// When there is no such cluster, like slice indexing: a bug in the test.
    pub fn cluster(&self, index: usize) -> &Cluster {
        &self.clusters[index]
    }

    /// Every cluster, in index order.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// Replaces cluster `index` by a fresh one behind the same address: the old apiserver and controller-manager
    /// are stopped, new ones start on the same port under a new etcd prefix, so the cluster has a new identity
    /// (new kube-system UID, no objects) while kubeconfigs stay valid.
    pub async fn replace_cluster(&mut self, index: usize) -> Result<(), Error> {
        let len = self.clusters.len();
        let old = self
            .clusters
            .get_mut(index)
            .ok_or(Error::NoSuchCluster { index, len })?;
        old.stop();
        let (port, generation, options) = (old.port(), old.generation() + 1, old.options().clone());
        let deadline = Instant::now() + self.timeout;
        let fresh = Cluster::start(&self.shared, index, generation, Some(port), options, deadline).await?;
        self.clusters[index] = fresh;
        Ok(())
    }

    /// Restarts cluster `index`'s kube-apiserver: [`TestEnv::stop_apiserver`], then [`TestEnv::start_apiserver`].
    pub async fn restart_apiserver(&mut self, index: usize) -> Result<(), Error> {
        self.stop_apiserver(index)?;
        self.start_apiserver(index).await
    }

    /// Kills cluster `index`'s kube-apiserver (SIGKILL, as a crash or an OOM kill would); its controller-manager
    /// keeps running and retries. Nothing answers on its port until [`TestEnv::start_apiserver`].
    pub fn stop_apiserver(&mut self, index: usize) -> Result<(), Error> {
        self.cluster_mut(index)?.stop_apiserver();
        Ok(())
    }

    /// Starts cluster `index`'s kube-apiserver again after [`TestEnv::stop_apiserver`], with the same arguments on
    /// the same port over the same etcd prefix: the same cluster (identity, objects, kubeconfigs) after a gap.
    /// Returns once `/readyz` answers ok; does nothing while it runs.
    pub async fn start_apiserver(&mut self, index: usize) -> Result<(), Error> {
        let deadline = Instant::now() + self.timeout;
        let shared = &self.shared;
        let len = self.clusters.len();
        let cluster = self
            .clusters
            .get_mut(index)
            .ok_or(Error::NoSuchCluster { index, len })?;
        cluster.start_apiserver(shared, deadline).await
    }

    fn cluster_mut(&mut self, index: usize) -> Result<&mut Cluster, Error> {
        let len = self.clusters.len();
        self.clusters.get_mut(index).ok_or(Error::NoSuchCluster { index, len })
    }

    /// How long [`TestEnv::start`] took, from nothing to every cluster ready.
    pub fn startup_time(&self) -> Duration {
        self.started_in
    }

    /// The folder holding certificates, tokens, etcd data, kubeconfigs and server logs; deleted on drop
    /// unless `KBIND_TESTENV_KEEP=1`.
    pub fn work_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Every process id the environment runs (etcd, then apiserver and controller-manager per cluster).
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(self.etcd.pid())
            .chain(self.clusters.iter().flat_map(Cluster::pids))
            .collect()
    }
}

/// `KBIND_TESTENV_TIMEOUT_SECS`, else [`DEFAULT_TIMEOUT`].
fn timeout_from_env() -> Duration {
    std::env::var("KBIND_TESTENV_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT)
}
