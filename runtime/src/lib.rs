//! telco-stap's runtime: pass 5. It attaches to or spawns the target,
//! injects the compiled artifact, patches probe sites, drains events, writes
//! the outputs and detaches. It never parses script text (INTERNALS.md,
//! invariant 4): its only input is a `telco_abi::artifact::Artifact`.
//!
//! * [`session`]: one session in the order it happens, behind the
//!   [`session::Session`] facade the driver calls (spawn or attach, arm,
//!   the run loop with the tracer's own probes and the event consumer,
//!   libraries loaded later, children, lifecycle probes, detach, the
//!   summary), on [`inject`] (the region and code put into a stopped
//!   process), [`region`] (the region as the tracer holds it) and
//!   [`place`] (the only code that writes machine code into a target);
//! * [`arch`]: everything that depends on the instruction set (patch
//!   planning, trampolines, clobbers, the register file); [`os`]: the only
//!   code that calls the kernel about processes, memory and signals, and
//!   the read-only view of running processes ([`os::proc`]) that pass 2 uses
//!   through the compiler's `TargetQuery`;
//! * outputs: [`render`] (histograms and the globals display, as SystemTap
//!   prints them), [`chrome`] (`--chrome`) and [`perfetto`] (`--perfetto`),
//!   both fed by [`feed`] (the spool and the trace writer thread),
//!   [`itrace`] (`.itrace` into ITRC files), [`crash`] (where a process of
//!   the session died); [`outfile`]: the one way an output file is
//!   opened (another user's symlink in `/tmp` is not followed);
//! * [`text`]: the tracer's own messages escaped for the terminal
//!   ([`eprintln_escaped!`]: what the target or a file named is printed
//!   without its control bytes).

pub mod arch;
pub mod blocktrace;
pub mod chrome;
pub mod crash;
pub mod error;
pub mod export;
pub mod feed;
pub mod flight;
pub mod frames;
pub mod inject;
pub mod itrace;
pub mod merge;
pub mod os;
pub mod otlp;
pub mod outfile;
pub mod owncode;
pub mod perfetto;
pub mod place;
pub mod profile;
pub mod region;
pub mod render;
pub mod rotate;
pub mod session;
pub mod symtab;
pub mod text;
pub mod trap;
