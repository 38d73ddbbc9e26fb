//! What the monitoring test checks, apart from the world it runs: the charts' rule files and
//! dashboards read and their PromQL parsed (by `promql-parser`, Prometheus's grammar), the metric
//! names and labels each expression needs worked out from its syntax tree, an OpenMetrics
//! exposition read into the sample names and labels it offers, and the one compared with the other.
//!
//! Sample names are what PromQL selects: a counter family `x` is sampled as `x_total`, a
//! histogram `x` as `x_bucket` (with `le`), `x_sum` and `x_count`, a gauge as `x`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use promql_parser::label::Matcher;
use promql_parser::parser::{self, Expr, LabelModifier, VectorMatchCardinality, value::ValueType};
use serde_json::Value;

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What a PromQL expression needs: for each sample name, the labels it names.
pub type Needs = BTreeMap<String, BTreeSet<String>>;

/// One expression of a chart's monitoring: an alert's or a dashboard panel's.
#[derive(Debug, Clone)]
pub struct Query {
    /// Where it is, for messages: `rule KbindX` or `dashboard panel "Y" (A)`.
    pub place: String,
    /// The PromQL as Prometheus would get it (Grafana's interval variables filled in).
    pub expr: String,
    /// The labels its result must carry: `$labels.x` of an alert's labels and annotations, `{{x}}`
    /// of a panel's legend.
    pub uses: BTreeSet<String>,
}

/// An alerting rule as the rule file has it.
#[derive(Debug, Clone)]
pub struct Alert {
    /// `alert`.
    pub name: String,
    /// The whole rule.
    pub rule: Value,
}

/// A chart's rule file, parsed.
pub struct Rules {
    /// The file as a value (the PrometheusRule's `spec`).
    pub spec: Value,
    /// Its alerts.
    pub alerts: Vec<Alert>,
}

