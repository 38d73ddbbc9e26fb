//! `kbind`: see [`kbind_cli`].

fn main() {
    std::process::exit(kbind_cli::run_process());
}
