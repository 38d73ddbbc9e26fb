//! Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl's typed clients send
//! that way (`kubectl create configmap|secret|namespace|serviceaccount|role|rolebinding|token`),
//! decoded into their JSON form. Answers are always JSON (kubectl accepts both).

use jiff::Timestamp;
use kbind_cluster::Error;
use serde_json::{Map, Value, json};

/// The 4-byte prefix of every Kubernetes protobuf message.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    Time,
    Msg(&'static [Field]),
    MapStr,
    MapBytes,
}

/// One field of a message (numbers from the Kubernetes `generated.proto` files).
struct Field {
    num: u64,
    name: &'static str,
    kind: Kind,
    repeated: bool,
}

const fn f(num: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        num,
        name,
        kind,
        repeated: false,
    }
}

const fn many(num: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        num,
        name,
        kind,
        repeated: true,
    }
}

const OWNER_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(5, "apiVersion", Kind::Str),
    f(6, "controller", Kind::Bool),
    f(7, "blockOwnerDeletion", Kind::Bool),
];

const OBJECT_META: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "generateName", Kind::Str),
    f(3, "namespace", Kind::Str),
    f(5, "uid", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "generation", Kind::Int),
    f(8, "creationTimestamp", Kind::Time),
    f(11, "labels", Kind::MapStr),
    f(12, "annotations", Kind::MapStr),
    many(13, "ownerReferences", Kind::Msg(OWNER_REFERENCE)),
    many(14, "finalizers", Kind::Str),
];

const META: Field = f(1, "metadata", Kind::Msg(OBJECT_META));

const CONFIG_MAP: &[Field] = &[
    META,
    f(2, "data", Kind::MapStr),
    f(3, "binaryData", Kind::MapBytes),
    f(4, "immutable", Kind::Bool),
];

const SECRET: &[Field] = &[
    META,
    f(2, "data", Kind::MapBytes),
    f(3, "type", Kind::Str),
    f(4, "stringData", Kind::MapStr),
    f(5, "immutable", Kind::Bool),
];

const NAMESPACE: &[Field] = &[META, f(2, "spec", Kind::Msg(&[many(1, "finalizers", Kind::Str)]))];

const SERVICE_ACCOUNT: &[Field] = &[META, f(4, "automountServiceAccountToken", Kind::Bool)];

const BOUND_OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "apiVersion", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
];

const TOKEN_REQUEST: &[Field] = &[
    META,
    f(
        2,
        "spec",
        Kind::Msg(&[
            many(1, "audiences", Kind::Str),
            f(3, "boundObjectRef", Kind::Msg(BOUND_OBJECT_REFERENCE)),
            f(4, "expirationSeconds", Kind::Int),
        ]),
    ),
];

const POLICY_RULE: &[Field] = &[
    many(1, "verbs", Kind::Str),
    many(2, "apiGroups", Kind::Str),
    many(3, "resources", Kind::Str),
    many(4, "resourceNames", Kind::Str),
    many(5, "nonResourceURLs", Kind::Str),
];

const ROLE: &[Field] = &[META, many(2, "rules", Kind::Msg(POLICY_RULE))];

const BINDING: &[Field] = &[
    META,
    many(
        2,
        "subjects",
        Kind::Msg(&[
            f(1, "kind", Kind::Str),
            f(2, "apiGroup", Kind::Str),
            f(3, "name", Kind::Str),
            f(4, "namespace", Kind::Str),
        ]),
    ),
    f(
        3,
        "roleRef",
        Kind::Msg(&[
            f(1, "apiGroup", Kind::Str),
            f(2, "kind", Kind::Str),
            f(3, "name", Kind::Str),
        ]),
    ),
];

fn message_of(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    Some(match (api_version, kind) {
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => BINDING,
        _ => return None,
    })
}