/// The rule file of `chart` (`deploy/charts/<chart>/monitoring/rules.yaml`).
pub fn rules(chart: &str) -> Rules {
    let path = repo_root().join(format!("deploy/charts/{chart}/monitoring/rules.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let spec: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    let mut alerts = Vec::new();
    for group in spec["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no groups", path.display()))
    {
        for rule in group["rules"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: a group without rules", path.display()))
        {
            let name = rule["alert"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: a rule that is no alert: {rule}", path.display()));
            alerts.push(Alert {
                name: name.to_string(),
                rule: rule.clone(),
            });
        }
    }
    Rules { spec, alerts }
}

/// The dashboard of `chart` (`deploy/charts/<chart>/monitoring/dashboard.json`).
pub fn dashboard(chart: &str) -> Value {
    let path = repo_root().join(format!("deploy/charts/{chart}/monitoring/dashboard.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every expression of the rules and the dashboard of `chart`.
pub fn queries(chart: &str) -> Vec<Query> {
    let mut out = Vec::new();
    for alert in rules(chart).alerts {
        let mut uses = BTreeSet::new();
        for part in ["labels", "annotations"] {
            if let Some(map) = alert.rule[part].as_object() {
                for text in map.values().filter_map(Value::as_str) {
                    uses.extend(template_labels(text));
                }
            }
        }
        out.push(Query {
            place: format!("rule {}", alert.name),
            expr: alert.rule["expr"].as_str().unwrap_or_default().to_string(),
            uses,
        });
    }
    for panel in panels(&dashboard(chart)) {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            out.push(Query {
                place: format!(
                    "dashboard panel {title:?} ({})",
                    target["refId"].as_str().unwrap_or("?")
                ),
                expr: grafana_expr(expr),
                uses: legend_labels(target["legendFormat"].as_str().unwrap_or_default()),
            });
        }
    }
    out
}

/// A dashboard's panels, those inside rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(panel);
        out.extend(panel["panels"].as_array().into_iter().flatten());
    }
    out
}

/// The expression with Grafana's interval variables as Prometheus would get them; any other
/// variable is left, so it fails to parse and says so.
pub fn grafana_expr(expr: &str) -> String {
    let mut out = expr.to_string();
    for var in ["__rate_interval", "__interval", "__range"] {
        out = out
            .replace(&format!("${{{var}}}"), "5m")
            .replace(&format!("${var}"), "5m");
    }
    out
}

/// The `x` of every `$labels.x` in an alert template.
pub fn template_labels(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("$labels.") {
        rest = &rest[at + "$labels.".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.insert(name);
    }
    out
}

/// The `x` of every `{{x}}` in a Grafana legend.
pub fn legend_labels(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find("}}") else { break };
        out.insert(rest[..end].trim().to_string());
        rest = &rest[end + 2..];
    }
    out
}

/// What a parsed expression needs and what its result carries.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Sample names and the labels named on each (matchers, grouping, matching).
    pub needs: Needs,
    /// Mistakes found in the expression itself (labels that cannot match).
    pub errors: Vec<String>,
}

/// Where sample names' labels come from while an expression is analysed.
pub trait Labels {
    /// The labels the series of `sample` carry; `None` when it is not known.
    fn labels_of(&self, sample: &str) -> Option<BTreeSet<String>>;
}

/// The labels series may carry; `None` when they are not known (nothing scraped), which no
/// check fails on.
type Set = Option<BTreeSet<String>>;

/// Parses `query` and works out what it needs, with `source` telling which labels each sample
/// name carries; the labels its result carries are checked against `query.uses`.
pub fn analyse(query: &Query, source: &dyn Labels) -> Result<Analysis, String> {
    let expr =
        parser::parse(&query.expr).map_err(|e| format!("{}: {:?} does not parse: {e}", query.place, query.expr))?;
    let mut walk = Walk {
        source,
        analysis: Analysis::default(),
        place: &query.place,
    };
    let result = walk.labels(&expr);
    if matches!(expr.value_type(), ValueType::Matrix | ValueType::String) {
        walk.error(format!(
            "the expression is a {}, not a vector or scalar",
            expr.value_type()
        ));
    }
    if let Some(result) = result {
        for used in &query.uses {
            if !result.contains(used) {
                walk.error(format!(
                    "uses the label {used:?}, which its result does not carry (it carries {result:?})"
                ));
            }
        }
    }
    Ok(walk.analysis)
}

struct Walk<'a> {
    source: &'a dyn Labels,
    analysis: Analysis,
    place: &'a str,
}

fn set(labels: &[String]) -> BTreeSet<String> {
    labels.iter().cloned().collect()
}

impl Walk<'_> {
    fn error(&mut self, message: String) {
        self.analysis.errors.push(format!("{}: {message}", self.place));
    }

    /// The labels the series of `expr` may carry (empty for a scalar).
    fn labels(&mut self, expr: &Expr) -> Set {
        match expr {
            Expr::VectorSelector(vs) => self.selector(vs),
            Expr::MatrixSelector(ms) => self.selector(&ms.vs),
            Expr::Paren(p) => self.labels(&p.expr),
            Expr::Unary(u) => self.labels(&u.expr),
            Expr::Subquery(s) => self.labels(&s.expr),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Some(BTreeSet::new()),
            Expr::Aggregate(a) => {
                let inner = self.labels(&a.expr);
                if let Some(param) = &a.param {
                    self.labels(param);
                }
                let op = a.op.to_string();
                let keeps_series = matches!(op.as_str(), "topk" | "bottomk" | "limitk" | "limit_ratio");
                let mut out = match &a.modifier {
                    Some(LabelModifier::Include(by)) => {
                        self.named("by", &by.labels, &inner);
                        if keeps_series {
                            inner.clone()
                        } else {
                            Some(set(&by.labels))
                        }
                    }
                    Some(LabelModifier::Exclude(without)) => {
                        self.named("without", &without.labels, &inner);
                        inner.map(|i| i.into_iter().filter(|l| !without.labels.contains(l)).collect())
                    }
                    None if keeps_series => inner,
                    None => Some(BTreeSet::new()),
                };
                if op == "count_values"
                    && let (Some(Expr::StringLiteral(label)), Some(out)) = (a.param.as_deref(), out.as_mut())
                {
                    out.insert(label.val.clone());
                }
                out
            }
            Expr::Call(call) => {
                let args: Vec<Set> = call.args.args.iter().map(|a| self.labels(a)).collect();
                let string_arg = |i: usize| match call.args.args.get(i).map(|a| a.as_ref()) {
                    Some(Expr::StringLiteral(s)) => Some(s.val.clone()),
                    _ => None,
                };
                match call.func.name {
                    "histogram_quantile" => {
                        let mut series = args.get(1).cloned().flatten();
                        if let Some(series) = series.as_mut()
                            && !series.remove("le")
                        {
                            self.error(
                                "histogram_quantile over series without the label \"le\" (not a _bucket sample, or le aggregated away)".into(),
                            );
                        }
                        series
                    }
                    "label_replace" | "label_join" => {
                        let mut series = args.first().cloned().flatten();
                        let sources: Vec<String> = if call.func.name == "label_replace" {
                            string_arg(3).filter(|s| !s.is_empty()).into_iter().collect()
                        } else {
                            (3..call.args.args.len()).filter_map(string_arg).collect()
                        };
                        self.named(call.func.name, &sources, &series);
                        if let Some(series) = series.as_mut() {
                            series.extend(string_arg(1));
                        }
                        series
                    }
                    "time" | "vector" | "scalar" | "absent" | "absent_over_time" | "pi" => Some(BTreeSet::new()),
                    _ => call
                        .args
                        .args
                        .iter()
                        .zip(args)
                        .find(|(a, _)| matches!(a.value_type(), ValueType::Vector | ValueType::Matrix))
                        .map(|(_, labels)| labels)
                        .unwrap_or(Some(BTreeSet::new())),
                }
            }
            Expr::Binary(b) => {
                let lhs = self.labels(&b.lhs);
                let rhs = self.labels(&b.rhs);
                let vectors = b.lhs.value_type() == ValueType::Vector && b.rhs.value_type() == ValueType::Vector;
                if !vectors {
                    return if b.lhs.value_type() == ValueType::Vector {
                        lhs
                    } else {
                        rhs
                    };
                }
                let op = b.op.to_string();
                let modifier = b.modifier.as_ref();
                match modifier.and_then(|m| m.matching.as_ref()) {
                    Some(LabelModifier::Include(on)) => {
                        self.named(&format!("on (left of {op})"), &on.labels, &lhs);
                        self.named(&format!("on (right of {op})"), &on.labels, &rhs);
                    }
                    Some(LabelModifier::Exclude(ignoring)) => {
                        let both = lhs
                            .as_ref()
                            .zip(rhs.as_ref())
                            .map(|(l, r)| l.union(r).cloned().collect());
                        self.named(&format!("ignoring ({op})"), &ignoring.labels, &both);
                    }
                    None => {
                        if let (Some(l), Some(r)) = (&lhs, &rhs)
                            && op != "or"
                            && l != r
                        {
                            self.error(format!(
                                "the two sides of {op:?} carry different labels ({l:?} and {r:?}), so no series would match: group them alike or add on(...)"
                            ));
                        }
                    }
                }
                let union = |a: &Set, b: &BTreeSet<String>| a.as_ref().map(|a| a.union(b).cloned().collect());
                match modifier.map(|m| &m.card) {
                    Some(VectorMatchCardinality::ManyToOne(extra)) => {
                        self.named("group_left", &extra.labels, &rhs);
                        union(&lhs, &set(&extra.labels))
                    }
                    Some(VectorMatchCardinality::OneToMany(extra)) => {
                        self.named("group_right", &extra.labels, &lhs);
                        union(&rhs, &set(&extra.labels))
                    }
                    _ if op == "or" => lhs.zip(rhs).map(|(l, r)| l.union(&r).cloned().collect()),
                    _ => lhs,
                }
            }
            Expr::Extension(_) => {
                self.error("an extension expression".into());
                None
            }
        }
    }

    /// Checks that every label `what` names is among `available` (when known).
    fn named(&mut self, what: &str, labels: &[String], available: &Set) {
        let Some(available) = available else { return };
        for label in labels {
            if !available.contains(label) {
                self.error(format!(
                    "{what} names the label {label:?}, which those series do not carry (they carry {available:?})"
                ));
            }
        }
    }

    fn selector(&mut self, vs: &promql_parser::parser::VectorSelector) -> Set {
        let name = vs.name.clone().or_else(|| {
            vs.matchers
                .matchers
                .iter()
                .find(|m| m.name == "__name__")
                .map(|m| m.value.clone())
        });
        let Some(name) = name else {
            self.error(format!("a selector without a metric name: {vs}"));
            return None;
        };
        let matchers: Vec<&Matcher> = vs
            .matchers
            .matchers
            .iter()
            .chain(vs.matchers.or_matchers.iter().flatten())
            .filter(|m| m.name != "__name__")
            .collect();
        let needs = self.analysis.needs.entry(name.clone()).or_default();
        needs.extend(matchers.iter().map(|m| m.name.clone()));
        let labels = self.source.labels_of(&name)?;
        for m in matchers {
            if !labels.contains(&m.name) {
                self.error(format!(
                    "{name} has no label {:?} (its series carry {labels:?})",
                    m.name
                ));
            }
        }
        Some(labels)
    }
}

