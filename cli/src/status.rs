//! `kbind status`: this cluster's Connections and bindings, their conditions, conflict counts
//! and stale objects, which Connection serves each API in each namespace, plus what `unbind` shares with it (finding a Connection's bindings and the
//! objects of their APIs).

use kbind_api::consts::annotation;
use kbind_cluster::{ApiResource, ClusterClient, DiscoveredResource, Discovery};
use serde_json::{Value, json};

use crate::Context;
use crate::args::Format;
use crate::consumer::{self, Target, condition_of};
use crate::error::Result;
use crate::output::{emit, render, table};
use crate::placement::{self, Served};

/// A binding of a Connection on the consumer.
pub struct BindingRef {
    /// `Binding` or `ClusterBinding`.
    pub kind: String,
    /// The Binding's namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The object.
    pub object: Value,
}

impl BindingRef {
    /// The APIs it binds (`<plural>.<group>`).
    pub fn apis(&self) -> Vec<String> {
        self.object["spec"]["apis"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Every binding on the consumer, with the Connection each references.
pub async fn bindings(client: &dyn ClusterClient) -> Result<Vec<(String, BindingRef)>> {
    bindings_of(client, false).await
}

/// Every binding on the consumer as [`bindings`], none when kbind's CRDs are not installed
/// (`bind -o yaml` for a cluster without a konnector yet).
pub async fn bindings_if_installed(client: &dyn ClusterClient) -> Result<Vec<(String, BindingRef)>> {
    bindings_of(client, true).await
}

async fn bindings_of(client: &dyn ClusterClient, missing_ok: bool) -> Result<Vec<(String, BindingRef)>> {
    let mut out = Vec::new();
    for kind in ["ClusterBinding", "Binding"] {
        let res = consumer::resource_of(kind);
        let objects = match client.list(&res, None, &Default::default()).await {
            Ok(list) => list.items.iter().map(consumer::object_value).collect(),
            Err(e) if missing_ok && e.is_not_found() => Vec::new(),
            Err(e) => {
                return Err(consumer::consumer_error(
                    &format!("cannot list {} on the consumer", res.plural),
                    e,
                ));
            }
        };
        for object in objects {
            let connection = object["spec"]["connectionRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            out.push((
                connection,
                BindingRef {
                    kind: kind.into(),
                    namespace: object["metadata"]["namespace"].as_str().map(str::to_string),
                    name: object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                    object,
                },
            ));
        }
    }
    Ok(out)
}

/// The consumer objects a binding serves: its APIs' objects (in its namespace for a Binding).
pub async fn served_objects(client: &dyn ClusterClient, binding: &BindingRef) -> Result<Vec<(ApiResource, Value)>> {
    let discovery = discover(client).await?;
    let mut out = Vec::new();
    for api in binding.apis() {
        let Some(found) = find_api(&discovery, &api) else {
            continue;
        };
        let res = found.api_resource();
        let ns = if found.namespaced {
            binding.namespace.as_deref()
        } else {
            None
        };
        for object in consumer::list(client, &res, ns).await? {
            out.push((res.clone(), object));
        }
    }
    Ok(out)
}

/// What the consumer serves.
pub async fn discover(client: &dyn ClusterClient) -> Result<Discovery> {
    client
        .discovery()
        .await
        .map_err(|e| consumer::consumer_error("cannot discover the consumer's APIs", e))
}

/// Where `discovery` serves the API `<plural>.<group>`, if it does.
pub fn find_api<'a>(discovery: &'a Discovery, api: &str) -> Option<&'a DiscoveredResource> {
    let (plural, group) = api.split_once('.').unwrap_or((api, ""));
    discovery.find(group, plural)
}

fn ready_columns(object: &Value) -> (String, String) {
    match condition_of(object, kbind_api::consts::condition::READY) {
        Some((status, reason, _)) => (status, if reason.is_empty() { "-".into() } else { reason }),
        None => ("Unknown".into(), "-".into()),
    }
}

