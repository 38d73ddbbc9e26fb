//! The kbind konnector binary: `konnector crds` and `konnector run` (see the library).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    konnector::Konnector::builder().main().await
}
