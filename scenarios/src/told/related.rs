//! Related resources of any kind, found by reference (issue 37), told on any [`Stage`]: a
//! Database's password Secret follows the name its spec holds, and an Ingress a Certificate
//! names goes up with its status coming back down. Asserted through the API only.

use std::sync::Arc;

use kbind_api::consts::annotation;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::apis::{crd, ingresses};
use crate::stage::Stage;

/// The namespace of the stories' objects.
const NS: &str = "default";
/// The bound API every stage starts with.
const WIDGETS: &str = "widgets.example.org";

fn secrets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

/// `<plural>.example.org/v1` of kind `kind`.
fn example(plural: &str, kind: &str) -> ApiResource {
    ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("a story object is a valid object: {e}"))
}

async fn read(client: &dyn ClusterClient, res: &ApiResource, name: &str) -> Option<DynamicObject> {
    client.get_opt(res, Some(NS), name).await.ok().flatten()
}

fn marked(obj: &DynamicObject) -> bool {
    obj.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotation::RELATED_BINDING))
}

/// Binds `api` next to the widgets and sets the binding's related rules.
async fn bind_with_rules(stage: &mut impl Stage, api: &str, rules: Value) {
    let consumer = stage.consumer();
    let binding = stage.cluster_binding();
    let patch = json!({"spec": {"apis": [{"name": WIDGETS}, {"name": api}], "relatedResources": rules}});
    consumer
        .patch(
            &ApiResource::erase::<kbind_api::ClusterBinding>(&()),
            None,
            binding,
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("[{}] setting the binding's related rules: {e}", stage.backend()));
}

/// Creates `obj` on the consumer once its API is served there (the binding pulls its CRD).
async fn create_when_served(stage: &mut impl Stage, res: &ApiResource, obj: Value) {
    let consumer = stage.consumer();
    let body = object(obj);
    let what = format!("[{}] {} can be created on the consumer", stage.backend(), res.kind);
    let (c, b) = (&consumer, &body);
    stage
        .eventually(&what, || async move {
            match c.create(res, Some(NS), b, &Default::default()).await {
                Ok(_) => Some(()),
                Err(kbind_cluster::Error::AlreadyExists { .. }) => Some(()),
                Err(_) => None,
            }
        })
        .await;
}

async fn create(stage: &impl Stage, client: &dyn ClusterClient, res: &ApiResource, obj: Value) {
    let body = object(obj);
    client
        .create(res, Some(NS), &body, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("[{}] creating {} : {e}", stage.backend(), res.kind));
}

async fn merge(stage: &impl Stage, client: &dyn ClusterClient, res: &ApiResource, name: &str, patch: Value) {
    client
        .patch(res, Some(NS), name, &Patch::Merge(patch), &PatchParams::default())
        .await
        .unwrap_or_else(|e| panic!("[{}] patching {} {name}: {e}", stage.backend(), res.kind));
}

/// Waits until `name` of `res` on `client` is a related copy (`present`) or absent.
async fn copy_is(
    stage: &mut impl Stage,
    what: &str,
    client: &Arc<dyn ClusterClient>,
    res: &ApiResource,
    name: &str,
    present: bool,
) {
    let what = format!("[{}] {what}", stage.backend());
    stage
        .eventually(&what, || async move {
            let copy = read(client.as_ref(), res, name).await;
            (copy.as_ref().is_some_and(marked) == present && (present || copy.is_none())).then_some(())
        })
        .await;
}