/// One metric family of an exposition.
#[derive(Debug, Default, Clone)]
pub struct Family {
    /// `counter`, `gauge`, `histogram`, … (`unknown` without a `# TYPE`).
    pub kind: String,
    /// Per sample name: the label names its series carry.
    pub samples: BTreeMap<String, BTreeSet<String>>,
}

impl Family {
    /// The sample names PromQL selects for a family `name` of this kind.
    fn sample_names(&self, name: &str) -> Vec<String> {
        match self.kind.as_str() {
            "counter" => vec![format!("{name}_total")],
            "histogram" | "gaugehistogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{name}{s}"))
                .collect(),
            "summary" => vec![name.to_string(), format!("{name}_sum"), format!("{name}_count")],
            _ => vec![name.to_string()],
        }
    }
}

/// An OpenMetrics (or Prometheus text) exposition, as names and labels.
#[derive(Debug, Default, Clone)]
pub struct Exposition {
    /// By family name.
    pub families: BTreeMap<String, Family>,
}

impl Exposition {
    /// Reads `text`; lines it cannot read are errors.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Exposition::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(comment) = line.strip_prefix('#') {
                let mut words = comment.split_whitespace();
                if words.next() == Some("TYPE") {
                    let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                        return Err(format!("a TYPE line without name and type: {line:?}"));
                    };
                    out.families.entry(name.to_string()).or_default().kind = kind.to_string();
                }
                continue;
            }
            let (sample, labels) = parse_sample(line)?;
            let family = out.family_of(&sample);
            out.families
                .entry(family)
                .or_insert_with(|| Family {
                    kind: "unknown".into(),
                    ..Family::default()
                })
                .samples
                .entry(sample)
                .or_default()
                .extend(labels);
        }
        Ok(out)
    }

    /// The family a sample name belongs to: the declared one it is a sample of, else its own.
    fn family_of(&self, sample: &str) -> String {
        for (name, family) in &self.families {
            let suffixes: &[&str] = match family.kind.as_str() {
                "counter" => &["_total", "_created"],
                "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count", "_created", "_gcount", "_gsum"],
                "summary" => &["", "_sum", "_count", "_created"],
                _ => &[""],
            };
            if suffixes.iter().any(|s| format!("{name}{s}") == sample) {
                return name.clone();
            }
        }
        sample.to_string()
    }

    /// Adds the families and series of `other`.
    pub fn merge(&mut self, other: &Exposition) {
        for (name, family) in &other.families {
            let mine = self.families.entry(name.clone()).or_default();
            if mine.kind.is_empty() || mine.kind == "unknown" {
                mine.kind = family.kind.clone();
            }
            for (sample, labels) in &family.samples {
                mine.samples
                    .entry(sample.clone())
                    .or_default()
                    .extend(labels.iter().cloned());
            }
        }
    }

    /// Every sample name PromQL can select, with the labels seen on its series (`None`: the
    /// family is declared but has no series, so its labels are unknown).
    pub fn selectable(&self) -> BTreeMap<String, Option<BTreeSet<String>>> {
        let mut out = BTreeMap::new();
        for (name, family) in &self.families {
            for sample in family.sample_names(name) {
                let labels = family.samples.get(&sample).cloned();
                out.insert(sample, labels);
            }
        }
        out
    }

    /// The sample names that start like `name`, for a "did you mean".
    pub fn near(&self, name: &str) -> Vec<String> {
        let stem: String = name.chars().take(name.len().saturating_sub(4).max(6)).collect();
        self.selectable()
            .into_keys()
            .filter(|s| s.starts_with(&stem) || name.starts_with(s.as_str()))
            .collect()
    }
}

