//! The kbind konnector binary: `konnector crds`, `konnector run` and, with the default feature
//! `demo`, `konnector demo` (see the library).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    konnector::Konnector::builder().main().await
}
