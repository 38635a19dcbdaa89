//! `--folded FILE`: collapsed stacks, one line per distinct stack
//! (`thread;root;...;leaf count`), as FlameGraph's `stackcollapse` scripts
//! write them and inferno, speedscope and most flame graph tools read
//! them. The count is of samples; in a wall-clock profile (`--off-cpu`)
//! it is microseconds, of CPU time and of waits alike (a wait's leaf is
//! `[off-cpu] NAME`), as bcc's `offcputime -f` counts.

use std::collections::HashMap;
use std::io::Write;

use super::{Named, ProfileWriter};

pub const FLAG: &str = "--folded";

pub struct Folded;

impl ProfileWriter for Folded {
    fn write(&self, n: &Named<'_>, out: &mut dyn Write) -> std::io::Result<()> {
        for l in n.folded() {
            writeln!(out, "{l}")?;
        }
        Ok(())
    }
}

/// The collapsed stacks, sorted ([`Named::folded`] keeps them).
pub(super) fn lines(n: &Named<'_>) -> Vec<String> {
    let mut by_stack: HashMap<(u32, u32), u64> = HashMap::new();
    for (i, &(thread, stack, _, weight)) in n.samples.iter().enumerate() {
        *by_stack.entry((thread, stack)).or_default() += if n.wall { weight } else { n.count(i) };
    }
    let clean = |s: &str| s.replace([';', '\n'], "_");
    // Stacks that differ only in addresses inside the same functions are
    // one line.
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for ((thread, stack), c) in by_stack {
        let mut l = clean(&n.threads[thread as usize].2);
        for &f in n.stacks[stack as usize].iter().rev() {
            l.push(';');
            l.push_str(&clean(&n.functions[n.function_of[f as usize] as usize].0));
        }
        *counts.entry(l).or_default() += c;
    }
    match n.wall {
        // Nanoseconds to microseconds, a line's sum rounded up (no line of
        // a wait shorter than a microsecond is 0).
        true => counts.into_iter().map(|(l, c)| format!("{l} {}", c.div_ceil(1000))).collect(),
        false => counts.into_iter().map(|(l, c)| format!("{l} {c}")).collect(),
    }
}
