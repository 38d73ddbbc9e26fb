//! The dependency rule of contract §6 over the workspace's crate graph: normal and build
//! dependencies, optional ones included whatever features enable them (dev-dependencies are test
//! scaffolding and may reach anything).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Workspace crate → the workspace crates it depends on directly.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// A crate, the crates it must never reach (transitively), and why.
struct Rule {
    krate: &'static str,
    never: &'static [&'static str],
    why: &'static str,
}

const FORBIDDEN: &[Rule] = &[
    Rule {
        krate: "kbind-engine",
        never: &["kbind-backend", "kbind-cli"],
        why: "the engine knows nothing of the service layer",
    },
    Rule {
        krate: "konnector",
        never: &["kbind-backend", "kbind-cli"],
        why: "the konnector knows nothing of the service layer",
    },
    Rule {
        krate: "konnector",
        never: &["fakeapi"],
        why: "the konnector binary ships, so no test machinery is linked into it under any feature \
              (the demo lives in kbind-demo; tests reach fakeapi as a dev-dependency)",
    },
    Rule {
        krate: "kbind-cli",
        never: &["kbind-engine", "fakeapi"],
        why: "the CLI talks to clusters and the gateway, never through the engine or a fake",
    },
    Rule {
        krate: "kbind-backend",
        never: &["kbind-engine", "fakeapi", "kbind-cli"],
        why: "the backend ships and stands apart from the konnector and the CLI",
    },
    Rule {
        krate: "kbind-api",
        never: &[
            "kbind-engine",
            "kbind-cluster",
            "fakeapi",
            "kbind-backend",
            "kbind-cli",
            "konnector",
        ],
        why: "the API types sit below everything",
    },
    Rule {
        krate: "kbind-cluster",
        never: &["kbind-engine", "fakeapi", "kbind-backend", "kbind-cli", "konnector"],
        why: "the seam sits below everything but the API types",
    },
];

/// Crates above everything: they may depend on any crate, and no crate may depend on them.
const TOP: &[&str] = &["kbind-demo", "kbind-bench"];

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

/// Every crate reachable from `start` (excluding itself), each with one path to it
/// (`start -> … -> crate`), the shortest in crate name order.
fn reachable(graph: &Graph, start: &str) -> BTreeMap<String, Vec<String>> {
    let mut paths = BTreeMap::new();
    let mut todo = std::collections::VecDeque::from([vec![start.to_string()]]);
    while let Some(path) = todo.pop_front() {
        let last = path.last().map(String::as_str).unwrap_or(start);
        for next in graph.get(last).into_iter().flatten() {
            if next != start && !paths.contains_key(next) {
                let mut longer = path.clone();
                longer.push(next.clone());
                paths.insert(next.clone(), longer.clone());
                todo.push_back(longer);
            }
        }
    }
    paths
}

/// Each broken rule, as `a depends on b (a -> … -> b): why`.
pub fn violations(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for rule in FORBIDDEN {
        if !graph.contains_key(rule.krate) {
            continue;
        }
        let reach = reachable(graph, rule.krate);
        for (f, path) in rule.never.iter().filter_map(|f| reach.get(*f).map(|p| (f, p))) {
            out.push(format!(
                "{} depends on {f} ({}): {}",
                rule.krate,
                path.join(" -> "),
                rule.why
            ));
        }
    }
    for krate in graph.keys() {
        let reach = reachable(graph, krate);
        for (top, path) in TOP.iter().filter_map(|top| reach.get(*top).map(|p| (top, p))) {
            out.push(format!(
                "{krate} depends on {top} ({}): {top} sits above everything, nothing may depend on it",
                path.join(" -> ")
            ));
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

    /// The violations with their reasons cut off, for comparisons.
    fn broken(graph: &Graph) -> Vec<String> {
        violations(graph)
            .into_iter()
            .map(|v| v.split_once(": ").map_or(v.clone(), |(head, _)| head.to_string()))
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
            ("fakeapi", &["kbind-cluster"]),
        ]);
        assert!(violations(&g).is_empty(), "{:?}", violations(&g));
    }

    #[test]
    fn a_transitive_path_from_cli_to_engine_is_caught_with_its_path() {
        let g = graph(&[
            ("kbind-cli", &["helper"]),
            ("helper", &["kbind-engine"]),
            ("kbind-engine", &[]),
        ]);
        assert_eq!(
            broken(&g),
            vec!["kbind-cli depends on kbind-engine (kbind-cli -> helper -> kbind-engine)".to_string()]
        );
    }

    #[test]
    fn backend_reaching_the_engine_is_caught() {
        let g = graph(&[("kbind-backend", &["kbind-engine"]), ("kbind-engine", &[])]);
        assert_eq!(
            broken(&g),
            vec!["kbind-backend depends on kbind-engine (kbind-backend -> kbind-engine)".to_string()]
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
            broken(&g),
            vec![
                "helper depends on kbind-demo (helper -> kbind-demo)".to_string(),
                "konnector depends on kbind-demo (konnector -> helper -> kbind-demo)".to_string(),
            ]
        );
    }

    /// `cargo metadata` lists a crate's optional dependencies whatever features are on, so a
    /// feature that would link the fake is refused before anyone builds with it.
    #[test]
    fn the_konnector_linking_fakeapi_is_caught_under_any_feature() {
        let metadata = serde_json::json!({"packages": [
            {"name": "konnector", "source": null, "dependencies": [
                {"name": "kbind-engine", "kind": null},
                {"name": "fakeapi", "kind": null, "optional": true},
            ]},
            {"name": "kbind-engine", "source": null, "dependencies": []},
            {"name": "fakeapi", "source": null, "dependencies": []},
        ]});
        let found = violations(&workspace_graph(&metadata));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("konnector depends on fakeapi (konnector -> fakeapi): the konnector binary ships"),
            "{}",
            found[0]
        );
        assert!(
            found[0].contains("kbind-demo"),
            "the message says where the demo lives: {}",
            found[0]
        );
    }

    #[test]
    fn the_konnector_reaching_fakeapi_through_another_crate_is_caught() {
        let via_engine = graph(&[
            ("konnector", &["kbind-engine"]),
            ("kbind-engine", &["fakeapi"]),
            ("fakeapi", &[]),
        ]);
        assert_eq!(
            broken(&via_engine),
            vec!["konnector depends on fakeapi (konnector -> kbind-engine -> fakeapi)".to_string()]
        );
        let metadata = serde_json::json!({"packages": [
            {"name": "konnector", "source": null, "dependencies": [{"name": "fakeapi", "kind": "build"}]},
            {"name": "fakeapi", "source": null, "dependencies": []},
        ]});
        assert_eq!(
            broken(&workspace_graph(&metadata)),
            vec!["konnector depends on fakeapi (konnector -> fakeapi)".to_string()]
        );
    }

    #[test]
    fn dev_dependencies_do_not_count() {
        let metadata = serde_json::json!({"packages": [
            {"name": "kbind-cli", "source": null, "dependencies": [{"name": "fakeapi", "kind": "dev"}]},
            {"name": "konnector", "source": null, "dependencies": [{"name": "fakeapi", "kind": "dev"}]},
            {"name": "fakeapi", "source": null, "dependencies": []},
        ]});
        assert!(violations(&workspace_graph(&metadata)).is_empty());
    }
}
