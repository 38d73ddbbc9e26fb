//! `kbind-bench report`: the tables of every run in a folder as one markdown fragment, the
//! targets met or not, and PNG plots drawn with plotters.

use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use plotters::prelude::*;

use crate::output::{Envelope, Table, fmt};
use crate::{ceiling, churn, initial_sync, recovery, related, scale_out};

/// Where plotters' text comes from: a TrueType file read at run time (`KBIND_BENCH_FONT`, else
/// Debian's fonts-dejavu-core), so no fontconfig or freetype library is needed.
const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The runs of `workload` among `runs`.
fn of<'a>(runs: &'a [Envelope], workload: &str) -> Vec<&'a Envelope> {
    runs.iter().filter(|r| r.workload == workload).collect()
}

/// Every workload's table (those with runs), in workload order.
pub fn tables(runs: &[Envelope]) -> Vec<Table> {
    let ceilings = of(runs, ceiling::NAME);
    let mut tables = Vec::new();
    let mut push = |t: Table| {
        if !t.rows.is_empty() {
            tables.push(t);
        }
    };
    push(initial_sync::table(&of(runs, initial_sync::NAME), &ceilings));
    push(churn::table(&of(runs, churn::NAME)));
    push(scale_out::table(&of(runs, scale_out::NAME)));
    push(recovery::table(&of(runs, recovery::NAME)));
    push(ceiling::table(&ceilings));
    push(related::table(&of(runs, related::NAME)));
    push(targets(runs));
    tables
}

/// The targets against the runs: met or not, and by how much.
pub fn targets(runs: &[Envelope]) -> Table {
    let mut table = Table::new("Targets", &["target", "run", "figure", "met"]);
    let ceilings = of(runs, ceiling::NAME);
    for run in of(runs, initial_sync::NAME) {
        let ratio = run
            .num("/objects_per_second")
            .zip(initial_sync::ceiling_for(&ceilings, run))
            .map(|(r, c)| r / c);
        table.row(vec![
            "initial sync ≥ 0.8 × ceiling".into(),
            format!("{} {} objects", run.backend(), fmt(run.num("/objects"), 0)),
            format!("{} × ceiling", fmt(ratio, 2)),
            verdict(ratio.map(|r| r >= 0.8)),
        ]);
    }
    for run in of(runs, churn::NAME)
        .into_iter()
        .filter(|r| r.param("/rate") == Some(500.0))
    {
        for direction in ["spec_up", "status_down"] {
            let added = run.num(&format!("/added_p99_ms/{direction}"));
            table.row(vec![
                "added p99 ≤ 20 ms at 500/s".into(),
                format!("{} {}", run.backend(), direction.replace('_', " ")),
                format!("{} ms", fmt(added, 1)),
                verdict(added.map(|a| a <= 20.0)),
            ]);
        }
    }
    let memory_runs = of(runs, initial_sync::NAME)
        .into_iter()
        .map(|r| (r, "/rss_kib"))
        .chain(of(runs, scale_out::NAME).into_iter().map(|r| (r, "/rss_kib/idle")));
    for (run, rss_pointer) in memory_runs {
        let json_kib = run
            .num("/json_bytes/provider")
            .zip(run.num("/json_bytes/consumer"))
            .map(|(p, c)| (p + c) / 1024.0);
        let target = json_kib.map(scale_out::rss_target_mib_of_kib);
        let rss = run.num(rss_pointer).map(|k| k / 1024.0);
        table.row(vec![
            "RSS ≤ 30 MiB + 3 × JSON of the cached copies".into(),
            format!(
                "{} {} ({} objects)",
                run.backend(),
                run.workload,
                fmt(run.num("/objects").or(run.num("/objects_total")), 0)
            ),
            format!("{} of {} MiB", fmt(rss, 1), fmt(target, 1)),
            verdict(rss.zip(target).map(|(r, t)| r <= t)),
        ]);
    }
    let scale = of(runs, scale_out::NAME);
    if scale.len() >= 2 {
        let series = |pointer: &str| -> Vec<(f64, f64)> {
            scale
                .iter()
                .filter_map(|r| r.num("/connections").zip(r.num(pointer)))
                .collect()
        };
        // Each metric with its noise floor: below it two runs cannot be told apart (the idle CPU
        // is a few /proc ticks; a request or two a minute is the heartbeat's jitter).
        for (what, pointer, floor) in [
            ("idle CPU % flat in N", "/idle_cpu_percent", 0.05),
            (
                "idle provider req/min flat in N",
                "/idle_requests/provider/konnector_per_minute",
                2.0,
            ),
            (
                "idle consumer req/min flat in N",
                "/idle_requests/consumer/konnector_per_minute",
                2.0,
            ),
        ] {
            let points = series(pointer);
            let (low, high) = (
                points.iter().min_by(|a, b| a.0.total_cmp(&b.0)),
                points.iter().max_by(|a, b| a.0.total_cmp(&b.0)),
            );
            if let (Some(low), Some(high)) = (low, high) {
                table.row(vec![
                    what.into(),
                    format!("{} → {} Connections", low.0, high.0),
                    format!("{:.2} → {:.2}", low.1, high.1),
                    // "Flat": the largest N costs at most twice the smallest, with slack for noise.
                    verdict(Some(high.1 <= 2.0 * low.1.max(floor))),
                ]);
            }
        }
    }
    table
}