/// Issue 37: a Database names the Secret its password is in (`spec.passwordSecretRef.name`);
/// the Secret goes up by reference, a changed reference moves the copy, a removed one collects
/// it, and the consumer's Secrets stay.
pub async fn a_database_password_found_by_reference_follows_the_reference(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    stage.export_api(crd("databases", "Database", "Namespaced", true)).await;
    stage.allow_related("", "secrets").await;
    for name in ["db-pw-1", "db-pw-2"] {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "stringData": {"password": format!("{name}-value")}});
        create(stage, consumer.as_ref(), &secrets(), secret).await;
    }
    bind_with_rules(
        stage,
        "databases.example.org",
        json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
            "selector": {"references": [{"path": "spec.passwordSecretRef.name"}]}}]),
    )
    .await;
    let databases = example("databases", "Database");
    create_when_served(
        stage,
        &databases,
        json!({"apiVersion": "example.org/v1", "kind": "Database", "metadata": {"name": "orders", "namespace": NS},
            "spec": {"engine": "postgres", "passwordSecretRef": {"name": "db-pw-1"}}}),
    )
    .await;
    copy_is(
        stage,
        "the referenced Secret goes up",
        &provider,
        &secrets(),
        "db-pw-1",
        true,
    )
    .await;
    let copy = read(provider.as_ref(), &secrets(), "db-pw-1").await;
    assert_eq!(
        copy.and_then(|c| c.data.pointer("/data/password").cloned()),
        Some(json!("ZGItcHctMS12YWx1ZQ==")),
        "[{}] the copy carries the Secret's data",
        stage.backend()
    );
    assert!(
        read(provider.as_ref(), &secrets(), "db-pw-2").await.is_none(),
        "[{}] an unreferenced Secret stays on the consumer",
        stage.backend()
    );

    merge(
        stage,
        consumer.as_ref(),
        &databases,
        "orders",
        json!({"spec": {"passwordSecretRef": {"name": "db-pw-2"}}}),
    )
    .await;
    copy_is(
        stage,
        "the newly referenced Secret goes up",
        &provider,
        &secrets(),
        "db-pw-2",
        true,
    )
    .await;
    copy_is(
        stage,
        "the Secret no longer referenced is collected",
        &provider,
        &secrets(),
        "db-pw-1",
        false,
    )
    .await;

    merge(
        stage,
        consumer.as_ref(),
        &databases,
        "orders",
        json!({"spec": {"passwordSecretRef": null}}),
    )
    .await;
    copy_is(
        stage,
        "a removed reference collects its copy",
        &provider,
        &secrets(),
        "db-pw-2",
        false,
    )
    .await;
    for name in ["db-pw-1", "db-pw-2"] {
        assert!(
            read(consumer.as_ref(), &secrets(), name).await.is_some(),
            "[{}] the consumer's Secret {name} stays",
            stage.backend()
        );
    }
}

/// Issue 37: a Certificate names the consumer's Ingress (`spec.ingressName`); the Ingress goes up
/// as it is (not its status), the provider's controller writes the copy's status, and with
/// `syncStatus` that status comes back onto the consumer's Ingress, once (no echo).
pub async fn an_ingress_for_a_certificate_has_its_status_synced_back(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    stage.serve_ingresses().await;
    stage
        .export_api(crd("certificates", "Certificate", "Namespaced", true))
        .await;
    stage.allow_related("networking.k8s.io", "ingresses").await;
    let spec = json!({"defaultBackend": {"service": {"name": "shop", "port": {"number": 80}}}});
    create(
        stage,
        consumer.as_ref(),
        &ingresses(),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "shop", "namespace": NS, "labels": {"app": "shop"}}, "spec": spec}),
    )
    .await;
    bind_with_rules(
        stage,
        "certificates.example.org",
        json!([{"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer", "syncStatus": true,
            "selector": {"references": [{"path": "spec.ingressName"}]}}]),
    )
    .await;
    let certificates = example("certificates", "Certificate");
    create_when_served(
        stage,
        &certificates,
        json!({"apiVersion": "example.org/v1", "kind": "Certificate", "metadata": {"name": "shop-tls", "namespace": NS},
            "spec": {"dnsNames": ["shop.example.com"], "ingressName": "shop"}}),
    )
    .await;
    copy_is(stage, "the Ingress goes up", &provider, &ingresses(), "shop", true).await;
    let copy = read(provider.as_ref(), &ingresses(), "shop")
        .await
        .unwrap_or_else(|| panic!("[{}] the Ingress copy", stage.backend()));
    assert_eq!(
        copy.data["spec"],
        spec,
        "[{}] the copy has the Ingress's spec",
        stage.backend()
    );
    assert_eq!(
        copy.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("shop"),
        "[{}] and its labels",
        stage.backend()
    );

    let status = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}});
    provider
        .patch_status(
            &ingresses(),
            Some(NS),
            "shop",
            &Patch::Merge(json!({"status": status})),
            &PatchParams::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("[{}] the provider writes the copy's status: {e}", stage.backend()));
    let what = format!(
        "[{}] the status comes back onto the consumer's Ingress",
        stage.backend()
    );
    let (c, wanted) = (&consumer, &status);
    let version = stage
        .eventually(&what, || async move {
            let mine = read(c.as_ref(), &ingresses(), "shop").await?;
            (mine.data["status"] == *wanted).then(|| mine.metadata.resource_version.clone())
        })
        .await;
    stage.settle().await;
    let mine = read(consumer.as_ref(), &ingresses(), "shop").await;
    assert_eq!(
        mine.as_ref().and_then(|m| m.metadata.resource_version.clone()),
        version,
        "[{}] the consumer's Ingress is written once, not again and again",
        stage.backend()
    );
    assert_eq!(
        mine.map(|m| m.data["spec"].clone()),
        Some(spec),
        "[{}] its spec is the user's",
        stage.backend()
    );
}

