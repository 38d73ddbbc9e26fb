//! Content negotiation: the `Accept` media types kube clients send and what they select.

use axum::http::{HeaderMap, header};

/// One media range of an `Accept` header, with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MediaType {
    /// `type/subtype`, lower-cased.
    pub essence: String,
    /// Parameters in order, names lower-cased.
    pub params: Vec<(String, String)>,
}

impl MediaType {
    fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn is_json(&self) -> bool {
        matches!(self.essence.as_str(), "application/json" | "application/*" | "*/*")
    }

    /// The `as`/`g`/`v` triple of a kube "profile" (`application/json;as=Table;g=meta.k8s.io;v=v1`).
    fn profile(&self) -> Option<(&str, &str, &str)> {
        Some((self.param("as")?, self.param("g")?, self.param("v")?))
    }
}

/// The media ranges of the request's `Accept` header, in the client's order.
pub(crate) fn accepted(headers: &HeaderMap) -> Vec<MediaType> {
    let raw = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    raw.split(',')
        .filter(|r| !r.trim().is_empty())
        .map(|range| {
            let mut parts = range.split(';');
            let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let params = parts
                .filter_map(|p| p.split_once('='))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
                .collect();
            MediaType { essence, params }
        })
        .collect()
}

/// What a client asked a read to be answered as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Plain JSON objects.
    Json,
    /// A `meta.k8s.io` Table of this version (`v1` or `v1beta1`).
    Table(String),
    /// Aggregated discovery of this `apidiscovery.k8s.io` version (`v2` or `v2beta1`).
    AggregatedDiscovery(String),
    /// Kubernetes protobuf (built-in kinds only, as kube-apiserver).
    Protobuf,
    /// Nothing fakeapi can produce (protobuf only for a custom resource, say).
    NotAcceptable,
}

/// The first answer in the client's order that fakeapi can give; no `Accept` means JSON.
pub(crate) fn negotiate(headers: &HeaderMap) -> Answer {
    negotiate_for(headers, false)
}

/// As [`negotiate`], for an answer that can also be protobuf when `protobuf` (a built-in kind:
/// kube-apiserver has no protobuf for custom resources, so it passes over that range).
pub(crate) fn negotiate_for(headers: &HeaderMap, protobuf: bool) -> Answer {
    let ranges = accepted(headers);
    if ranges.is_empty() {
        return Answer::Json;
    }
    for range in &ranges {
        // Protobuf profiles (a Table in protobuf) are not served: that range is passed over.
        if protobuf && range.essence == super::protobuf::MEDIA_TYPE && range.profile().is_none() {
            return Answer::Protobuf;
        }
        if !range.is_json() {
            continue;
        }
        match range.profile() {
            None => return Answer::Json,
            Some(("Table", "meta.k8s.io", v @ ("v1" | "v1beta1"))) => return Answer::Table(v.to_string()),
            Some(("APIGroupDiscoveryList", "apidiscovery.k8s.io", v @ ("v2" | "v2beta1"))) => {
                return Answer::AggregatedDiscovery(v.to_string());
            }
            Some(_) => {}
        }
    }
    Answer::NotAcceptable
}

/// Whether the client accepts this exact media type (`type/subtype`), before JSON.
pub(crate) fn prefers(headers: &HeaderMap, essence: &str) -> bool {
    accepted(headers)
        .iter()
        .find(|r| r.essence == essence || r.is_json())
        .is_some_and(|r| r.essence == essence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(accept: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static(accept));
        h
    }

    #[test]
    fn kubectl_get_asks_for_a_table_first() {
        let h = headers(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
        );
        assert_eq!(negotiate(&h), Answer::Table("v1".into()));
    }

    #[test]
    fn aggregated_discovery_is_chosen_by_version_in_order() {
        let h = headers(kube::core::discovery::v2::ACCEPT_AGGREGATED_DISCOVERY_V2);
        assert_eq!(negotiate(&h), Answer::AggregatedDiscovery("v2".into()));
        let h = headers("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList");
        assert_eq!(negotiate(&h), Answer::AggregatedDiscovery("v2beta1".into()));
    }

    #[test]
    fn protobuf_falls_back_to_json_only_when_offered() {
        assert_eq!(
            negotiate(&headers("application/vnd.kubernetes.protobuf,application/json")),
            Answer::Json
        );
        assert_eq!(
            negotiate(&headers("application/vnd.kubernetes.protobuf")),
            Answer::NotAcceptable
        );
        assert_eq!(negotiate(&HeaderMap::new()), Answer::Json);
        let both = headers("application/vnd.kubernetes.protobuf, application/json");
        assert_eq!(negotiate_for(&both, true), Answer::Protobuf);
        assert_eq!(
            negotiate_for(&headers("application/json, application/vnd.kubernetes.protobuf"), true),
            Answer::Json
        );
        let table = headers("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io");
        assert_eq!(negotiate_for(&table, true), Answer::NotAcceptable);
        assert_eq!(negotiate(&headers("*/*")), Answer::Json);
    }

    #[test]
    fn preference_for_a_media_type_follows_the_order() {
        let pb = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        assert!(prefers(
            &headers("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
            pb
        ));
        assert!(!prefers(&headers("application/json"), pb));
    }
}
