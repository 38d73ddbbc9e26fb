//! Compiles the vendored Kubernetes `generated.proto` files (proto/, from hack/fakeapi-proto.sh)
//! into the descriptor set fakeapi's protobuf codec embeds.

use std::path::PathBuf;

use prost::Message;

const FILES: &[&str] = &[
    "k8s.io/api/core/v1/generated.proto",
    "k8s.io/api/apps/v1/generated.proto",
    "k8s.io/api/coordination/v1/generated.proto",
    "k8s.io/api/events/v1/generated.proto",
    "k8s.io/api/rbac/v1/generated.proto",
    "k8s.io/api/authentication/v1/generated.proto",
    "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1/generated.proto",
];

fn main() {
    println!("cargo:rerun-if-changed=proto");
    let set = match protox::compile(FILES, ["proto"]) {
        Ok(set) => set,
        Err(e) => panic!("compiling fakeapi/proto: {e}"),
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("kubernetes.pb");
    std::fs::write(&out, set.encode_to_vec()).expect("writing the descriptor set");
}
