//! Every conformance case, by area; each is `async fn(&dyn Target) -> CaseResult`.

mod apply;
mod builtins;
mod crds;
mod faults;
mod gc;
mod lifecycle;
mod list;
mod metadata;
mod patch;
mod protobuf;
mod rbac;
mod status;
mod versions;
mod watch;

pub use apply::*;
pub use builtins::*;
pub use crds::*;
pub use faults::*;
pub use gc::*;
pub use lifecycle::*;
pub use list::*;
pub use metadata::*;
pub use patch::*;
pub use protobuf::*;
pub use rbac::*;
pub use status::*;
pub use versions::*;
pub use watch::*;
