//! `telco-stap itrc-dump FILE [--disasm] [--chrome OUT]`: prints an ITRC
//! file (ours or Frida's) and optionally converts it to Chrome JSON, in one
//! pass over the file.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use telco_itrc::chrome::ChromeTrace;
use telco_itrc::dump::{DumpOptions, TextDump};
use telco_itrc::Reader;

pub fn run(file: &Path, disasm: bool, chrome: Option<&Path>) -> Result<()> {
    let input = File::open(file).with_context(|| format!("cannot read `{}`", file.display()))?;
    let mut reader = Reader::new(BufReader::new(input)).with_context(|| format!("cannot read `{}`", file.display()))?;
    let stdout = std::io::stdout().lock();
    let mut text = TextDump::new(BufWriter::new(stdout), DumpOptions { disasm });
    let mut trace = match chrome {
        Some(out) => {
            let f =
                telco_runtime::outfile::create(out).with_context(|| format!("cannot create `{}`", out.display()))?;
            let title = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            Some((ChromeTrace::new(BufWriter::new(f), &format!("itrc {title}"))?, out))
        }
        None => None,
    };
    // What was read before an error is still printed and converted (the
    // Chrome file stays valid JSON); the error then ends the run.
    let mut failure = None;
    loop {
        match reader.next_event() {
            Ok(Some(e)) => {
                text.event(&e)?;
                if let Some((t, out)) = &mut trace {
                    t.event(&e).with_context(|| format!("cannot write `{}`", out.display()))?;
                }
            }
            Ok(None) => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if let Some((t, out)) = trace {
        t.finish().and_then(|mut w| w.flush()).with_context(|| format!("cannot write `{}`", out.display()))?;
    }
    match failure {
        None => {
            text.finish()?;
            Ok(())
        }
        Some(e) => {
            text.flush()?;
            Err(anyhow::Error::new(e).context(format!("`{}` is not a valid ITRC file", file.display())))
        }
    }
}
