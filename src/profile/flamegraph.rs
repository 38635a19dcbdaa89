//! `--flamegraph FILE`: an SVG flame graph of the collapsed stacks, drawn
//! by inferno (FlameGraph's `flamegraph.pl` in Rust).

use std::io::Write;

use super::{Named, ProfileWriter};

pub const FLAG: &str = "--flamegraph";

pub struct Flamegraph;

impl ProfileWriter for Flamegraph {
    fn write(&self, n: &Named<'_>, out: &mut dyn Write) -> std::io::Result<()> {
        let folded = n.folded();
        if folded.is_empty() {
            // inferno refuses an empty profile: an empty graph says the
            // same.
            return writeln!(
                out,
                "<?xml version=\"1.0\" standalone=\"no\"?><svg xmlns=\"http://www.w3.org/2000/svg\" \
                 width=\"1200\" height=\"60\"><text x=\"10\" y=\"30\">telco-stap CPU profile: no samples</text></svg>"
            );
        }
        let mut opt = inferno::flamegraph::Options::default();
        (opt.title, opt.count_name) = match n.wall {
            // (`--off-cpu`: on- and off-CPU time, in microseconds.)
            true => ("telco-stap wall-clock profile".into(), "us".into()),
            false => ("telco-stap CPU profile".into(), "samples".into()),
        };
        inferno::flamegraph::from_lines(&mut opt, folded.iter().map(String::as_str), out).map_err(std::io::Error::other)
    }
}