/// Decodes a protobuf request body (envelope and object) into the object's JSON form.
pub(crate) fn decode(body: &[u8]) -> Result<Value, Error> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed("missing the k8s protobuf prefix"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    let mut reader = Reader::new(envelope);
    while let Some((num, wire)) = reader.field()? {
        match (num, wire) {
            (1, Wire::Len(type_meta)) => {
                let mut inner = Reader::new(type_meta);
                while let Some((n, w)) = inner.field()? {
                    match (n, w) {
                        (1, Wire::Len(b)) => api_version = text(b)?,
                        (2, Wire::Len(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Len(bytes)) => raw = bytes,
            _ => {}
        }
    }
    let fields = message_of(&api_version, &kind).ok_or_else(|| Error::Server {
        code: 415,
        reason: "UnsupportedMediaType".into(),
        message: format!("fakeapi cannot decode {kind} ({api_version}) from protobuf; send application/json"),
    })?;
    let mut object = message(raw, fields)?;
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    Ok(object)
}

fn message(bytes: &[u8], fields: &[Field]) -> Result<Value, Error> {
    let mut out = Map::new();
    let mut reader = Reader::new(bytes);
    while let Some((num, wire)) = reader.field()? {
        let Some(field) = fields.iter().find(|f| f.num == num) else {
            continue;
        };
        match field.kind {
            Kind::MapStr | Kind::MapBytes => {
                let Wire::Len(entry) = wire else {
                    return Err(malformed("map entry is not length-delimited"));
                };
                let (key, value) = map_entry(entry, matches!(field.kind, Kind::MapBytes))?;
                let map = out.entry(field.name).or_insert_with(|| json!({}));
                if let Some(map) = map.as_object_mut() {
                    map.insert(key, value);
                }
            }
            kind => {
                let value = scalar(kind, wire)?;
                if field.repeated {
                    let list = out.entry(field.name).or_insert_with(|| json!([]));
                    if let Some(list) = list.as_array_mut() {
                        list.push(value);
                    }
                } else {
                    out.insert(field.name.into(), value);
                }
            }
        }
    }
    Ok(Value::Object(out))
}

fn map_entry(bytes: &[u8], binary: bool) -> Result<(String, Value), Error> {
    let (mut key, mut value) = (String::new(), json!(""));
    let mut reader = Reader::new(bytes);
    while let Some((num, wire)) = reader.field()? {
        match (num, wire) {
            (1, Wire::Len(b)) => key = text(b)?,
            (2, Wire::Len(b)) if binary => value = json!(base64(b)),
            (2, Wire::Len(b)) => value = json!(text(b)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn scalar(kind: Kind, wire: Wire<'_>) -> Result<Value, Error> {
    Ok(match (kind, wire) {
        (Kind::Str, Wire::Len(b)) => json!(text(b)?),
        // int64 travels as its two's complement in a varint.
        (Kind::Int, Wire::Varint(v)) => json!(v as i64),
        (Kind::Bool, Wire::Varint(v)) => json!(v != 0),
        (Kind::Time, Wire::Len(b)) => time(b)?,
        (Kind::Msg(fields), Wire::Len(b)) => message(b, fields)?,
        _ => return Err(malformed("field has an unexpected wire type")),
    })
}

/// A `metav1.Time` (`seconds = 1`, `nanos = 2`) as its RFC 3339 JSON form.
fn time(bytes: &[u8]) -> Result<Value, Error> {
    let mut seconds = 0i64;
    let mut reader = Reader::new(bytes);
    while let Some((num, wire)) = reader.field()? {
        if let (1, Wire::Varint(v)) = (num, wire) {
            seconds = v as i64;
        }
    }
    let ts = Timestamp::from_second(seconds).map_err(|e| malformed(&e.to_string()))?;
    Ok(json!(kbind_cluster::clock::format_time(ts)))
}

fn text(bytes: &[u8]) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| malformed("string is not UTF-8"))
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn malformed(why: &str) -> Error {
    Error::BadRequest {
        message: format!("unable to decode protobuf body: {why}"),
    }
}

/// A protobuf field's payload by wire type.
enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or_else(|| malformed("truncated varint"))?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| malformed("truncated field"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// The next field number and payload, `None` at the end.
    fn field(&mut self) -> Result<Option<(u64, Wire<'a>)>, Error> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| malformed("length overflows"))?;
                Wire::Len(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err(malformed("unsupported wire type")),
        };
        Ok(Some((key >> 3, wire)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn len_field(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3 | 2, &mut out);
        varint(payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [len_field(1, api_version.as_bytes()), len_field(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), len_field(1, &type_meta), len_field(2, raw)].concat()
    }

    #[test]
    fn a_config_map_as_kubectl_create_sends_it_decodes() {
        let meta = [len_field(1, b"a"), len_field(3, b"default")].concat();
        let entry = |k: &str, v: &[u8]| [len_field(1, k.as_bytes()), len_field(2, v)].concat();
        let raw = [
            len_field(1, &meta),
            len_field(2, &entry("x", b"1")),
            len_field(2, &entry("y", b"2")),
            len_field(3, &entry("bin", b"hi!?")),
        ]
        .concat();
        let obj = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            obj,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "default"},
                "data": {"x": "1", "y": "2"},
                "binaryData": {"bin": "aGkhPw=="},
            })
        );
    }

    #[test]
    fn repeated_messages_and_varints_decode() {
        let rule = [len_field(1, b"get"), len_field(1, b"list"), len_field(3, b"pods")].concat();
        let raw = [len_field(1, &len_field(1, b"r")), len_field(2, &rule)].concat();
        let obj = decode(&envelope("rbac.authorization.k8s.io/v1", "Role", &raw)).unwrap();
        assert_eq!(obj["rules"], json!([{"verbs": ["get", "list"], "resources": ["pods"]}]));
        let mut spec = Vec::new();
        varint(4 << 3, &mut spec);
        varint(600, &mut spec);
        let token = decode(&envelope(
            "authentication.k8s.io/v1",
            "TokenRequest",
            &len_field(2, &spec),
        ))
        .unwrap();
        assert_eq!(token["spec"]["expirationSeconds"], 600);
    }

    #[test]
    fn unknown_kinds_and_garbage_are_refused() {
        assert_eq!(decode(&envelope("apps/v1", "Deployment", b"")).unwrap_err().code(), 415);
        assert_eq!(decode(b"not protobuf").unwrap_err().code(), 400);
        let truncated = [MAGIC.to_vec(), vec![0x0a, 0x05, b'a']].concat();
        assert_eq!(decode(&truncated).unwrap_err().code(), 400);
    }

    #[test]
    fn base64_pads_like_the_standard_encoding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }
}
