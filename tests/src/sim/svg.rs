//! Timelines as hand-written SVG: per run, pending bytes, each node's state and the outcomes
//! per period, runs stacked on one page with one time axis, so "before" and "after" read
//! against each other.

use std::fmt::Write as _;

use keepwire_proto::Instant;

use super::report::{Lane, Timeline};
use super::stories::bytes;

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 120.0;
const RIGHT: f64 = 20.0;
const PLOT: f64 = WIDTH - LEFT - RIGHT;
const PENDING_H: f64 = 110.0;
const LANE_H: f64 = 12.0;
const OUTCOME_H: f64 = 70.0;

/// One run to draw.
#[derive(Debug)]
pub struct Panel<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its samples.
    pub timeline: &'a Timeline,
    /// Its exact peak of pending bytes (samples may miss a short one).
    pub peak: u64,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn secs(t: Instant) -> f64 {
    t.as_nanos() as f64 / 1e9
}

/// A tick step that gives at most about ten ticks over `span` seconds.
fn tick_step(span: f64) -> f64 {
    let steps = [
        0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
        3600.0,
    ];
    steps
        .into_iter()
        .find(|s| span / s <= 10.0)
        .unwrap_or(7200.0)
}

fn tick_label(t: f64) -> String {
    if t == 0.0 {
        "0".into()
    } else if t >= 60.0 && (t % 60.0).abs() < 1e-9 {
        format!("{} min", t / 60.0)
    } else if t >= 1.0 {
        format!("{t} s")
    } else {
        format!("{} ms", (t * 1000.0).round())
    }
}

