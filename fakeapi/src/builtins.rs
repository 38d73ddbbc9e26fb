//! The built-in resources fakeapi serves, with the schemas (list-map and merge keys) that
//! server-side apply and strategic merge patch need.

use kbind_cluster::DiscoveredResource;

use crate::schema::Schema;

/// One built-in resource.
#[derive(Debug, Clone)]
pub struct Builtin {
    /// Discovery entry.
    pub resource: DiscoveredResource,
    /// Schema of the whole object.
    pub schema: Schema,
}

/// Every built-in resource.
pub fn all() -> Vec<Builtin> {
    vec![]
}
