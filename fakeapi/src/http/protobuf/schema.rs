//! The Kubernetes v1.35 protobuf schema: descriptors compiled from the vendored `generated.proto`
//! files, and the Go-JSON facts (field names, `omitempty`, pointers, inlining) of the Go types they
//! stand for, both from hack/fakeapi-proto.sh.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};
use serde::Deserialize;

/// How encoding/json writes one protobuf field of a Go struct.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct GoField {
    /// The JSON key (empty for an inlined struct).
    pub json: String,
    /// `omitempty`: a zero scalar or empty list/map is left out.
    #[serde(default)]
    pub omitempty: bool,
    /// `omitzero`: a zero value (a zero Time) is left out.
    #[serde(default)]
    pub omitzero: bool,
    /// A Go pointer: present means written, even when zero.
    #[serde(default)]
    pub pointer: bool,
    /// `json:",inline"`: the message's fields sit in the parent object.
    #[serde(default)]
    pub inline: bool,
}

#[derive(Deserialize)]
struct GoJson {
    kinds: HashMap<String, String>,
    messages: HashMap<String, HashMap<u32, GoField>>,
    wrappers: Vec<String>,
    #[cfg_attr(not(test), allow(dead_code))]
    custom: Vec<String>,
}

/// Descriptors plus Go-JSON facts.
pub(super) struct Schema {
    pub pool: DescriptorPool,
    kinds: HashMap<String, String>,
    messages: HashMap<String, HashMap<u32, GoField>>,
    wrappers: HashSet<String>,
    /// Messages whose Go type writes its own JSON (checked against the codec's list in tests).
    #[cfg(test)]
    pub custom: Vec<String>,
}

const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.pb"));
const GO_JSON: &str = include_str!("../../../proto/gojson.json");

/// The schema, loaded once (both inputs are compiled in, so a failure is a build defect).
pub(super) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let pool = DescriptorPool::decode(DESCRIPTORS).expect("build.rs writes a valid descriptor set");
        let go: GoJson = serde_json::from_str(GO_JSON).expect("proto/gojson.json is valid");
        Schema {
            pool,
            kinds: go.kinds,
            messages: go.messages,
            wrappers: go.wrappers.into_iter().collect(),
            #[cfg(test)]
            custom: go.custom,
        }
    })
}

impl Schema {
    /// The message of `apiVersion`/`kind` (`v1`/`ConfigMap`, `apps/v1`/`DeploymentList`).
    pub fn message_of(&self, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
        let name = self.kinds.get(&format!("{api_version}/{kind}"))?;
        self.pool.get_message_by_name(name)
    }

    /// The message by full name.
    pub fn message(&self, name: &str) -> Option<MessageDescriptor> {
        self.pool.get_message_by_name(name)
    }

    /// How Go writes field `number` of `message`; `None` for a field Go does not know.
    pub fn go_field(&self, message: &MessageDescriptor, number: u32) -> Option<&GoField> {
        self.messages.get(message.full_name())?.get(&number)
    }

    /// Whether `message` stands for a Go slice type (`ExtraValue []string`): JSON is its `items`.
    pub fn is_wrapper(&self, message: &MessageDescriptor) -> bool {
        self.wrappers.contains(message.full_name())
    }
}