/// Renders `panels` on one page titled `title`, over `0..span` seconds; `watermark` draws the
/// high watermark on the pending-bytes charts.
pub fn render(title: &str, panels: &[Panel<'_>], span: f64, watermark: Option<u64>) -> String {
    let span = span.max(1e-3);
    let x = |t: f64| LEFT + PLOT * (t / span).clamp(0.0, 1.0);
    let max_pending = panels
        .iter()
        .flat_map(|p| p.timeline.total.iter().chain(std::iter::once(&p.peak)))
        .copied()
        .max()
        .unwrap_or(0);
    let has_pending = max_pending > 0;
    let bucket = panels
        .first()
        .map_or(1.0, |p| p.timeline.every.as_secs_f64());
    // Outcomes per second, averaged over each pixel column, so the bars stay even however
    // many periods fall in a column.
    let columns = PLOT as usize;
    let per_col = |tl: &Timeline| -> Vec<[f64; 4]> {
        let mut cols = vec![[0f64; 4]; columns];
        let mut n = vec![0u32; columns];
        for (i, o) in tl.outcomes.iter().enumerate() {
            let c = ((i as f64 * bucket / span) * columns as f64) as usize;
            if c < columns {
                n[c] += 1;
                for k in 0..4 {
                    cols[c][k] += f64::from(o[k]);
                }
            }
        }
        for (col, n) in cols.iter_mut().zip(n) {
            for v in col.iter_mut() {
                *v /= f64::from(n.max(1)) * bucket;
            }
        }
        cols
    };
    let cols: Vec<Vec<[f64; 4]>> = panels.iter().map(|p| per_col(p.timeline)).collect();
    let max_out = cols
        .iter()
        .flatten()
        .map(|c| c.iter().sum::<f64>())
        .fold(0.0, f64::max);
    let has_outcomes = max_out > 0.0;
    let nodes = panels
        .iter()
        .map(|p| p.timeline.lanes.len())
        .max()
        .unwrap_or(0);
    let block = 28.0
        + if has_pending { PENDING_H + 14.0 } else { 0.0 }
        + nodes as f64 * LANE_H
        + 10.0
        + if has_outcomes { OUTCOME_H + 10.0 } else { 0.0 };
    let height = 50.0 + block * panels.len() as f64 + 60.0;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="#fff"/><text x="{LEFT}" y="24" font-size="15" font-weight="bold">{}</text>"##,
        esc(title)
    );
    let mut y = 50.0;
    for (p, cols) in panels.iter().zip(&cols) {
        let tl = p.timeline;
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
            y + 12.0,
            esc(p.name)
        );
        y += 20.0;
        let top = y;
        if has_pending {
            // Pending bytes: the largest sample in each pixel column.
            let scale = |v: u64| y + PENDING_H - PENDING_H * (v as f64 / max_pending as f64);
            let mut col_max: Vec<Option<u64>> = vec![None; columns];
            for (i, &v) in tl.total.iter().enumerate() {
                let c = ((secs(tl.at[i]) / span) * columns as f64) as usize;
                if c < columns {
                    col_max[c] = Some(col_max[c].map_or(v, |m: u64| m.max(v)));
                }
            }
            let mut path = format!("M{:.1},{:.1}", LEFT, y + PENDING_H);
            let mut last = LEFT;
            for (c, v) in col_max.iter().enumerate() {
                if let Some(v) = v {
                    last = LEFT + c as f64;
                    let _ = write!(path, " L{last:.1},{:.1}", scale(*v));
                }
            }
            let _ = write!(path, " L{last:.1},{:.1} Z", y + PENDING_H);
            let _ = writeln!(
                s,
                r##"<rect x="{LEFT}" y="{y:.1}" width="{PLOT}" height="{PENDING_H}" fill="#f7f7f7" stroke="#ccc"/><path d="{path}" fill="#c0392b" fill-opacity="0.35" stroke="#c0392b"/>"##
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><text x="{:.1}" y="{:.1}" text-anchor="end">0</text><text x="10" y="{:.1}" fill="#555">pending bytes</text>"##,
                LEFT - 4.0,
                y + 10.0,
                bytes(max_pending as f64),
                LEFT - 4.0,
                y + PENDING_H,
                y + PENDING_H / 2.0
            );
            let peak = p.peak;
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#c0392b">peak {}</text>"##,
                LEFT + 6.0,
                y + 14.0,
                bytes(peak as f64)
            );
            if let Some(w) = watermark.filter(|&w| w <= max_pending) {
                let wy = scale(w);
                let _ = writeln!(
                    s,
                    r##"<line x1="{LEFT}" x2="{:.1}" y1="{wy:.1}" y2="{wy:.1}" stroke="#2c3e50" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#2c3e50">high watermark {}</text>"##,
                    LEFT + PLOT,
                    LEFT + PLOT - 4.0,
                    wy - 3.0,
                    bytes(w as f64)
                );
            }
            y += PENDING_H + 14.0;
        }
        // Node lanes, run-length encoded.
        for (n, lane) in tl.lanes.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="10">node {n}</text>"#,
                LEFT - 4.0,
                y + LANE_H - 3.0
            );
            let mut i = 0;
            while i < lane.len() {
                let mut j = i + 1;
                while j < lane.len() && lane[j] == lane[i] {
                    j += 1;
                }
                let t0 = secs(tl.at[i]);
                let t1 = if j < tl.at.len() {
                    secs(tl.at[j])
                } else {
                    secs(tl.end).max(t0 + bucket)
                };
                let (state, fault) = lane[i];
                let color = match state {
                    Lane::Ready => "#27ae60",
                    Lane::Unwritable => "#f39c12",
                    Lane::Connecting => "#f1c40f",
                    Lane::Quarantined => "#8e44ad",
                    Lane::Down => "#bdc3c7",
                };
                let (x0, x1) = (x(t0), x(t1));
                let _ = write!(
                    s,
                    r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                    y + 1.0,
                    (x1 - x0).max(0.5),
                    LANE_H - 2.0
                );
                if fault {
                    let _ = write!(
                        s,
                        r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="3" fill="#c0392b"/>"##,
                        y + LANE_H - 3.0,
                        (x1 - x0).max(0.5)
                    );
                }
                i = j;
            }
            s.push('\n');
            y += LANE_H;
        }
        y += 10.0;
        if has_outcomes {
            let colors = ["#27ae60", "#2980b9", "#c0392b", "#e67e22"];
            let _ = writeln!(
                s,
                r##"<rect x="{LEFT}" y="{y:.1}" width="{PLOT}" height="{OUTCOME_H}" fill="#f7f7f7" stroke="#ccc"/><text x="10" y="{:.1}" fill="#555">outcomes/s</text><text x="{:.1}" y="{:.1}" text-anchor="end">{max_out:.0}</text>"##,
                y + OUTCOME_H / 2.0,
                LEFT - 4.0,
                y + 10.0
            );
            // One path per kind: a one-pixel bar per column, stacked.
            let mut paths = [String::new(), String::new(), String::new(), String::new()];
            for (c, o) in cols.iter().enumerate() {
                let mut base = y + OUTCOME_H;
                for k in 0..4 {
                    if o[k] <= 0.0 {
                        continue;
                    }
                    let h = OUTCOME_H * o[k] / max_out;
                    base -= h;
                    let _ = write!(paths[k], "M{:.0},{base:.1}h1v{h:.1}h-1z", LEFT + c as f64);
                }
            }
            for (k, d) in paths.iter().enumerate().filter(|(_, d)| !d.is_empty()) {
                let _ = writeln!(s, r#"<path d="{d}" fill="{}"/>"#, colors[k]);
            }
            y += OUTCOME_H + 10.0;
        }
        // Marks across the whole block, labels staggered so neighbours do not overlap.
        let mut last_label = f64::NEG_INFINITY;
        let mut row = 0.0;
        for (t, what) in &tl.marks {
            let mx = x(secs(*t));
            row = if mx - last_label < 150.0 {
                row + 10.0
            } else {
                0.0
            };
            last_label = mx;
            let _ = writeln!(
                s,
                r##"<line x1="{mx:.1}" x2="{mx:.1}" y1="{top:.1}" y2="{:.1}" stroke="#34495e" stroke-dasharray="2 2"/><text x="{:.1}" y="{:.1}" fill="#34495e" font-size="10">{}</text>"##,
                y - 10.0,
                mx + 3.0,
                top - 3.0 + row,
                esc(what)
            );
        }
        y += 8.0;
    }
    // Time axis.
    let step = tick_step(span);
    let mut t = 0.0;
    while t <= span + 1e-9 {
        let tx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{tx:.1}" x2="{tx:.1}" y1="{:.1}" y2="{:.1}" stroke="#999"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            y,
            y + 5.0,
            y + 17.0,
            tick_label(t)
        );
        t += step;
    }
    // Legend.
    let ly = y + 38.0;
    let legend = [
        ("#27ae60", "ready / ok"),
        ("#f1c40f", "connecting"),
        ("#f39c12", "unwritable"),
        ("#8e44ad", "quarantined"),
        ("#bdc3c7", "no connection"),
        ("#2980b9", "failed fast"),
        ("#c0392b", "timed out / fault"),
        ("#e67e22", "lost"),
    ];
    let mut lx = LEFT;
    for (color, what) in legend {
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="10" fill="{color}"/><text x="{:.1}" y="{ly:.1}">{what}</text>"#,
            ly - 9.0,
            lx + 14.0
        );
        lx += 18.0 + 6.5 * what.len() as f64;
    }
    s.push_str("\n</svg>\n");
    s
}
