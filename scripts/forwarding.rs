//! Finds the loads that the store buffer cannot forward, in a trace of valgrind's lackey
//! (`--trace-mem=yes`) read on standard input: a load that overlaps a store made shortly
//! before it without lying inside that one store (an 8-byte load of two 4-byte stores, a
//! 16-byte copy of two 8-byte ones) waits for the stores to reach the cache, about 5 ns on the
//! development machine. Prints, most frequent first, each such load's instruction address,
//! the store's, and how often it happened. Built and run by `scripts/forwarding.sh`.
//!
//! The model is deliberately simple: a store counts as in flight for `WINDOW` instructions,
//! and only the youngest store overlapping a load decides whether it forwards. Take a site it
//! names as a lead to read the machine code at, not a measurement.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};

/// Instructions a store is taken to stay in the store buffer.
const WINDOW: u64 = 256;

/// A store still in flight: when (in instructions), where, how wide, and made by which
/// instruction.
struct Store {
    at: u64,
    addr: u64,
    size: u64,
    by: u64,
}

fn main() {
    let mut input = BufReader::with_capacity(1 << 20, std::io::stdin().lock());
    let mut line = String::new();
    let (mut executed, mut instruction) = (0u64, 0u64);
    let mut in_flight: Vec<Store> = Vec::new();
    let mut failed: HashMap<(u64, u64), u64> = HashMap::new();
    while input.read_line(&mut line).unwrap_or(0) > 0 {
        if let Some((kind, addr, size)) = parse(&line) {
            match kind {
                'I' => {
                    executed += 1;
                    instruction = addr;
                }
                'L' | 'M' => {
                    in_flight.retain(|s| executed - s.at <= WINDOW);
                    let youngest = in_flight
                        .iter()
                        .rev()
                        .find(|s| s.addr < addr + size && addr < s.addr + s.size);
                    if let Some(s) = youngest {
                        if !(s.addr <= addr && addr + size <= s.addr + s.size) {
                            *failed.entry((instruction, s.by)).or_default() += 1;
                        }
                    }
                    if kind == 'M' {
                        in_flight.push(Store {
                            at: executed,
                            addr,
                            size,
                            by: instruction,
                        });
                    }
                }
                'S' => in_flight.push(Store {
                    at: executed,
                    addr,
                    size,
                    by: instruction,
                }),
                _ => {}
            }
        }
        line.clear();
    }
    let mut sites: Vec<_> = failed.into_iter().collect();
    sites.sort_by_key(|&(site, n)| (std::cmp::Reverse(n), site));
    println!("{executed} instructions traced");
    for ((load, store), n) in sites {
        println!("{n} {load:x} {store:x}");
    }
}

/// One line of lackey's trace: `I  ADDR,SIZE` for an instruction, ` L|S|M ADDR,SIZE` for a
/// load, a store or both (hexadecimal address, decimal size).
fn parse(line: &str) -> Option<(char, u64, u64)> {
    let kind = line.trim_start().chars().next()?;
    let (addr, size) = line.trim_start()[1..].trim().split_once(',')?;
    Some((
        kind,
        u64::from_str_radix(addr, 16).ok()?,
        size.trim().parse().ok()?,
    ))
}
