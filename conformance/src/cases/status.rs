//! The status subresource: the main resource ignores status, /status ignores everything else.

use kbind_cluster::{Patch, PostParams};
use serde_json::{Value, json};

use crate::check;
use crate::support::{CaseResult, Scope, WidgetCrd, object};
use crate::target::Target;

/// With /status enabled: create and update ignore status, status writes ignore spec.
pub async fn status_subresource_is_separate(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "status");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let group = s.group();
        let widgets = s.widget_crd(&WidgetCrd::open(true)).await?;
        let body = object(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 1}, "status": {"phase": "Created"},
        }))?;
        let w = c.create(&widgets, Some(&ns), &body, &pp).await?;
        check!(
            w.data.get("status").is_none_or(Value::is_null),
            "create kept status: {:?}",
            w.data.get("status")
        );

        let mut st = w.clone();
        st.data["status"] = json!({"phase": "A"});
        let w = c.replace_status(&widgets, Some(&ns), "w", &st, &pp).await?;
        check!(w.data["status"]["phase"] == "A", "status write lost: {:?}", w.data);

        let mut main = w.clone();
        main.data["spec"]["size"] = json!(2);
        main.data["status"] = json!({"phase": "B"});
        let w = c.replace(&widgets, Some(&ns), "w", &main, &pp).await?;
        check!(w.data["spec"]["size"] == 2, "main update lost spec: {:?}", w.data);
        check!(
            w.data["status"]["phase"] == "A",
            "main update changed status: {:?}",
            w.data["status"]
        );

        let mut st = w.clone();
        st.data["spec"]["size"] = json!(3);
        st.data["status"] = json!({"phase": "C"});
        let w = c.replace_status(&widgets, Some(&ns), "w", &st, &pp).await?;
        check!(
            w.data["spec"]["size"] == 2,
            "status update changed spec: {:?}",
            w.data["spec"]
        );
        check!(
            w.data["status"]["phase"] == "C",
            "status update lost status: {:?}",
            w.data["status"]
        );

        let patch = Patch::Merge(json!({"spec": {"size": 4}, "status": {"phase": "D"}}));
        let w = c
            .patch_status(&widgets, Some(&ns), "w", &patch, &Default::default())
            .await?;
        check!(
            w.data["spec"]["size"] == 2 && w.data["status"]["phase"] == "D",
            "status patch: {:?}",
            w.data
        );
        let w = c.patch(&widgets, Some(&ns), "w", &patch, &Default::default()).await?;
        check!(
            w.data["spec"]["size"] == 4 && w.data["status"]["phase"] == "D",
            "main patch: {:?}",
            w.data
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}
