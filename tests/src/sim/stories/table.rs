//! The stories' tables: the rows every story shows, and how figures are written in them.

use std::fmt::Write as _;

use keepwire_proto::Instant;

use super::{Run, seconds};

// -----------------------------------------------------------------------------------------
// Tables.

pub(super) fn head(story: &str, runs: &[Run]) -> Vec<String> {
    let mut h = vec![String::new(), story.to_string()];
    h.extend(runs.iter().map(|r| r.name.clone()));
    h
}

pub(super) fn row(
    label: &str,
    story: &str,
    runs: &[Run],
    f: impl Fn(&Run) -> String,
) -> Vec<String> {
    let mut r = vec![label.to_string(), story.to_string()];
    r.extend(runs.iter().map(f));
    r
}

pub(super) fn count(x: Option<f64>) -> String {
    x.map_or("—".into(), |x| thousands(x as u64))
}

/// The rows every story has, in the order ("—" where a story has no load, or no
/// connect worth timing).
pub(super) fn common_rows(runs: &[Run], load: bool, connects: bool) -> Vec<Vec<String>> {
    let n = |v: u64| if load { thousands(v) } else { "—".into() };
    vec![
        row("queries ok", "", runs, |r| n(r.tally.ok)),
        row("queries failed fast", "", runs, |r| n(r.tally.failed_fast)),
        row("queries timed out", "", runs, |r| n(r.tally.timed_out)),
        row("queries lost", "", runs, |r| n(r.tally.lost)),
        row("time to detect", "", runs, |_| "—".into()),
        row("peak pending, one connection", "", runs, |_| "—".into()),
        row("peak pending, total", "", runs, |r| {
            if load {
                bytes(r.tally.peak_total as f64)
            } else {
                "—".into()
            }
        }),
        row("time to recover", "", runs, |_| "—".into()),
        row("stale requests sent after their deadline", "", runs, |r| {
            n(r.tally.stale_sent)
        }),
        row("  executed by a server after it", "", runs, |r| {
            n(r.tally.stale_executed)
        }),
        row("healthy connections closed", "", runs, |r| {
            n(r.tally.healthy_closed)
        }),
        row("time to first ready node", "", runs, |r| {
            match r.tally.first_ready() {
                Some(t) if connects => duration(seconds(t - Instant::ZERO)),
                _ => "—".into(),
            }
        }),
    ]
}

pub(super) fn story_cell(rows: &mut [Vec<String>], label: &str, figure: &str) {
    let r = rows.iter_mut().find(|r| r[0] == label).expect("a row");
    r[1] = figure.to_string();
}

pub(super) fn set(
    rows: &mut [Vec<String>],
    label: &str,
    runs: &[Run],
    f: impl Fn(&Run) -> Option<f64>,
) {
    let r = rows.iter_mut().find(|r| r[0] == label).expect("a row");
    for (i, run) in runs.iter().enumerate() {
        r[i + 2] = f(run).map_or("never".into(), duration);
    }
}

pub(super) fn set_peak(rows: &mut [Vec<String>], runs: &[Run], f: impl Fn(&Run) -> Option<f64>) {
    let r = rows
        .iter_mut()
        .find(|r| r[0] == "peak pending, one connection")
        .expect("a row");
    for (i, run) in runs.iter().enumerate() {
        r[i + 2] = f(run).map_or("—".into(), bytes);
    }
}

// -----------------------------------------------------------------------------------------
// Formatting.

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes in the unit that reads best: `8.70 GB`, `16.0 MiB`.
pub fn bytes(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n:.0} B")
    }
}

/// A duration in seconds as `6 min 33.3 s`, `12.5 s` or `0.75 s`.
pub fn duration(s: f64) -> String {
    if s >= 60.0 {
        let m = (s / 60.0).floor();
        format!("{m:.0} min {:.1} s", s - 60.0 * m)
    } else if s >= 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.3} s")
    }
}

/// A plain-text table.
#[derive(Clone, Debug)]
pub struct Table {
    /// Column heads (the first is the row labels').
    pub head: Vec<String>,
    /// Rows.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Renders it with aligned columns.
    pub fn render(&self) -> String {
        let cols = self.head.len();
        let mut width = vec![0; cols];
        for row in std::iter::once(&self.head).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate() {
                width[i] = width[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, row: &[String]| {
            for (i, cell) in row.iter().enumerate() {
                let pad = width[i] - cell.chars().count();
                if i == 0 {
                    let _ = write!(out, "{cell}{}", " ".repeat(pad));
                } else {
                    let _ = write!(out, "  {}{cell}", " ".repeat(pad));
                }
            }
            out.push('\n');
        };
        line(&mut out, &self.head);
        let total: usize = width.iter().sum::<usize>() + 2 * (cols - 1);
        out.push_str(&"-".repeat(total));
        out.push('\n');
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }
}
