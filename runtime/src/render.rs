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
    let val_space = (low..=high).map(|i| label(i).len()).max().unwrap_or(0).max(5);
    let cnt_space = valmax.to_string().len() as i64;
    let scale = if valmax <= HIST_WIDTH { 1 } else { (valmax + HIST_WIDTH - 1) / HIST_WIDTH };
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