fn verdict(met: Option<bool>) -> String {
    match met {
        Some(true) => "met".into(),
        Some(false) => "not met".into(),
        None => "–".into(),
    }
}

/// Writes `tables.md` and the plots into `out`.
pub fn render(input: &Path, out: &Path) -> anyhow::Result<()> {
    let runs = Envelope::read_dir(input)?;
    if runs.is_empty() {
        bail!("no runs (*.json) in {}", input.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut markdown = String::from("<!-- generated by `kbind-bench report`; do not edit -->\n\n");
    for table in tables(&runs) {
        markdown += &table.markdown();
        markdown += "\n";
    }
    std::fs::write(out.join("tables.md"), markdown).context("writing tables.md")?;
    register_font()?;
    plot_churn(&of(&runs, churn::NAME), &out.join("churn-latency.png"))?;
    plot_memory(&runs, &out.join("rss.png"))?;
    plot_recovery(&of(&runs, recovery::NAME), &out.join("recovery.png"))?;
    Ok(())
}

fn register_font() -> anyhow::Result<()> {
    let path = std::env::var("KBIND_BENCH_FONT").unwrap_or_else(|_| DEFAULT_FONT.into());
    let bytes = std::fs::read(&path).with_context(|| {
        format!("reading the plots' font {path} (apt-get install fonts-dejavu-core, or set KBIND_BENCH_FONT)")
    })?;
    // plotters keeps registered fonts for the process's life.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path} is not a usable font"))
}

type Series = (String, Vec<(f64, f64)>);

/// A line chart with points, its legend at `legend`.
fn chart(
    path: &Path,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    legend: SeriesLabelPosition,
) -> anyhow::Result<()> {
    let points: Vec<(f64, f64)> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    if points.is_empty() {
        root.titled(&format!("{title}: no runs"), ("sans-serif", 22))
            .map_err(|e| anyhow!("{e}"))?;
        root.present().map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
        return Ok(());
    }
    let x_max = points.iter().map(|p| p.0).fold(0.0, f64::max) * 1.1 + 1e-9;
    let y_max = points.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1e-9;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut sorted = points.clone();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(sorted.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow!("{e}"))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(sorted.iter().map(|p| Circle::new(*p, 4, color.filled())))
            .map_err(|e| anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(legend)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("writing {}: {e}", path.display()))
}

fn series_of(runs: &[&Envelope], name: String, x: &str, y: &str, x_is_param: bool) -> Series {
    let points = runs
        .iter()
        .filter_map(|r| {
            let xv = if x_is_param { r.param(x) } else { r.num(x) };
            xv.zip(r.num(y))
        })
        .collect();
    (name, points)
}

fn plot_churn(runs: &[&Envelope], path: &Path) -> anyhow::Result<()> {
    let mut series: Vec<Series> = Vec::new();
    for backend in ["real", "fake"] {
        let runs: Vec<&Envelope> = runs.iter().copied().filter(|r| r.backend() == backend).collect();
        if runs.is_empty() {
            continue;
        }
        for (direction, pointer) in [("spec up", "spec_up"), ("status down", "status_down")] {
            for q in ["p50", "p99"] {
                series.push(series_of(
                    &runs,
                    format!("{backend} {direction} {q}"),
                    "/rate",
                    &format!("/{pointer}/{q}_ms"),
                    true,
                ));
            }
        }
    }
    // Milliseconds on fakeapi and tens of seconds on saturated real servers: only a log scale
    // shows both.
    for (_, points) in &mut series {
        for p in points.iter_mut() {
            p.1 = p.1.max(1.0).log10();
        }
    }
    chart(
        path,
        "Churn: end-to-end latency against requested rate",
        (
            "changes/s per side",
            "log10 of latency in ms (1 = 10 ms, 3 = 1 s, 4 = 10 s)",
        ),
        &series,
        SeriesLabelPosition::MiddleRight,
    )
}

fn plot_memory(runs: &[Envelope], path: &Path) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for backend in ["real", "fake"] {
        let sync: Vec<&Envelope> = of(runs, initial_sync::NAME)
            .into_iter()
            .filter(|r| r.backend() == backend)
            .collect();
        let scale: Vec<&Envelope> = of(runs, scale_out::NAME)
            .into_iter()
            .filter(|r| r.backend() == backend)
            .collect();
        let mut points = series_of(&sync, String::new(), "/objects", "/rss_kib", false).1;
        points.extend(series_of(&scale, String::new(), "/objects_total", "/rss_kib/idle", false).1);
        if !points.is_empty() {
            let points = points.into_iter().map(|(x, y)| (x, y / 1024.0)).collect();
            series.push((format!("{backend}: konnector RSS"), points));
        }
        let mut targets = Vec::new();
        for (run, objects) in sync
            .iter()
            .map(|r| (r, "/objects"))
            .chain(scale.iter().map(|r| (r, "/objects_total")))
        {
            let json_kib = run
                .num("/json_bytes/provider")
                .zip(run.num("/json_bytes/consumer"))
                .map(|(p, c)| (p + c) / 1024.0);
            if let Some(point) = run.num(objects).zip(json_kib.map(scale_out::rss_target_mib_of_kib)) {
                targets.push(point);
            }
        }
        if !targets.is_empty() {
            series.push((format!("{backend}: target 30 MiB + 3 × JSON"), targets));
        }
    }
    chart(
        path,
        "Konnector memory against synced objects",
        ("objects", "MiB"),
        &series,
        SeriesLabelPosition::UpperLeft,
    )
}

fn plot_recovery(runs: &[&Envelope], path: &Path) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for backend in ["real", "fake"] {
        let runs: Vec<&Envelope> = runs.iter().copied().filter(|r| r.backend() == backend).collect();
        if !runs.is_empty() {
            series.push(series_of(
                &runs,
                format!("{backend}: convergence after heal"),
                "/partition_seconds",
                "/converge_seconds",
                false,
            ));
        }
    }
    chart(
        path,
        "Recovery: convergence time against partition length",
        ("partition (s)", "converged after heal (s)"),
        &series,
        SeriesLabelPosition::LowerRight,
    )
}