fn conditions_column(object: &Value) -> String {
    let list: Vec<String> = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter(|c| c["type"] != "Ready")
                .map(|c| {
                    format!(
                        "{}={}",
                        c["type"].as_str().unwrap_or("?"),
                        c["status"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() { "-".into() } else { list.join(",") }
}

/// `kbind status`.
pub async fn status(target: &Target, output: Option<Format>, ctx: &mut Context) -> Result<()> {
    let client = consumer::connect(target).await?;
    let connections = consumer::list(&client, &consumer::resource_of("Connection"), None).await?;
    let bindings = bindings(&client).await?;
    let mut rows = Vec::new();
    let mut machine = Vec::new();
    for connection in &connections {
        let name = connection["metadata"]["name"].as_str().unwrap_or_default();
        let (ready, reason) = ready_columns(connection);
        rows.push(vec![
            "Connection".into(),
            "-".into(),
            name.to_string(),
            "-".into(),
            ready.clone(),
            reason.clone(),
            conditions_column(connection),
            "-".into(),
            "-".into(),
        ]);
        let mut item = json!({"kind": "Connection", "name": name, "ready": ready, "reason": reason,
            "conditions": connection.pointer("/status/conditions").cloned().unwrap_or(json!([]))});
        if let Some(at) = credential_expires_at(connection) {
            item["credentialExpiresAt"] = json!(at);
        }
        machine.push(item);
    }
    for (connection, binding) in &bindings {
        let (ready, reason) = ready_columns(&binding.object);
        let conflicts: i64 = binding.object["status"]["boundAPIs"]
            .as_array()
            .map(|apis| apis.iter().filter_map(|a| a["conflictCount"].as_i64()).sum())
            .unwrap_or(0);
        let stale = served_objects(&client, binding)
            .await?
            .iter()
            .filter(|(_, o)| o["metadata"]["annotations"][annotation::STATUS_STALE].is_string())
            .count();
        rows.push(vec![
            binding.kind.clone(),
            binding.namespace.clone().unwrap_or_else(|| "-".into()),
            binding.name.clone(),
            connection.clone(),
            ready.clone(),
            reason.clone(),
            conditions_column(&binding.object),
            conflicts.to_string(),
            stale.to_string(),
        ]);
        machine.push(
            json!({"kind": binding.kind, "namespace": binding.namespace, "name": binding.name,
            "connection": connection, "ready": ready, "reason": reason, "conflicts": conflicts, "staleObjects": stale,
            "conditions": binding.object.pointer("/status/conditions").cloned().unwrap_or(json!([]))}),
        );
    }
    let served = placement::served(&bindings);
    let text = match output {
        Some(format) => render(
            &json!({"items": machine, "servedBy": served.iter().map(Served::to_json).collect::<Vec<_>>()}),
            format,
        )?,
        None if rows.is_empty() => {
            "No Connections or bindings on this cluster; `kbind catalog` and `kbind bind` add one.\n".into()
        }
        None => {
            let mut text = table(
                &[
                    "KIND",
                    "NAMESPACE",
                    "NAME",
                    "CONNECTION",
                    "READY",
                    "REASON",
                    "CONDITIONS",
                    "CONFLICTS",
                    "STALE",
                ],
                rows,
            );
            text.push_str(&served_by_text(&served));
            text.push_str(&credentials_text(&connections, jiff::Timestamp::now()));
            text
        }
    };
    emit(&mut ctx.stdout, &text)
}

/// When a Connection's issued token expires (`status.credentialExpiresAt`), as written.
fn credential_expires_at(connection: &Value) -> Option<&str> {
    connection
        .pointer("/status/credentialExpiresAt")
        .and_then(Value::as_str)
}

/// The CREDENTIALS table: when each Connection's issued token expires, and what to do about an
/// expired one; nothing when no Connection runs on an issued token.
fn credentials_text(connections: &[Value], now: jiff::Timestamp) -> String {
    let rows: Vec<Vec<String>> = connections
        .iter()
        .filter_map(|c| {
            let at = credential_expires_at(c)?;
            let expired = at.parse::<jiff::Timestamp>().is_ok_and(|t| t <= now);
            let state = if expired {
                "expired: run `kbind bind` or `kbind redeem` again"
            } else {
                "renewed by the konnector before then"
            };
            Some(vec![
                c["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                at.to_string(),
                state.to_string(),
            ])
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!("\nCREDENTIALS\n{}", table(&["CONNECTION", "EXPIRES", "RENEWAL"], rows))
}

/// The SERVED BY table: per API and namespace, which Connection (and binding) serves it, and
/// how to see it per object; nothing when no binding names an API.
fn served_by_text(served: &[Served]) -> String {
    if served.is_empty() {
        return String::new();
    }
    let rows = served
        .iter()
        .map(|s| {
            let state = if s.deleting {
                format!("{} (deleting)", s.state)
            } else {
                s.state.clone()
            };
            vec![
                s.api.clone(),
                s.namespace_column().to_string(),
                s.connection.clone(),
                s.binding_column(),
                state,
            ]
        })
        .collect();
    let apis: std::collections::BTreeSet<&str> = served.iter().map(|s| s.api.as_str()).collect();
    let mut text = format!(
        "\nSERVED BY\n{}Each object's Connection: kubectl get {} -A -L {}\n",
        table(&["API", "NAMESPACE", "CONNECTION", "BINDING", "STATE"], rows),
        apis.into_iter().collect::<Vec<_>>().join(","),
        placement::CONNECTION_LABEL
    );
    // A name longer than a label value is labelled with its hash: say which, or the column
    // above would show a value no Connection is called.
    let connections: std::collections::BTreeSet<&str> = served.iter().map(|s| s.connection.as_str()).collect();
    for connection in connections {
        let value = placement::connection_label(connection);
        if value != connection {
            text.push_str(&format!(
                "Connection {connection} labels its objects {}={value} (its name is no label value; the full name is in annotation {})\n",
                placement::CONNECTION_LABEL,
                kbind_api::consts::annotation::CONNECTION
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(connection: &str) -> Served {
        Served {
            api: "widgets.example.org".into(),
            namespace: None,
            connection: connection.into(),
            kind: "ClusterBinding".into(),
            name: "widgets".into(),
            state: placement::SERVING.into(),
            deleting: false,
            claimed: true,
        }
    }

    #[test]
    fn credentials_show_each_issued_tokens_expiry_and_the_way_out_of_an_expired_one() {
        let now: jiff::Timestamp = "2026-12-05T12:00:00Z".parse().unwrap();
        let connection = |name: &str, expires: Option<&str>| {
            let mut c = json!({"metadata": {"name": name}, "status": {}});
            if let Some(at) = expires {
                c["status"]["credentialExpiresAt"] = json!(at);
            }
            c
        };
        let text = credentials_text(
            &[
                connection("acme", Some("2026-12-06T08:00:00Z")),
                connection("platform", None),
                connection("stale", Some("2026-12-05T11:00:00Z")),
            ],
            now,
        );
        assert!(text.starts_with("\nCREDENTIALS\n"), "{text}");
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_default()
                .to_string()
        };
        assert!(line("acme").contains("2026-12-06T08:00:00Z") && line("acme").contains("renewed by the konnector"));
        assert!(
            line("stale").contains("expired: run `kbind bind` or `kbind redeem` again"),
            "{text}"
        );
        assert_eq!(
            line("platform"),
            "",
            "a credential that is not an issued token has no row"
        );
        assert_eq!(credentials_text(&[connection("platform", None)], now), "");
    }

    #[test]
    fn a_hashed_connection_label_is_named_in_the_hint() {
        let short = served_by_text(&[served("acme")]);
        assert!(short.contains("-L core.kbind.io/connection"), "{short}");
        assert!(!short.contains("sha256-"), "{short}");
        let long_name = "p".repeat(100);
        let long = served_by_text(&[served(&long_name)]);
        let value = kbind_api::consts::connection_label_value(&long_name);
        assert!(
            long.contains(&format!(
                "Connection {long_name} labels its objects core.kbind.io/connection={value}"
            )),
            "{long}"
        );
    }
}
