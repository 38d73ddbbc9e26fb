//! The read side of a fake cluster: get, list (snapshots, pagination, selectors), discovery
//! and OpenAPI.

use kbind_cluster::{ApiResource, Discovery, Error, ListParams, Result};
use kube::api::VersionMatch;
use serde_json::{Value, json};

use crate::cluster::FakeCluster;
use crate::ops::{Caller, present};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ObjectKey, State, key_of};

impl FakeCluster {
    /// Reads one object.
    pub async fn get(&self, caller: &Caller, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<Value> {
        let info = self.admit(caller, "get", res, namespace, Some(name), "").await?;
        let state = self.inner.lock();
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        state
            .get(&info.group_resource(), &key)
            .map(|o| present(o, &info))
            .ok_or_else(|| Error::not_found(&info.group_resource().qualified(), name))
    }

    /// Lists objects as a `<Kind>List`.
    pub async fn list(
        &self,
        caller: &Caller,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<Value> {
        let fields = FieldSelector::parse(params.field_selector.as_deref().unwrap_or(""))?;
        let labels = LabelSelector::parse(params.label_selector.as_deref().unwrap_or(""))?;
        let info = self
            .admit(caller, "list", res, namespace, fields.pinned_name(), "")
            .await?;
        let gr = info.group_resource();
        let state = self.inner.lock();
        let (snapshot_rv, start_after, paginate) = match params.continue_token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => {
                let (rv, after) = decode_continue(token)?;
                if rv < state.floor_of(&gr) {
                    return Err(Error::Gone {
                        message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                    });
                }
                (rv, Some(after), true)
            }
            None => {
                let rv = list_resource_version(&state, params)?;
                // kube-apiserver serves resourceVersion=0 from its watch cache, which ignores limit.
                let from_cache = params.resource_version.as_deref() == Some("0");
                (rv, None, !from_cache)
            }
        };
        let objects = state.snapshot_at(&gr, snapshot_rv)?;
        let limit = params.limit.filter(|l| *l > 0 && paginate).map(|l| l as usize);
        let mut items = Vec::new();
        let mut continue_token = None;
        let mut remaining = 0usize;
        for ((ns, name), obj) in &objects {
            if namespace.is_some_and(|want| want != ns) {
                continue;
            }
            if start_after
                .as_ref()
                .is_some_and(|after| (ns, name) <= (&after.0, &after.1))
            {
                continue;
            }
            if !labels.matches(obj) || !fields.matches(obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                remaining += 1;
                continue;
            }
            items.push(present(obj, &info));
        }
        if remaining > 0 {
            let last = items.last().map(key_of).unwrap_or_default();
            continue_token = Some(encode_continue(snapshot_rv, &last));
        }
        let mut list_meta = json!({"resourceVersion": snapshot_rv.to_string()});
        if let Some(token) = continue_token {
            list_meta["continue"] = json!(token);
            if params.label_selector.is_none() && params.field_selector.is_none() {
                list_meta["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json!({
            "apiVersion": info.api_version(),
            "kind": format!("{}List", info.resource.kind),
            "metadata": list_meta,
            "items": items,
        }))
    }

    /// What the cluster serves.
    pub async fn discovery(&self, caller: &Caller) -> Result<Discovery> {
        let gate = self.inner.fault_gate("get", "").await;
        self.inner
            .record_request(caller, "discovery", String::new(), None, None, gate.as_ref().err());
        gate?;
        let mut discovery = self.inner.lock().registry.discovery();
        let hidden = self.inner.faults().undiscoverable.clone();
        let group_version = |group: &str, version: &str| match group {
            "" => version.to_string(),
            g => format!("{g}/{version}"),
        };
        discovery
            .resources
            .retain(|r| !hidden.contains(&group_version(&r.group, &r.version)));
        discovery.unavailable = discovery
            .groups
            .iter()
            .flat_map(|g| g.versions.iter().map(|v| group_version(&g.name, v)))
            .filter(|gv| hidden.contains(gv))
            .collect();
        Ok(discovery)
    }

    /// The OpenAPI v3 document of one group-version.
    pub async fn openapi_v3(&self, caller: &Caller, group: &str, version: &str) -> Result<Value> {
        let gate = self.inner.fault_gate("get", "").await;
        self.inner
            .record_request(caller, "openapi", String::new(), None, None, gate.as_ref().err());
        gate?;
        let state = self.inner.lock();
        let resources: Vec<_> = state
            .registry
            .all()
            .filter(|r| r.resource.group == group && r.resource.version == version)
            .map(|r| (r.resource.clone(), r.schema.clone()))
            .collect();
        if resources.is_empty() {
            return Err(Error::NotFound {
                message: format!("group-version {group}/{version} is not served"),
            });
        }
        Ok(crate::openapi::group_version_document(group, version, &resources))
    }
}

/// The resourceVersion a list without a continue token reads at.
fn list_resource_version(state: &State, params: &ListParams) -> Result<u64> {
    let requested = params
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty() && *rv != "0");
    let Some(requested) = requested else {
        return Ok(state.rv);
    };
    let rv: u64 = requested.parse().map_err(|_| Error::BadRequest {
        message: format!("invalid resource version: {requested:?}"),
    })?;
    match params.version_match {
        Some(VersionMatch::Exact) => Ok(rv),
        _ if rv > state.rv => Err(Error::Timeout(format!(
            "Too large resource version: {rv}, current: {}",
            state.rv
        ))),
        _ => Ok(state.rv),
    }
}

fn encode_continue(rv: u64, last: &ObjectKey) -> String {
    let raw = json!({"rv": rv, "ns": last.0, "name": last.1}).to_string();
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Result<(u64, ObjectKey)> {
    let bad = || Error::BadRequest {
        message: "continue key is not valid".into(),
    };
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16).ok())
        .collect();
    let value: Value = serde_json::from_slice(&bytes.ok_or_else(bad)?).map_err(|_| bad())?;
    let rv = value["rv"].as_u64().ok_or_else(bad)?;
    let ns = value["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = value["name"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, (ns, name)))
}