/// Runs side by side: every number in the results, a column per file.
pub fn compare(files: &[std::path::PathBuf]) -> anyhow::Result<Table> {
    let runs: Vec<Envelope> = files.iter().map(|f| Envelope::read(f)).collect::<anyhow::Result<_>>()?;
    let mut headers = vec!["figure".to_string()];
    headers.extend(files.iter().map(|f| {
        f.file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
    }));
    let mut leaves = Vec::new();
    for run in &runs {
        collect_leaves(&run.results, String::new(), &mut leaves);
    }
    let mut seen = std::collections::BTreeSet::new();
    leaves.retain(|l| seen.insert(l.clone()));
    let mut table = Table {
        title: "Runs side by side".into(),
        headers,
        rows: Vec::new(),
    };
    table.row(
        std::iter::once("load before → after".to_string())
            .chain(
                runs.iter()
                    .map(|r| format!("{} → {}", r.machine.load_before, r.machine.load_after)),
            )
            .collect(),
    );
    for pointer in leaves {
        let mut row = vec![pointer.clone()];
        row.extend(runs.iter().map(|r| match r.results.pointer(&pointer) {
            Some(serde_json::Value::Number(n)) => fmt(n.as_f64(), 1),
            Some(serde_json::Value::Bool(b)) => b.to_string(),
            _ => "–".into(),
        }));
        table.row(row);
    }
    Ok(table)
}

fn collect_leaves(value: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) if !at.ends_with("by_kind_in_window") => {
            for (k, v) in map {
                collect_leaves(v, format!("{at}/{k}"), out);
            }
        }
        serde_json::Value::Number(_) | serde_json::Value::Bool(_) => out.push(at),
        _ => {}
    }
}
