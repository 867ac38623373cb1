//! The incidents, replayed: keepwire's three stories, each twice with the same seed —
//! "before" (keepwire with its fixes switched off) and "after" (its defaults) — on the
//! deterministic simulator of kernels and servers around the real `Pool`.
//!
//! `cargo run --release -p keepwire-tests --example replay [-- --out DIR] [1|2|3]`
//!
//! Prints one table per story and writes one SVG timeline per story (into `docs/replay/` of
//! the workspace unless `--out` says otherwise).
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant as Wall;

use keepwire_tests::sim::stories::{self, Replay, SEED};

fn main() -> std::io::Result<()> {
    let mut out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/replay");
    let mut only = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = args.next().expect("--out DIR").into(),
            other => only.push(other.to_string()),
        }
    }
    let scenarios: [Scenario; 3] = [
        (
            "1",
            "a node flap, readmitted onto a dead connection",
            stories::story1,
        ),
        (
            "2",
            "a 37-minute stall: 1.07 M queries, 8.7 GB",
            stories::story2,
        ),
        (
            "3",
            "dead bootstrap servers: 127 s per dead one",
            stories::story3,
        ),
    ];
    println!("keepwire replays (seed {SEED}):");
    for (key, what, _) in &scenarios {
        println!("  {key}. {what}");
    }
    std::fs::create_dir_all(&out)?;
    let out = out.canonicalize()?;
    let all = Wall::now();
    for (key, _, replay) in scenarios {
        if !only.is_empty() && !only.iter().any(|o| o == key) {
            continue;
        }
        let started = Wall::now();
        let r = replay();
        let wall = started.elapsed();
        println!("\n{}\n", r.title);
        println!("{}\n", wrap(&r.inputs, 96));
        print!("{}", r.table.render());
        if let Some(extra) = &r.extra {
            println!();
            print!("{}", extra.render());
        }
        let file = out.join(format!("{}.svg", r.key));
        std::fs::write(&file, r.svg())?;
        println!(
            "\n{} runs in {:.2} s wall; timeline: {}",
            r.runs.len(),
            wall.as_secs_f64(),
            file.display()
        );
    }
    println!("\nall replays: {:.2} s wall", all.elapsed().as_secs_f64());
    Ok(())
}

/// Its key on the command line, what it is, and how to replay it.
type Scenario = (&'static str, &'static str, fn() -> Replay);

fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out
}
