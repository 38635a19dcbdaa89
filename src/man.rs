//! The subcommands: shell completions, the manual page, `itrc-dump`.

use crate::cli::{self, Cli, Command, Shell};
use crate::itrc_dump;
use anyhow::Result;
use clap::CommandFactory;
use std::io::Write;
use std::process::ExitCode;

/// telco-stap(1): clap_mangen's rendering of the command line, then the
/// examples and where the full documentation is.
fn man_page(out: &mut dyn Write) -> std::io::Result<()> {
    let cmd = Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    let mut r = clap_mangen::roff::Roff::new();
    r.control("SH", ["EXAMPLES"]);
    for line in cli::EXAMPLES.lines().skip(1) {
        r.control("TP", []).text([clap_mangen::roff::roman(line.trim())]);
    }
    r.control("SH", ["FILES"]);
    r.text([clap_mangen::roff::roman(
        "Tapsets: built in, and any directory given with -I. Scripts: files ending in .tp, or -e TEXT.",
    )]);
    r.control("SH", ["SEE ALSO"]);
    r.text([clap_mangen::roff::roman(
        "The language reference (docs/language.md) and the probe points (docs/probe-points.md) in the \
         telco-stap source tree; stap(1), the SystemTap language telco-stap follows.",
    )]);
    r.to_writer(out)?;
    man.render_version_section(out)
}

pub fn subcommand(cmd: &Command) -> Result<ExitCode> {
    match cmd {
        Command::Completions { shell } => {
            let mut c = Cli::command();
            let mut out = std::io::stdout().lock();
            let sh = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(sh, &mut c, "telco-stap", &mut out);
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            let mut out = std::io::stdout().lock();
            man_page(&mut out)?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ItrcDump { file, disasm, chrome } => {
            itrc_dump::run(file, *disasm, chrome.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
