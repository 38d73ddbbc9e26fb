//! The dependency rule of DESIGN.md §6 over the workspace's crate graph (normal and build
//! dependencies; dev-dependencies are test scaffolding and may reach anything), and what a
//! production build may not carry (`cargo tree` of its features).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Workspace crate → the workspace crates it depends on directly.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// (crate, crates it must never reach, transitively).
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("kbind-engine", &["kbind-backend", "kbind-cli"]),
    ("konnector", &["kbind-backend", "kbind-cli"]),
    ("kbind-cli", &["kbind-engine", "fakeapi"]),
    ("kbind-backend", &["kbind-engine", "fakeapi", "kbind-cli"]),
    // The seam and the API types sit below everything.
    (
        "kbind-api",
        &[
            "kbind-engine",
            "kbind-cluster",
            "fakeapi",
            "kbind-backend",
            "kbind-cli",
            "konnector",
        ],
    ),
    (
        "kbind-cluster",
        &["kbind-engine", "fakeapi", "kbind-backend", "kbind-cli", "konnector"],
    ),
];

/// Crates above everything: they may depend on any crate, and no crate may depend on them.
const TOP: &[&str] = &["kbind-demo", "kbind-bench"];

/// A production build and the crates it must never carry.
pub struct ProductionBuild {
    /// The package built.
    pub package: &'static str,
    /// The cargo feature flags it is built with.
    pub flags: &'static [&'static str],
    /// Crates that must not be in its normal dependency tree.
    pub forbidden: &'static [&'static str],
}

/// The konnector's image and chart binary are built without the demo, so without the fake.
pub const PRODUCTION_BUILDS: &[ProductionBuild] = &[ProductionBuild {
    package: "konnector",
    flags: &["--no-default-features"],
    forbidden: &["fakeapi"],
}];

/// The forbidden crates named in `cargo tree --prefix none` output (`name vX.Y.Z (…)` lines),
/// each once, as `package (flags) carries crate`.
pub fn carried(build: &ProductionBuild, tree: &str) -> Vec<String> {
    let names: BTreeSet<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    build
        .forbidden
        .iter()
        .filter(|f| names.contains(**f))
        .map(|f| format!("{} ({}) carries {f}", build.package, build.flags.join(" ")))
        .collect()
}

/// The graph among workspace members, from `cargo metadata` output.
pub fn workspace_graph(metadata: &Value) -> Graph {
    let members: BTreeSet<String> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["source"].is_null())
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    let mut graph = Graph::new();
    for pkg in metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["source"].is_null())
    {
        let Some(name) = pkg["name"].as_str() else { continue };
        let deps = pkg["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str())
            .filter(|d| members.contains(*d))
            .map(str::to_string)
            .collect();
        graph.insert(name.to_string(), deps);
    }
    graph
}

/// Every crate reachable from `start` (excluding itself).
fn reachable(graph: &Graph, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = graph.get(start).into_iter().flatten().map(String::as_str).collect();
    while let Some(next) = todo.pop() {
        if seen.insert(next.to_string()) {
            todo.extend(graph.get(next).into_iter().flatten().map(String::as_str));
        }
    }
    seen
}

/// Each broken rule, as `a -> b`.
pub fn violations(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (krate, forbidden) in FORBIDDEN {
        if !graph.contains_key(*krate) {
            continue;
        }
        let reach = reachable(graph, krate);
        for f in forbidden.iter().filter(|f| reach.contains(**f)) {
            out.push(format!("{krate} depends on {f}"));
        }
    }
    for krate in graph.keys() {
        let reach = reachable(graph, krate);
        for top in TOP.iter().filter(|top| **top != krate && reach.contains(**top)) {
            out.push(format!("{krate} depends on {top}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> Graph {
        edges
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_clean_graph_has_no_violations() {
        let g = graph(&[
            ("kbind-api", &[]),
            ("kbind-cluster", &[]),
            ("kbind-engine", &["kbind-api", "kbind-cluster"]),
            ("konnector", &["kbind-engine"]),
            ("kbind-backend", &["kbind-api"]),
            ("kbind-cli", &["kbind-api"]),
        ]);
        assert!(violations(&g).is_empty());
    }

    #[test]
    fn a_transitive_path_from_cli_to_engine_is_caught() {
        let g = graph(&[
            ("kbind-cli", &["helper"]),
            ("helper", &["kbind-engine"]),
            ("kbind-engine", &[]),
        ]);
        assert_eq!(violations(&g), vec!["kbind-cli depends on kbind-engine".to_string()]);
    }

    #[test]
    fn backend_reaching_the_engine_is_caught() {
        let g = graph(&[("kbind-backend", &["kbind-engine"]), ("kbind-engine", &[])]);
        assert_eq!(
            violations(&g),
            vec!["kbind-backend depends on kbind-engine".to_string()]
        );
    }

    #[test]
    fn the_demo_may_depend_on_everything_and_nothing_on_it() {
        let clean = graph(&[
            (
                "kbind-demo",
                &["kbind-backend", "kbind-cli", "konnector", "fakeapi", "kbind-engine"],
            ),
            ("kbind-backend", &[]),
            ("kbind-cli", &[]),
            ("konnector", &["kbind-engine"]),
            ("kbind-engine", &[]),
            ("fakeapi", &[]),
        ]);
        assert!(violations(&clean).is_empty());
        let g = graph(&[
            ("kbind-demo", &[]),
            ("konnector", &["helper"]),
            ("helper", &["kbind-demo"]),
        ]);
        assert_eq!(
            violations(&g),
            vec![
                "helper depends on kbind-demo".to_string(),
                "konnector depends on kbind-demo".to_string(),
            ]
        );
    }

    #[test]
    fn a_production_build_carrying_the_fake_is_caught() {
        let build = &PRODUCTION_BUILDS[0];
        let clean = "konnector v0.1.0 (/w/konnector)\nkbind-engine v0.1.0 (/w/engine)\nfakeapi-like v1.0.0\n";
        assert!(carried(build, clean).is_empty());
        let dirty = format!("{clean}fakeapi v0.1.0 (/w/fakeapi)\nfakeapi v0.1.0 (/w/fakeapi)\n");
        assert_eq!(
            carried(build, &dirty),
            vec!["konnector (--no-default-features) carries fakeapi".to_string()]
        );
    }

    #[test]
    fn dev_dependencies_do_not_count() {
        let metadata = serde_json::json!({"packages": [
            {"name": "kbind-cli", "source": null, "dependencies": [{"name": "fakeapi", "kind": "dev"}]},
            {"name": "fakeapi", "source": null, "dependencies": []},
        ]});
        assert!(violations(&workspace_graph(&metadata)).is_empty());
    }
}
