//! A konnector whose provider copies are named `c1-<consumer name>`; it takes the same
//! subcommands and flags as `konnector` (`cargo run -- run --help`).

use kbind_engine::{Mapper, ObjectKey};
use konnector::{ApiResource, Konnector};

/// Prefixes provider names; provider objects without the prefix map to no consumer object.
struct Prefix(&'static str);

impl Mapper for Prefix {
    fn to_provider(&self, _: &ApiResource, key: &ObjectKey) -> ObjectKey {
        ObjectKey {
            name: format!("{}{}", self.0, key.name),
            ..key.clone()
        }
    }

    fn to_consumer(&self, _: &ApiResource, key: &ObjectKey) -> Option<ObjectKey> {
        let name = key.name.strip_prefix(self.0)?.to_string();
        Some(ObjectKey { name, ..key.clone() })
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    Konnector::builder().mapper(Prefix("c1-")).main().await
}
