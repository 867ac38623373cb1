//! The README's run loop is `examples/run_loop.rs`'s, word for word, so it compiles and runs
//! (`cargo test` builds the example; `cargo run --example run_loop` runs it).

/// The lines between `// README: run loop` and `// README: end`, one indent level removed.
fn example_region() -> String {
    let example = include_str!("../examples/run_loop.rs");
    let start = example.find("// README: run loop\n").expect("start marker") + 20;
    let end = example.find("    // README: end").expect("end marker");
    example[start..end]
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_readme_run_loop_is_the_compiled_example() {
    let readme = include_str!("../../README.md");
    let region = example_region();
    assert!(
        readme.contains(&region),
        "README.md's run loop differs from examples/run_loop.rs; paste this into the README:\n{region}"
    );
}