/// Sets the binding's related rules, its APIs as they are.
async fn set_rules(stage: &mut impl Stage, rules: Value) {
    let consumer = stage.consumer();
    let binding = stage.cluster_binding();
    consumer
        .patch(
            &ApiResource::erase::<kbind_api::ClusterBinding>(&()),
            None,
            binding,
            &Patch::Merge(json!({"spec": {"relatedResources": rules}})),
            &PatchParams::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("[{}] setting the binding's related rules: {e}", stage.backend()));
}

/// The binding's condition `type_` as (status, reason, message).
async fn binding_condition(
    consumer: &dyn ClusterClient,
    binding: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let binding: kbind_api::ClusterBinding = consumer.get_typed_opt(None, binding).await.ok().flatten()?;
    let found = kbind_api::conditions::find(&binding.status?.conditions, type_)?.clone();
    Some((found.status, found.reason, found.message))
}

/// Waits until the binding's condition `type_` has `status` (and `reason`, when given) and
/// `holds` for its message; the message.
async fn condition_where(
    stage: &mut impl Stage,
    what: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    holds: impl Fn(&str) -> bool,
) -> String {
    let consumer = stage.consumer();
    let binding = stage.cluster_binding();
    let what = format!("[{}] {what}", stage.backend());
    let (c, holds) = (&consumer, &holds);
    stage
        .eventually(&what, || async move {
            let (s, r, message) = binding_condition(c.as_ref(), binding, type_).await?;
            (s == status && reason.is_none_or(|want| r == want) && holds(&message)).then_some(message)
        })
        .await
}

/// A widget puts `default` in use, so the ClusterBinding copies related objects there.
async fn put_default_in_use(stage: &mut impl Stage) {
    let consumer = stage.consumer();
    super::create_widget(stage, consumer.as_ref(), "in-use", json!({"size": 1})).await;
}

/// A `Subnet` of `subnets.example.org` labelled `share: yes`.
fn subnet(name: &str) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": "Subnet",
        "metadata": {"name": name, "namespace": NS, "labels": {"share": "yes"}}, "spec": {"cidr": "10.0.0.0/24"}})
}

fn ingress(name: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": NS, "labels": {"share": "yes"}},
        "spec": {"defaultBackend": {"service": {"name": name, "port": {"number": 80}}}}})
}

