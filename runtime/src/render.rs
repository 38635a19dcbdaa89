//! Text the tracer prints for events: histograms laid out exactly as
//! SystemTap's `_stp_stat_print_histogram` does (docs/notes/stap-semantics.md).

use std::fmt::Write;
use telco_abi::region::{HIST_LOG, HIST_LOG_BUCKET0};

const HIST_WIDTH: i64 = 50;
const ELISION: usize = 2;

/// The label of a log histogram bucket.
fn log_label(b: usize) -> String {
    let b0 = HIST_LOG_BUCKET0 as usize;
    if b == b0 {
        "0".into()
    } else if b > b0 {
        (1i128 << (b - b0 - 1)).to_string()
    } else {
        (-(1i128 << (b0 - 1 - b))).to_string()
    }
}

/// A histogram's text: `kind` is `HIST_LOG` or `HIST_LINEAR`.
pub fn histogram(kind: u32, lo: i64, step: i64, counts: &[i64]) -> String {
    let n = counts.len();
    let mut out = String::new();
    let Some(first) = counts.iter().position(|&c| c != 0) else { return out };
    let last = counts.iter().rposition(|&c| c != 0).unwrap_or(first);
    let (mut low, mut high) = (first, last);
    for _ in 0..2 {
        if kind == HIST_LOG {
            if low != HIST_LOG_BUCKET0 as usize && low > 0 {
                low -= 1;
            }
        } else if low > 0 {
            low -= 1;
        }
        if high + 1 < n {
            high += 1;
        }
    }
    if kind != HIST_LOG {
        if low == 0 && counts[0] == 0 {
            low = 1;
        }
        if high == n - 1 && counts[n - 1] == 0 && high > 0 {
            high -= 1;
        }
    }
    let label = |i: usize| -> String {
        if kind == HIST_LOG {
            log_label(i)
        } else if i == 0 {
            format!("<{lo}")
        } else if i == n - 1 {
            format!(">{}", lo as i128 + (n as i128 - 3) * step as i128)
        } else {
            (lo as i128 + (i as i128 - 1) * step as i128).to_string()
        }
    };
    let valmax = counts[low..=high].iter().copied().max().unwrap_or(0).max(0);
    let mut val_space = (low..=high).map(|i| label(i).len()).max().unwrap_or(0).max(5);
    if kind != HIST_LOG {
        // stat-common.c sizes the column from the value one step above the
        // last row shown.
        let above = lo as i128 + step as i128 * high as i128;
        val_space = val_space.max(above.to_string().len());
    }
    let cnt_space = valmax.to_string().len() as i64;
    let scale = if valmax <= HIST_WIDTH { 1 } else { valmax.saturating_add(HIST_WIDTH - 1) / HIST_WIDTH };
    let _ = writeln!(out, "{:>w$} |{} count", "value", "-".repeat(HIST_WIDTH as usize), w = val_space);
    let mut skipped = false;
    for i in low..=high {
        let a = i.saturating_sub(ELISION).max(low);
        let b = (i + ELISION).min(high);
        if counts[a..=b].iter().all(|&c| c == 0) {
            skipped = true;
            continue;
        }
        if skipped {
            let _ = writeln!(out, "{:>w$} ~", "", w = val_space);
            skipped = false;
        }
        let v = (counts[i] / scale).clamp(0, HIST_WIDTH);
        let _ = writeln!(
            out,
            "{:>w$} |{}{:>cw$}",
            label(i),
            "@".repeat(v as usize),
            counts[i],
            w = val_space,
            cw = (HIST_WIDTH - v + 1 + cnt_space) as usize
        );
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use telco_abi::region::{HIST_LINEAR, HIST_LOG_BUCKETS};

    #[test]
    fn linear_nearly_empty_matches_systemtap() {
        // agg <<< 444; agg <<< 999; print(@hist_linear(agg, 0, 1500, 50))
        let mut c = vec![0i64; (1500 / 50 + 3) as usize];
        c[444 / 50 + 1] += 1;
        c[999 / 50 + 1] += 1;
        let expect = "\
value |-------------------------------------------------- count
  300 |                                                   0
  350 |                                                   0
  400 |@                                                  1
  450 |                                                   0
  500 |                                                   0
      ~
  850 |                                                   0
  900 |                                                   0
  950 |@                                                  1
 1000 |                                                   0
 1050 |                                                   0

";
        assert_eq!(histogram(HIST_LINEAR, 0, 50, &c), expect);
    }

    #[test]
    fn log_with_negatives_matches_systemtap() {
        let mut c = vec![0i64; HIST_LOG_BUCKETS as usize];
        // -2 is in the -2 row (bucket 128 - 66 = 62), -4096 in 128 - 77 = 51.
        c[62] = 1;
        c[51] = 1;
        let h = histogram(HIST_LOG, 0, 0, &c);
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[0], " value |-------------------------------------------------- count");
        assert_eq!(lines[1], "-16384 |                                                   0");
        assert_eq!(lines[3], " -4096 |@                                                  1");
        assert_eq!(lines[6], "       ~");
        assert_eq!(lines[11], "     0 |                                                   0");
    }
}

