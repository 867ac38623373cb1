//! Every Rust snippet in the README is a marked region of a compiled example, word for word,
//! and the examples behind them run: the quick-start against a real memcached, the two codecs
//! against their loopback servers.
//!
//! A region starts at a line `// README: NAME` and ends at `// README: end`; its lines lose the
//! marker's indentation.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/quickstart.rs"]
mod quickstart;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/codecs.rs"]
mod codecs;

use keepwire_tests::servers::MemcachedServer;

const README: &str = include_str!("../../README.md");

/// The examples the README quotes.
const SOURCES: [(&str, &str); 3] = [
    (
        "tests/examples/quickstart.rs",
        include_str!("../examples/quickstart.rs"),
    ),
    (
        "tests/examples/codecs.rs",
        include_str!("../examples/codecs.rs"),
    ),
    (
        "proto/examples/run_loop.rs",
        include_str!("../../proto/examples/run_loop.rs"),
    ),
];

/// `(file, name, text)` of every marked region.
fn regions() -> Vec<(&'static str, String, String)> {
    let mut found = Vec::new();
    for (file, source) in SOURCES {
        let mut lines = source.lines();
        while let Some(line) = lines.next() {
            let trimmed = line.trim_start();
            let Some(name) = trimmed.strip_prefix("// README: ") else {
                continue;
            };
            assert_ne!(name, "end", "{file}: an end marker without a start");
            let indent = &line[..line.len() - trimmed.len()];
            let mut text = Vec::new();
            loop {
                let line = lines
                    .next()
                    .unwrap_or_else(|| panic!("{file}: region {name:?} has no end marker"));
                if line.trim() == "// README: end" {
                    break;
                }
                text.push(line.strip_prefix(indent).unwrap_or(line));
            }
            found.push((file, name.to_owned(), text.join("\n")));
        }
    }
    found
}

/// The bodies of the README's ```rust blocks.
fn rust_blocks() -> Vec<&'static str> {
    README
        .split("```rust\n")
        .skip(1)
        .map(|rest| rest.split("\n```").next().expect("a closed block"))
        .collect()
}

#[test]
fn every_readme_snippet_is_a_compiled_example_region() {
    let regions = regions();
    assert_eq!(
        regions.len(),
        4,
        "{:?}",
        regions.iter().map(|r| &r.1).collect::<Vec<_>>()
    );
    for block in rust_blocks() {
        assert!(
            regions.iter().any(|(_, _, text)| text == block),
            "this README snippet is no example region (compile it in an example and mark it):\n{block}"
        );
    }
    for (file, name, text) in &regions {
        assert!(
            README.contains(&format!("```rust\n{text}\n```")),
            "README.md's {name:?} differs from {file}; paste this into the README:\n{text}"
        );
    }
}

#[test]
fn the_quick_start_runs_against_memcached() {
    let server = MemcachedServer::start().unwrap_or_else(|e| panic!("{e}"));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(quickstart::quickstart(server.addr()))
        .unwrap();
}

#[test]
fn the_codecs_run() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(codecs::demo())
        .unwrap();
}