impl Labels for Exposition {
    fn labels_of(&self, sample: &str) -> Option<BTreeSet<String>> {
        self.selectable().get(sample).cloned().flatten()
    }
}

/// Labels known up front (for the static checks, where nothing has been scraped).
pub struct Unknown;

impl Labels for Unknown {
    fn labels_of(&self, _: &str) -> Option<BTreeSet<String>> {
        None
    }
}

/// One sample line's name and label names.
fn parse_sample(line: &str) -> Result<(String, BTreeSet<String>), String> {
    let end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or_else(|| format!("a sample line without a value: {line:?}"))?;
    let name = line[..end].to_string();
    let mut labels = BTreeSet::new();
    if line[end..].starts_with('{') {
        let mut chars = line[end + 1..].chars().peekable();
        loop {
            let label: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != '}')).collect();
            match chars.next() {
                Some('}') if label.trim().is_empty() => break,
                Some('=') => {}
                _ => return Err(format!("a label without a value in {line:?}")),
            }
            if chars.next() != Some('"') {
                return Err(format!("an unquoted label value in {line:?}"));
            }
            loop {
                match chars.next() {
                    Some('\\') => {
                        chars.next();
                    }
                    Some('"') => break,
                    Some(_) => {}
                    None => return Err(format!("an unterminated label value in {line:?}")),
                }
            }
            labels.insert(label.trim().to_string());
            match chars.next() {
                Some(',') => continue,
                Some('}') => break,
                _ => return Err(format!("a label set that does not close in {line:?}")),
            }
        }
    }
    Ok((name, labels))
}

