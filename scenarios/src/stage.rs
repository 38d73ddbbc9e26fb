//! Where a story is told: the seeded fake world here, or real kube-apiservers with the konnector
//! binary (konnector/tests/real). A story written against [`Stage`] runs on both, so the fake
//! and the real backend are held to the same observable behaviour.

use std::future::Future;
use std::sync::Arc;

use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt};
use serde_json::Value;

use crate::invariants::Violation;
use crate::world::World;

/// Steps a fake stage waits for a condition before the story fails (at one second a step).
const MAX_STEPS: u64 = 240;

/// A consumer and one provider, the konnector running between them with the widgets API of
/// `crate::apis` bound through one Connection, and the faults a story may inject.
pub trait Stage {
    /// `fakeapi` or `real`, for messages.
    fn backend(&self) -> &'static str;

    /// The name of the Connection the stage applied.
    fn connection(&self) -> &'static str;

    /// The name of the ClusterBinding the stage applied (widgets through [`Stage::connection`]).
    fn cluster_binding(&self) -> &'static str;

    /// The consumer cluster as its admin sees it.
    fn consumer(&self) -> Arc<dyn ClusterClient>;

    /// The provider cluster as its admin sees it (after [`Stage::replace_provider`], the new one).
    fn provider(&self) -> Arc<dyn ClusterClient>;

    /// Waits until `check` yields a value: the fake stage steps its paused clock, the real one
    /// polls against a deadline. Fails the story with `what` when it never does.
    fn eventually<T, F, Fut>(&mut self, what: &str, check: F) -> impl Future<Output = T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>;

    /// Lets the konnector act on what it has seen, for a story that shows something does NOT
    /// happen: two renewals of its leader Lease on the consumer (the konnector's own tick, which
    /// both stages run with leader election on).
    fn settle(&mut self) -> impl Future<Output = ()> {
        async {
            let consumer = self.consumer();
            for _ in 0..2 {
                let before = crate::told::leader_renewed_at(consumer.as_ref()).await;
                let (watched, before) = (&consumer, &before);
                self.eventually("the konnector renews its leader Lease", || async move {
                    (crate::told::leader_renewed_at(watched.as_ref()).await != *before).then_some(())
                })
                .await;
            }
        }
    }

    /// Deletes an object on the consumer as its admin, as a user does; the fake stage records it
    /// so §8.1 counts what kbind deletes because of it (a binding's CRD) as asked for.
    fn delete(&mut self, res: &ApiResource, namespace: Option<&str>, name: &str) -> impl Future<Output = ()>;

    /// The provider admin exports one more API: installs `crd` (labelled exported) and waits
    /// until it is served.
    fn export_api(&mut self, crd: Value) -> impl Future<Output = ()>;

    /// Lets the konnector's provider credential do what removing an emptied provider namespace
    /// takes (read every namespaced resource, delete namespaces); least privilege leaves it out.
    fn allow_namespace_removal(&mut self) -> impl Future<Output = ()>;

    /// Lets the konnector read `resource` of `group` on the consumer (and write its status) and
    /// write it on the provider, as admins who consent to a related kind do (the fake stage's
    /// konnector is an admin already).
    fn allow_related(&mut self, group: &str, resource: &str) -> impl Future<Output = ()>;

    /// Withholds the consent of [`Stage::allow_related`] for `resource` of `group`: the konnector
    /// may not list or watch it on the consumer until a later `allow_related` (real servers: the
    /// chart's RBAC grants Secrets, ConfigMaps and the bound groups only, and the stage removes
    /// its own grant of the kind; the fake stage, whose konnector is an admin, refuses the
    /// konnector's lists and watches of it).
    fn refuse_related(&mut self, group: &str, resource: &str) -> impl Future<Output = ()>;

    /// Makes both clusters serve `networking.k8s.io/v1` Ingresses with a status subresource
    /// (real servers do; the fake stage installs a CRD of that name on both).
    fn serve_ingresses(&mut self) -> impl Future<Output = ()>;

    /// Makes both clusters serve the kind `crd` defines (a CRD nobody exports): installs it on
    /// each and waits until both serve it.
    fn serve_kind(&mut self, crd: Value) -> impl Future<Output = ()>;

    /// The provider refuses the konnector's lists and watches of widgets from now on (RBAC on
    /// real servers) and drops the watches it has open, so they must be opened again.
    fn refuse_widget_watches(&mut self) -> impl Future<Output = ()>;

    /// Ends [`Stage::refuse_widget_watches`].
    fn allow_widget_watches(&mut self) -> impl Future<Output = ()>;

    /// Cuts the provider off from the konnector.
    fn partition(&mut self) -> impl Future<Output = ()>;

    /// Ends [`Stage::partition`].
    fn heal(&mut self) -> impl Future<Output = ()>;

    /// Replaces the provider with a fresh cluster (a new identity) at the same address, on which
    /// the Connection's credential is valid and the widgets API is exported again.
    fn replace_provider(&mut self) -> impl Future<Output = ()>;
}