/// Issue 37: a rule of a kind the consumer does not serve and one of a cluster-scoped kind are
/// named in `Ready=False`/`RelatedKindNotServed` while the binding's Secret rule keeps syncing;
/// once the consumer serves the kind its rule syncs without a restart and the binding is Ready.
pub async fn a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    let subnets = example("subnets", "Subnet");
    stage.allow_related("", "secrets").await;
    stage.allow_related("example.org", "subnets").await;
    put_default_in_use(stage).await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shared", "namespace": NS},
        "stringData": {"k": "v"}});
    create(stage, consumer.as_ref(), &secrets(), secret).await;
    let subnet_rule = json!({"group": "example.org", "resource": "subnets", "direction": "FromConsumer",
        "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}});
    let secret_rule = json!({"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"names": ["shared"]}});
    let namespace_rule = json!({"group": "", "resource": "namespaces", "direction": "FromConsumer",
        "selector": {"names": [NS]}});
    set_rules(stage, json!([subnet_rule, namespace_rule, secret_rule])).await;
    let message = condition_where(
        stage,
        "Ready names the kinds that cannot be synced",
        kbind_api::consts::condition::READY,
        "False",
        Some(kbind_api::consts::reason::RELATED_KIND_NOT_SERVED),
        |m| m.contains("namespaces"),
    )
    .await;
    assert!(
        message.contains("subnets.example.org is not served by the consumer"),
        "[{}] {message}",
        stage.backend()
    );
    assert!(
        message.contains("namespaces is cluster-scoped; related resources must be namespaced"),
        "[{}] {message}",
        stage.backend()
    );
    copy_is(
        stage,
        "the Secret rule keeps syncing",
        &provider,
        &secrets(),
        "shared",
        true,
    )
    .await;

    // The consumer starts serving Subnets: the rule syncs on its own, without a restart.
    set_rules(stage, json!([subnet_rule, secret_rule])).await;
    stage.serve_kind(crd("subnets", "Subnet", "Namespaced", false)).await;
    create(stage, consumer.as_ref(), &subnets, subnet("edge")).await;
    copy_is(
        stage,
        "the Subnet goes up once it is served",
        &provider,
        &subnets,
        "edge",
        true,
    )
    .await;
    condition_where(
        stage,
        "the binding is Ready again",
        kbind_api::consts::condition::READY,
        "True",
        None,
        |_| true,
    )
    .await;
}

/// Issue 37: a rule of a kind the konnector's RBAC on the consumer does not let it read is
/// `PermissionDenied`/`Forbidden` naming the verb and the resource, the binding not Ready and
/// nothing copied; once the consumer admin consents, the copy goes up and the condition clears.
pub async fn a_kind_the_konnector_may_not_read_is_permission_denied_naming_verb_and_resource(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    stage.serve_ingresses().await;
    stage.refuse_related("networking.k8s.io", "ingresses").await;
    put_default_in_use(stage).await;
    create(stage, consumer.as_ref(), &ingresses(), ingress("shop")).await;
    set_rules(
        stage,
        json!([{"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer",
            "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}}]),
    )
    .await;
    let message = condition_where(
        stage,
        "PermissionDenied names the refused verb and resource",
        kbind_api::consts::condition::PERMISSION_DENIED,
        "True",
        Some(kbind_api::consts::reason::FORBIDDEN),
        |_| true,
    )
    .await;
    assert!(
        message.contains("the konnector's RBAC on the consumer may not: list ingresses.networking.k8s.io"),
        "[{}] {message}",
        stage.backend()
    );
    let ready = binding_condition(
        consumer.as_ref(),
        stage.cluster_binding(),
        kbind_api::consts::condition::READY,
    )
    .await;
    assert_eq!(
        ready.map(|(status, _, _)| status).as_deref(),
        Some("False"),
        "[{}] not Ready while a rule cannot be read",
        stage.backend()
    );
    assert!(
        read(provider.as_ref(), &ingresses(), "shop").await.is_none(),
        "[{}] nothing went up",
        stage.backend()
    );

    // The consumer admin grants the kind: the copy goes up and the condition clears.
    stage.allow_related("networking.k8s.io", "ingresses").await;
    copy_is(
        stage,
        "the Ingress goes up once the konnector may read it",
        &provider,
        &ingresses(),
        "shop",
        true,
    )
    .await;
    condition_where(
        stage,
        "PermissionDenied clears",
        kbind_api::consts::condition::PERMISSION_DENIED,
        "False",
        None,
        |_| true,
    )
    .await;
}