/// SystemTap's end-of-session display of globals the script wrote and never
/// read (elaborate.cxx `add_global_var_display`): scalars as `name=4`,
/// strings as `name="text"`, statistics with their extractors, arrays one
/// line per element sorted by value (statistics by @count), descending,
/// ties in insertion order.
///
/// The region is the target's to write: every read is bounds-checked, an
/// array's geometry (slots, keys, value) comes from the artifact's
/// initial bytes (`Artifact::init_at`), never from the region, and a statistic in an
/// impossible state (a negative count, a minimum above its maximum) is an
/// `Err` naming it.
pub fn display_globals(region: &[u8], a: &telco_abi::artifact::Artifact) -> Result<String, String> {
    use telco_abi::artifact::DisplayKind;
    use telco_abi::region::*;
    let u32_at = |o: usize| read_u32_le(region, o);
    let i64_at = |o: usize| read_i64_le(region, o);
    let cstr = |o: usize, max: usize| -> String {
        let s = region.get(o..(o + max).min(region.len())).unwrap_or(&[]);
        let n = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        String::from_utf8_lossy(&s[..n]).into_owned()
    };
    let impossible = |name: &str, count: i64, min: i64, max: i64| {
        format!(
            "the target corrupted statistic {name}: @count={count} @min={min} @max={max} cannot all hold; it is not \
             displayed"
        )
    };
    let stat_text = |name: &str, o: usize| -> Result<String, String> {
        let count = i64_at(o);
        if count == 0 {
            return Ok(" @count=0x0".into());
        }
        let (sum, min, max) = (i64_at(o + 8), i64_at(o + 16), i64_at(o + 24));
        if count < 0 || min > max {
            return Err(impossible(name, count, min, max));
        }
        Ok(format!(" @count={count} @min={min} @max={max} @sum={sum} @avg={}", sum / count))
    };
    // Rows of per-thread copies: the header's count, at most what fits.
    let rows = (read_u32_le(region, core::mem::offset_of!(Header, nthreads)) as usize).min(region.len() / 8);
    let mut out = String::new();
    for d in &a.display {
        let off = d.offset as usize;
        match d.kind {
            DisplayKind::Long => out.push_str(&format!("{}={}\n", d.name, i64_at(off))),
            DisplayKind::ShardedLong(k) => {
                let shards = read_i64_le(region, core::mem::offset_of!(Header, shards_off)) as usize;
                let n = read_u32_le(region, core::mem::offset_of!(Header, nshards)) as usize;
                let at =
                    |r: usize| shards.saturating_add(r.saturating_mul(n).saturating_add(k as usize).saturating_mul(8));
                let sum = (0..rows).map(|r| i64_at(at(r))).fold(i64_at(off), i64::wrapping_add);
                out.push_str(&format!("{}={}\n", d.name, sum));
            }
            DisplayKind::String => {
                out.push_str(&format!("{}=\"{}\"\n", d.name, cstr(off + LOCKED_STR_HEADER, 1 << 20)))
            }
            DisplayKind::Stat => out.push_str(&format!("{}{}\n", d.name, stat_text(&d.name, off)?)),
            DisplayKind::ShardedStat { shards, row } => {
                // Merge the shared copy and every thread's copy.
                let copies = std::iter::once(off)
                    .chain((0..rows).map(|r| (shards as usize).saturating_add(r.saturating_mul(row as usize))));
                let (mut count, mut sum, mut min, mut max) = (0i64, 0i64, 0i64, 0i64);
                for c in copies {
                    let n = i64_at(c);
                    if n == 0 {
                        continue;
                    }
                    let (mn, mx) = (i64_at(c + 16), i64_at(c + 24));
                    if n < 0 || mn > mx {
                        return Err(impossible(&d.name, n, mn, mx));
                    }
                    if count == 0 || mn < min {
                        min = mn;
                    }
                    if count == 0 || mx > max {
                        max = mx;
                    }
                    count = count.checked_add(n).ok_or_else(|| impossible(&d.name, n, mn, mx))?;
                    sum = sum.wrapping_add(i64_at(c + 8));
                }
                if count == 0 {
                    out.push_str(&format!("{} @count=0x0\n", d.name));
                } else {
                    out.push_str(&format!(
                        "{} @count={count} @min={min} @max={max} @sum={sum} @avg={}\n",
                        d.name,
                        sum / count
                    ));
                }
            }
            DisplayKind::Array => {
                // The geometry as pass 3 wrote it.
                let Some(h) = a.init_at(d.offset) else { continue };
                let field = |f: usize| read_u32_le(h, f) as usize;
                let nkeys = field(core::mem::offset_of!(TableHeader, nkeys)).min(10);
                let kinds_at = core::mem::offset_of!(TableHeader, key_kinds);
                let value_kind = h.get(core::mem::offset_of!(TableHeader, value_kind)).copied().unwrap_or(0);
                let nslots = field(core::mem::offset_of!(TableHeader, nslots));
                let slot_size = field(core::mem::offset_of!(TableHeader, slot_size));
                let value_off = field(core::mem::offset_of!(TableHeader, value_off));
                let key_off_at = core::mem::offset_of!(TableHeader, key_off);
                let cap = field(core::mem::offset_of!(TableHeader, maxstringlen));
                if slot_size == 0 || off + TABLE_HEADER_SIZE + nslots.saturating_mul(slot_size) > region.len() {
                    continue;
                }
                let mut rows = Vec::new();
                for i in 0..nslots {
                    let slot = off + TABLE_HEADER_SIZE + i * slot_size;
                    if u32_at(slot + 4) != SLOT_LIVE {
                        continue;
                    }
                    let order = i64_at(slot + 8);
                    let keys: Vec<String> = (0..nkeys)
                        .map(|k| {
                            let ko = slot + read_u32_le(h, key_off_at + 4 * k) as usize;
                            if h.get(kinds_at + k).copied() == Some(KIND_STRING) {
                                format!("\"{}\"", cstr(ko, cap))
                            } else {
                                i64_at(ko).to_string()
                            }
                        })
                        .collect();
                    let vo = slot + value_off;
                    let (sort_key, sort_str, text) = match value_kind {
                        KIND_STRING => {
                            let s = cstr(vo + LOCKED_STR_HEADER, cap);
                            (0, s.clone(), format!("=\"{s}\""))
                        }
                        KIND_STAT => {
                            (i64_at(vo), String::new(), stat_text(&format!("{}[{}]", d.name, keys.join(",")), vo)?)
                        }
                        _ => (i64_at(vo), String::new(), format!("={}", i64_at(vo))),
                    };
                    rows.push((sort_key, sort_str, order, format!("{}[{}]{}\n", d.name, keys.join(","), text)));
                }
                rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)).then_with(|| a.2.cmp(&b.2)));
                for r in rows {
                    out.push_str(&r.3);
                }
            }
        }
    }
    Ok(out)
}

fn read_u32_le(b: &[u8], at: usize) -> u32 {
    b.get(at..at.saturating_add(4)).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn read_i64_le(b: &[u8], at: usize) -> i64 {
    b.get(at..at.saturating_add(8)).map_or(0, |s| i64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
}