/// A stage with a second provider: a Connection to each of two providers (both exporting
/// widgets, both allowing Bindings in every namespace, both Ready), the konnector running, and no
/// binding applied, so a story binds namespaces itself ([`Stage::cluster_binding`] names none).
/// [`Stage::provider`], [`Stage::connection`], [`Stage::partition`] and [`Stage::export_api`]
/// are about the first provider; [`Stage::allow_related`] consents on both.
pub trait TwoProviders: Stage {
    /// The Connections to the first and the second provider.
    fn connections(&self) -> [&'static str; 2];

    /// The provider behind `connection`, as its admin sees it.
    fn provider_of(&self, connection: &str) -> Arc<dyn ClusterClient>;

    /// Kills the konnector without any cleanup, starts another, and waits until both Connections
    /// are Ready again.
    fn restart_konnector(&mut self) -> impl Future<Output = ()>;

    /// How many widget writes (create, apply, delete) in namespace `ns` the provider behind
    /// `connection` has answered so far, where the stage can count them (the fake stage's write
    /// log; `None` on real servers, where a story checks what is there instead).
    fn widget_writes(&self, connection: &str, ns: &str) -> Option<usize>;
}

/// The seeded fake world as a stage: provider `acme`, the binding Ready, §8 checked after
/// every step.
pub struct FakeStage {
    /// The world, for story-specific checks (write logs) beyond the shared ones.
    pub world: World,
    /// Whether [`Stage::refuse_related`] injected refusals on the consumer.
    refusing_related: bool,
}

impl FakeStage {
    /// A world with provider `acme` exporting widgets, its bundle applied and the ClusterBinding
    /// Ready.
    pub async fn bound(story: &str, seed: u64) -> Self {
        let mut world = World::builder()
            .seed(seed)
            .story(story)
            .provider("acme", crate::ProviderOpts::default())
            .build()
            .await;
        world.install_provider_crd("acme", crate::apis::widgets_crd()).await;
        let cred = world.mint_admin_token("acme");
        let kubeconfig = world.kubeconfig_for(&cred);
        for obj in crate::bundle::bundle("acme", crate::world::NAMESPACE, &kubeconfig, &["widgets.example.org"]) {
            world.apply_object(obj).await;
        }
        world.start_konnector();
        let mut stage = Self {
            world,
            refusing_related: false,
        };
        let consumer = stage.consumer();
        stage
            .eventually("ClusterBinding acme is Ready", || {
                let consumer = consumer.clone();
                async move {
                    crate::told::binding_ready(consumer.as_ref(), "acme")
                        .await
                        .then_some(())
                }
            })
            .await;
        stage
    }
}

impl FakeStage {
    /// A world with providers `acme` (exporting widgets) and `beta` (exporting `beta_crd`), a
    /// Connection to each allowing Bindings in every namespace, no binding, konnector-0 running
    /// and both Connections Ready.
    pub async fn two_providers(story: &str, seed: u64, beta_crd: Value) -> Self {
        let mut world = World::builder()
            .seed(seed)
            .story(story)
            .provider("acme", crate::ProviderOpts::default())
            .provider("beta", crate::ProviderOpts::default())
            .build()
            .await;
        world.install_provider_crd("acme", crate::apis::widgets_crd()).await;
        world.install_provider_crd("beta", beta_crd).await;
        for provider in SECOND_PROVIDERS {
            let cred = world.mint_admin_token(provider);
            let mut objects =
                crate::bundle::bundle(provider, crate::world::NAMESPACE, &world.kubeconfig_for(&cred), &[]);
            objects[1]["metadata"]["annotations"] = serde_json::json!({
                kbind_api::consts::annotation::BINDING_NAMESPACES: kbind_api::consts::BINDING_NAMESPACES_ALL,
            });
            for obj in objects {
                world.apply_object(obj).await;
            }
        }
        world.start_konnector();
        let mut stage = Self {
            world,
            refusing_related: false,
        };
        stage.connections_ready().await;
        stage
    }

    async fn connections_ready(&mut self) {
        let consumer = self.consumer();
        for name in SECOND_PROVIDERS {
            let c = &consumer;
            self.eventually(&format!("Connection {name} is Ready"), || async move {
                let conn: kbind_api::Connection = c.get_typed_opt(None, name).await.ok().flatten()?;
                kbind_api::conditions::is_true(&conn.status?.conditions, kbind_api::consts::condition::READY)
                    .then_some(())
            })
            .await;
        }
    }
}

/// The providers of [`FakeStage::two_providers`].
const SECOND_PROVIDERS: [&str; 2] = ["acme", "beta"];

impl TwoProviders for FakeStage {
    fn connections(&self) -> [&'static str; 2] {
        SECOND_PROVIDERS
    }

    fn provider_of(&self, connection: &str) -> Arc<dyn ClusterClient> {
        Arc::new(self.world.provider(connection).admin_client())
    }

