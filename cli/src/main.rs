//! `kbind` (and `kubectl-bind`, the kubectl plugin): see [`kbind_cli`].

fn main() {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kbind: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let config_dir = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| std::path::PathBuf::from("."))
        .join("kbind");
    let ctx = kbind_cli::Context {
        stdout: Box::new(std::io::stdout()),
        stderr: Box::new(std::io::stderr()),
        interactive,
        config_dir,
        kubeconfig: None,
    };
    let code = runtime.block_on(kbind_cli::run(std::env::args().collect(), ctx));
    std::process::exit(code);
}
