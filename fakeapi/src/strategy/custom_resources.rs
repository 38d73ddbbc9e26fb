//! Custom resources, as apiextensions-apiserver serves them: defaulted and pruned by their
//! structural schema, `generation` maintained, updates conditional on `resourceVersion`, and no
//! strategic merge patch (there are no patch strategies to merge by).

use serde_json::Value;

use super::Strategy;
use crate::registry::ResourceInfo;
use crate::schema;

/// The strategy of every resource a CRD defines.
pub(crate) struct CustomResources;

impl Strategy for CustomResources {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn allows_unconditional_update(&self) -> bool {
        false
    }

    fn supports_strategic_merge_patch(&self) -> bool {
        false
    }

    fn normalize(&self, info: &ResourceInfo, obj: &mut Value) {
        schema::apply_defaults(obj, &info.schema);
        schema::prune(obj, &info.schema);
    }
}
