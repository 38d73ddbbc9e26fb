//! The `core.kbind.io/v1alpha1` API: the `Connection`, `ClusterBinding` and `Binding` types,
//! their CRDs, condition helpers, and every exact marker string of the kbind contract.
//!
//! The CRDs are committed as one multi-document file, [`crds::CRDS_YAML_PATH`]; a test fails
//! when it drifts from [`crds()`] and names the command that regenerates it.
//!
//! Short names: `kconn` (Connection), `kcb` (ClusterBinding), `kbd` (Binding); all three are
//! in the `kbind` category, so `kubectl get kbind` lists them together.

pub mod binding;
pub mod catalog;
pub mod conditions;
pub mod connection;
pub mod consts;
pub mod crds;
pub mod iam;
pub mod placement;
pub mod service;

pub use binding::{
    Binding, BindingSpec, BindingStatus, BoundApiRef, BoundApiStatus, ClusterBinding, ClusterBindingSpec,
    ConflictPolicy, ConnectionRef, RelatedKind, RelatedReference, RelatedResource, RelatedResourceDirection,
    RelatedResourceSelector,
};
pub use catalog::{Collection, CollectionSpec, Export, ExportApiStatus, ExportRef, ExportSpec, ExportStatus};
pub use connection::{
    Connection, ConnectionSpec, ConnectionStatus, ExportedApi, KubeconfigSecretRef, PullPolicy, ResourceScope,
    SchemaPolicy, SchemaSource, UpdatePolicy,
};
pub use crds::{backend_crds, backend_crds_yaml, crds, crds_yaml};
pub use iam::{
    Grant, GrantIdentity, GrantSpec, GrantStatus, Issued, IssuedObject, Pickup, grant_name, keyed_grant_name,
};
