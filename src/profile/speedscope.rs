//! `--speedscope FILE`: speedscope's own file format (`file-format-schema.json` in its npm
//! package): the frames shared, one `sampled` profile per thread, each
//! sample a stack of frame indices from the root to the leaf, weighted by
//! the CPU time it stands for (ns). With `--off-cpu` each thread's profile
//! is of wall-clock time: its waits are samples too, weighted by their
//! length, in time order with the rest.

use std::io::Write;

use super::{Named, ProfileWriter};

pub const FLAG: &str = "--speedscope";

pub struct Speedscope;

impl ProfileWriter for Speedscope {
    fn write(&self, n: &Named<'_>, out: &mut dyn Write) -> std::io::Result<()> {
        write(n, out)
    }
}

pub fn write(n: &Named<'_>, w: &mut dyn Write) -> std::io::Result<()> {
    use serde_json::json;
    // speedscope's frames are functions: one per name and module.
    let frames: Vec<serde_json::Value> = n
        .functions
        .iter()
        .map(|(name, module)| match module {
            Some(m) => json!({ "name": name, "file": n.modules[*m as usize].path.to_string_lossy() }),
            None => json!({ "name": name }),
        })
        .collect();
    let mut profiles = Vec::new();
    for (t, (pid, tid, name)) in n.threads.iter().enumerate() {
        let mut mine: Vec<&(u32, u32, u64, u64)> = n.samples.iter().filter(|s| s.0 as usize == t).collect();
        mine.sort_by_key(|s| s.2);
        let samples: Vec<Vec<u32>> = mine
            .iter()
            .map(|s| n.stacks[s.1 as usize].iter().rev().map(|&f| n.function_of[f as usize]).collect())
            .collect();
        let weights: Vec<u64> = mine.iter().map(|s| s.3).collect();
        let total: u64 = weights.iter().sum();
        let kind = if n.wall { "wall-clock, " } else { "" };
        profiles.push(json!({
            "type": "sampled",
            "name": format!("{name} ({kind}pid {pid}, tid {tid})"),
            "unit": "nanoseconds",
            "startValue": 0,
            "endValue": total,
            "samples": samples,
            "weights": weights,
        }));
    }
    let doc = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": { "frames": frames },
        "profiles": profiles,
        "name": if n.wall { "telco-stap wall-clock profile" } else { "telco-stap CPU profile" },
        "activeProfileIndex": 0,
        "exporter": concat!("telco-stap ", env!("CARGO_PKG_VERSION")),
    });
    serde_json::to_writer(&mut *w, &doc).map_err(std::io::Error::other)?;
    writeln!(w)
}
