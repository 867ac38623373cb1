use keepwire_tests::sim::stories;
use std::time::Instant as Wall;

fn main() {
    let arg = std::env::args().nth(1).unwrap_or_default();
    for (k, f) in [
        ("1", stories::story1 as fn() -> stories::Replay),
        ("2", stories::story2),
        ("3", stories::story3),
    ] {
        if !arg.is_empty() && arg != k {
            continue;
        }
        let t = Wall::now();
        let r = f();
        println!(
            "{} ({:?})\n{}\n\n{}",
            r.title,
            t.elapsed(),
            r.inputs,
            r.table.render()
        );
        if let Some(x) = &r.extra {
            println!("{}", x.render());
        }
        std::fs::create_dir_all("/tmp/replay").unwrap();
        std::fs::write(format!("/tmp/replay/{}.svg", r.key), r.svg()).unwrap();
    }
}