/// Compares what `queries` need with what `exposition` offers: every sample name selectable,
/// carrying every label named on it, and every query consistent. `assumed` are names another
/// change will export, with their labels: used when the exposition lacks them, reported when
/// it has them.
pub fn check(
    binary: &str,
    queries: &[Query],
    exposition: &Exposition,
    assumed: &[(&str, &[&str])],
) -> (Vec<String>, Vec<String>) {
    struct WithAssumed<'a> {
        exposition: &'a Exposition,
        assumed: &'a [(&'a str, &'a [&'a str])],
    }
    impl Labels for WithAssumed<'_> {
        fn labels_of(&self, sample: &str) -> Option<BTreeSet<String>> {
            self.exposition.labels_of(sample).or_else(|| {
                self.assumed
                    .iter()
                    .find(|(n, _)| *n == sample)
                    .map(|(_, labels)| labels.iter().map(|l| l.to_string()).collect())
            })
        }
    }
    let source = WithAssumed { exposition, assumed };
    let selectable = exposition.selectable();
    let mut errors = Vec::new();
    let mut assumed_used = BTreeSet::new();
    for query in queries {
        let analysis = match analyse(query, &source) {
            Ok(a) => a,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        errors.extend(analysis.errors);
        for (sample, labels) in analysis.needs {
            match selectable.get(&sample) {
                Some(Some(_)) => {}
                Some(None) => errors.push(format!(
                    "{}: {binary} declares {sample} but exported no series of it, so its labels {labels:?} could not be checked: the world must produce one",
                    query.place
                )),
                None if assumed.iter().any(|(n, _)| *n == sample) => {
                    assumed_used.insert(sample);
                }
                None => errors.push(format!(
                    "{}: {sample} is not exported by {binary}{}",
                    query.place,
                    match exposition.near(&sample) {
                        near if near.is_empty() => String::new(),
                        near => format!(" (it exports {})", near.join(", ")),
                    }
                )),
            }
        }
    }
    (errors, assumed_used.into_iter().collect())
}

/// The anchors of the level-2 headings of a Markdown file, as GitHub makes them, with each
/// section's text.
pub fn sections(markdown: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in markdown.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            if let Some((anchor, text)) = current.take() {
                out.insert(anchor, text);
            }
            let anchor: String = title
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect();
            current = Some((anchor, String::new()));
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    if let Some((anchor, text)) = current {
        out.insert(anchor, text);
    }
    out
}