    async fn restart_konnector(&mut self) {
        self.world.crash_konnector();
        self.world.start_konnector();
        self.connections_ready().await;
    }

    fn widget_writes(&self, connection: &str, ns: &str) -> Option<usize> {
        let log = self.world.provider(connection).write_log();
        Some(
            log.iter()
                .filter(|w| w.resource.starts_with("widgets.") && w.namespace == ns)
                .count(),
        )
    }
}

impl Stage for FakeStage {
    fn backend(&self) -> &'static str {
        "fakeapi"
    }

    fn connection(&self) -> &'static str {
        "acme"
    }

    fn cluster_binding(&self) -> &'static str {
        "acme"
    }

    fn consumer(&self) -> Arc<dyn ClusterClient> {
        Arc::new(self.world.consumer().admin_client())
    }

    fn provider(&self) -> Arc<dyn ClusterClient> {
        Arc::new(self.world.provider("acme").admin_client())
    }

    async fn eventually<T, F, Fut>(&mut self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        for _ in 0..=MAX_STEPS {
            if let Some(value) = check().await {
                return value;
            }
            self.world.step().await;
        }
        self.world.fail(&Violation {
            invariant: "progress",
            detail: format!("not true after {MAX_STEPS} steps: {what}"),
        })
    }

    async fn delete(&mut self, res: &ApiResource, namespace: Option<&str>, name: &str) {
        self.world.delete_on_consumer(res, namespace, name).await;
    }

    async fn export_api(&mut self, crd: Value) {
        self.world.install_provider_crd("acme", crd).await;
    }

    async fn allow_namespace_removal(&mut self) {
        // The fake stage's credential is the provider's admin token already.
    }

    async fn allow_related(&mut self, _group: &str, _resource: &str) {
        // The fake stage's konnector is an admin on both clusters; what refuse_related injected
        // (the only errors a stage injects on the consumer) goes.
        if std::mem::take(&mut self.refusing_related) {
            self.world.consumer().clear_errors();
        }
    }

    async fn refuse_related(&mut self, _group: &str, resource: &str) {
        for verb in ["list", "watch"] {
            self.world.consumer().inject_error(fakeapi::ErrorRule::new(
                Some(verb),
                Some(resource),
                fakeapi::InjectedError::Forbidden,
            ));
        }
        self.refusing_related = true;
    }

    async fn serve_ingresses(&mut self) {
        self.serve_kind(crate::apis::ingresses_crd()).await;
    }

    async fn serve_kind(&mut self, crd: Value) {
        let res = served_by(&crd);
        let crds = ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&());
        let body: kbind_cluster::DynamicObject = serde_json::from_value(crd).expect("a CRD");
        for client in [self.consumer(), self.provider()] {
            client
                .create(&crds, None, &body, &Default::default())
                .await
                .unwrap_or_else(|e| panic!("the CRD of {} is created: {e}", res.plural));
        }
        let (consumer, provider) = (self.consumer(), self.provider());
        let (c, p, r) = (&consumer, &provider, &res);
        let what = format!("{} are served on both clusters", res.plural);
        self.eventually(&what, || async move {
            let served = c.list(r, None, &Default::default()).await.is_ok()
                && p.list(r, None, &Default::default()).await.is_ok();
            served.then_some(())
        })
        .await;
    }

    async fn refuse_widget_watches(&mut self) {
        let provider = self.world.provider("acme");
        for verb in ["list", "watch"] {
            provider.inject_error(fakeapi::ErrorRule::new(
                Some(verb),
                Some("widgets"),
                fakeapi::InjectedError::Forbidden,
            ));
        }
        provider.drop_watches();
    }

    async fn allow_widget_watches(&mut self) {
        self.world.provider("acme").clear_errors();
    }

    async fn partition(&mut self) {
        self.world.partition("acme");
    }

    async fn heal(&mut self) {
        self.world.heal("acme");
    }

    async fn replace_provider(&mut self) {
        self.world.replace_provider("acme");
        // The same static tokens are valid on the fresh cluster; the API must be exported again
        // for the story to show that identity, not a missing API, stops the konnector.
        self.world
            .install_provider_crd("acme", crate::apis::widgets_crd())
            .await;
    }
}

/// The resource a CRD serves (its first version).
pub fn served_by(crd: &Value) -> ApiResource {
    let spec = &crd["spec"];
    let text = |v: &Value| {
        v.as_str()
            .unwrap_or_else(|| panic!("a CRD names its resource: {crd}"))
            .to_string()
    };
    let (group, version) = (text(&spec["group"]), text(&spec["versions"][0]["name"]));
    ApiResource {
        api_version: if group.is_empty() {
            version.clone()
        } else {
            format!("{group}/{version}")
        },
        group,
        version,
        kind: text(&spec["names"]["kind"]),
        plural: text(&spec["names"]["plural"]),
    }
}
