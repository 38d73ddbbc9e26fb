//! `kubectl-bind`, the kubectl plugin (`kubectl bind …`): the same CLI as `kbind`, see [`kbind_cli`].

fn main() {
    std::process::exit(kbind_cli::run_process());
}
