//! The command line: options as SystemTap users know them (`telco-stap --help`).

use clap::{ArgAction, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

pub const EXAMPLES: &str = "\
Examples:
  telco-stap -e 'probe begin { printf(\"%d\\n\", 6*7); exit() }'
  telco-stap script.tp -p 4242                      attach to a running process
  telco-stap -e 'global n probe process.function(\"work\") { n++ } probe end { println(n) }' -c ./prog
  telco-stap -l 'process(\"libc.so.6\").function(\"mem*\")' -p 4242
  telco-stap trace.tp -c ./prog --perfetto out.pftrace   open in ui.perfetto.dev
  telco-stap trace.tp -c ./prog --chrome out.json   open in Perfetto or chrome://tracing
  telco-stap -p 4242 -T 10 --flamegraph cpu.svg    CPU profile as a flame graph
  telco-stap itrace.tp -p 4242 work --itrc out.itrc instruction trace of work() (Frida ITRC)
  telco-stap itrc-dump out.itrc --chrome out.json   read an ITRC file back
  telco-stap --last-pass 1 script.tp                print the parsed script
  telco-stap completions bash > /etc/bash_completion.d/telco-stap";

#[derive(Parser, Debug)]
#[command(
    name = "telco-stap",
    version,
    about = "A userspace dynamic tracer: SystemTap-style probe scripts compiled to machine code \
             and run inside the target's own threads.",
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    disable_version_flag = true,
    group(clap::ArgGroup::new("trace_file").multiple(true).args(["chrome", "perfetto"])),
    group(clap::ArgGroup::new("calls_out").multiple(true).args(["chrome", "perfetto", "otlp", "flight_recorder"])),
    group(clap::ArgGroup::new("export").multiple(true).args(["otlp", "pyroscope"])),
    group(clap::ArgGroup::new("profile_out").multiple(true).args(["folded", "flamegraph", "speedscope", "pprof", "perfetto"]))
)]
pub struct Cli {
    /// The script file, or with -e, the first script argument; then the
    /// script arguments ($1/@1 ...). Options may come before or after the
    /// script; put script arguments that start with `-` after `--`.
    #[arg(value_name = "SCRIPT.tp | ARGS")]
    pub positional: Vec<String>,

    /// Run this script text instead of a file.
    #[arg(short = 'e', value_name = "SCRIPT")]
    pub script_text: Option<String>,

    /// Attach to the running process PID and the processes descending from
    /// it (its workers, its backends); may be repeated. The first is
    /// target().
    #[arg(short = 'p', value_name = "PID", value_parser = parse_pid, conflicts_with = "command", allow_negative_numbers = true, action = ArgAction::Append)]
    pub pids: Vec<u32>,

    /// Set target() to PID, as SystemTap's -x: the probes run by path, in
    /// every process that runs or maps their files (PID's program names a
    /// process probe without a path); the script filters on target().
    #[arg(short = 'x', value_name = "PID", value_parser = parse_pid, conflicts_with_all = ["command", "pids"], allow_negative_numbers = true)]
    pub target_pid: Option<u32>,

    /// Start CMD with probes armed before its main runs; exit when it does.
    #[arg(short = 'c', value_name = "CMD", value_parser = non_empty)]
    pub command: Option<String>,

    /// Write the script's output to FILE instead of standard output.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Write a Chrome Trace Event JSON file (Perfetto, chrome://tracing, speedscope). On a terminal a
    /// status line shows its events, size and rate as it grows; a summary line ends the session. At
    /// most --max-size (2G by default).
    #[arg(long, value_name = "FILE")]
    pub chrome: Option<PathBuf>,

    /// Write a Perfetto trace (protobuf, compressed: a few bytes per call, so ui.perfetto.dev opens
    /// far more calls than --chrome's JSON). Can be written in the same run as --chrome. At most
    /// --max-size (2G by default).
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,

    /// Send every call --perfetto would record to an OpenTelemetry endpoint as a span, while the
    /// session runs: OTLP/HTTP, `POST URL/v1/traces` (protobuf, gzip), e.g. http://localhost:4318
    /// for an OpenTelemetry Collector (plain http: the collector forwards with TLS). Calls nest as
    /// parent and child spans; --min-dur applies. printf lines and trace_instant()s go as
    /// OpenTelemetry log records (`POST URL/v1/logs`). timer.profile's samples go there too, as
    /// OpenTelemetry profiles every --push-interval (`POST URL/v1development/profiles`); without
    /// a script, only they go, sampled at 99 Hz. The session's summary says what was delivered.
    #[arg(long, value_name = "URL", value_parser = parse_otlp_url)]
    pub otlp: Option<String>,

    /// Keep the recent past of every thread in memory (the calls --perfetto would record, printf
    /// lines, trace_instant, trace_counter, trace_span) and write it as a Perfetto trace only when
    /// asked: when a traced process takes a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT),
    /// when a handler calls flight_dump(), when telco-stap receives SIGUSR2, and with
    /// --flight-at-end at the end. Each dump is a file: FILE, then FILE.2, FILE.3, ...
    #[arg(long, value_name = "FILE", conflicts_with_all = ["chrome", "perfetto", "otlp"])]
    pub flight_recorder: Option<PathBuf>,

    /// With --flight-recorder, the memory the history takes in all, allocated at the start (e.g.
    /// 8M, 64M; default 32M, about 1.3 million calls; 1M to 4G). Each dump file stays under it too.
    #[arg(long, value_name = "SIZE", value_parser = parse_flight_size, requires = "flight_recorder")]
    pub flight_size: Option<u64>,

    /// With --flight-recorder, write a dump when the session ends too.
    #[arg(long, requires = "flight_recorder")]
    pub flight_at_end: bool,

    /// Send the timer.profile samples to Pyroscope at URL every --push-interval while the session
    /// runs (`POST URL/ingest`, pprof), labelled with the host, the service, the traced pid and
    /// each --label. Without a script, samples at 99 Hz. With --otlp too, they also go there as
    /// OpenTelemetry profiles (`POST URL/v1development/profiles`).
    #[arg(long, value_name = "URL", value_parser = parse_otlp_url)]
    pub pyroscope: Option<String>,

    /// Seconds between two profiles sent by --pyroscope or --otlp (default 10).
    #[arg(long, value_name = "SECONDS", value_parser = parse_push_interval, requires = "export")]
    pub push_interval: Option<f64>,

    /// The service.name of --otlp's spans and profiles, and --pyroscope's application name
    /// (default: the traced program's name).
    #[arg(long, value_name = "NAME", requires = "export", value_parser = non_empty)]
    pub service: Option<String>,

    /// Add KEY=VALUE to the resource attributes of --otlp's spans and profiles, and to
    /// --pyroscope's labels (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label, requires = "export", action = ArgAction::Append)]
    pub labels: Vec<(String, String)>,

    /// Bytes of --otlp or --pyroscope requests kept while the endpoint is slow or down (default
    /// 64M; spans, log records and each endpoint's profiles have a queue each): past that, new
    /// ones are dropped, and counted in the summary.
    #[arg(long, value_name = "SIZE", value_parser = parse_export_queue, requires = "export")]
    pub export_queue: Option<u64>,

    /// How long the end of the session waits for --otlp's or --pyroscope's queue to drain
    /// (default 10s); what is left then is counted in the summary.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ns, requires = "export")]
    pub export_timeout: Option<u64>,

    /// With --chrome or --perfetto, stop adding events to a trace file that would grow past SIZE
    /// (e.g. 500M, 2G, or bytes; at least 64K): the file stays valid, and the session's summary says
    /// how many events were left out. Default 2G, about what the Perfetto UI opens in a browser
    /// (chrome://tracing opens about 256 MB of JSON: a warning says when a trace passes that).
    #[arg(long, value_name = "SIZE", value_parser = parse_max_size, requires = "trace_file")]
    pub max_size: Option<u64>,

    /// With --chrome or --perfetto, go on in FILE.1, FILE.2, ... once a file has reached SIZE (e.g.
    /// 64M; at least 64K): each file is a trace of its own that Perfetto's trace processor opens
    /// without the others, and each call is in exactly one of them. --max-size then bounds each
    /// file.
    #[arg(long, value_name = "SIZE", value_parser = parse_max_size, requires = "trace_file")]
    pub rotate: Option<u64>,

    /// Write the timer.profile samples as collapsed stacks (`main;run;hot 42` a line: FlameGraph,
    /// inferno and speedscope read them). Without a timer.profile probe in the script (or without a
    /// script), one sampling at 99 Hz is added.
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Write the timer.profile samples as an interactive flame graph (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,

    /// Write the timer.profile samples in speedscope's format (one profile per thread).
    #[arg(long, value_name = "FILE")]
    pub speedscope: Option<PathBuf>,

    /// Write the timer.profile samples as a gzip'd pprof profile (go tool pprof, Pyroscope, Parca,
    /// Grafana).
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Profile where threads wait as well as where they run: each time a thread blocks (a lock, a
    /// read, a sleep, a wait for a CPU), its stack where it blocked, weighted by how long it stayed
    /// off its CPU, ending in a frame naming the wait (`[off-cpu] futex`). --folded and
    /// --flamegraph then count microseconds of wall-clock time, --pprof has `cpu` and `off_cpu`
    /// values, --speedscope a wall-clock profile per thread, --perfetto the waits as slices on
    /// the threads' tracks. Needs perf events with kernel samples (root, or CAP_PERFMON with
    /// CAP_IPC_LOCK).
    #[arg(long, requires = "profile_out", conflicts_with_all = ["otlp", "pyroscope"])]
    pub off_cpu: bool,

    /// With --perfetto, --chrome or --otlp, leave out calls shorter than DURATION (e.g. 500ns, 10us,
    /// 2ms, 1s). --chrome-min-dur is the same.
    #[arg(long, alias = "chrome-min-dur", value_name = "DURATION", value_parser = parse_duration_ns, requires = "calls_out")]
    pub min_dur: Option<u64>,

    /// Event buffer size in megabytes (default 1; 16 with --chrome, --perfetto or --otlp).
    #[arg(short = 's', value_name = "MB", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub buffer_mb: Option<u64>,

    /// Write .itrace probes' instruction traces to FILE (Frida ITRC format).
    #[arg(long, value_name = "FILE")]
    pub itrc: Option<PathBuf>,

    /// Record .itrace calls by single-stepping them with ptrace (about
    /// 60,000 instructions a second) instead of running them translated in
    /// the target: the reference recorder, and a way through code the
    /// translator refuses.
    #[arg(long = "itrace-step", requires = "itrc")]
    pub itrace_step: bool,

    /// Also look for tapsets in DIR (repeatable).
    #[arg(short = 'I', value_name = "DIR", action = ArgAction::Append, value_parser = existing_dir)]
    pub include: Vec<PathBuf>,

    /// List the probe points matching PROBE, then exit.
    #[arg(short = 'l', value_name = "PROBE", conflicts_with_all = ["list_vars", "script_text"])]
    pub list: Option<String>,

    /// Like -l, and show the variables each probe point offers.
    #[arg(short = 'L', value_name = "PROBE", conflicts_with = "script_text")]
    pub list_vars: Option<String>,

    /// List every function a script can call (built in, then the tapsets'
    /// with the file and summary their documentation gives), then exit.
    #[arg(long, conflicts_with_all = ["script_text", "list", "list_vars", "dump_probe_aliases"])]
    pub dump_functions: bool,

    /// List every probe alias the tapsets define, with what it stands for
    /// and its summary, then exit.
    #[arg(long, conflicts_with_all = ["script_text", "list", "list_vars"])]
    pub dump_probe_aliases: bool,

    /// Stop after pass N and print its result: 1 parse, 2 elaborate, 3 translate (CLIF), 4 codegen (disassembly), 5 run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub last_pass: Option<u8>,

    /// Verbose: print each pass's time (repeat for more detail).
    #[arg(short = 'v', action = ArgAction::Count)]
    pub verbose: u8,

    /// Set a limit: MAXSTRINGLEN, MAXMAPENTRIES, MAXACTION, MAXACTION_INTERRUPTIBLE, MAXERRORS, MAXSKIPPED, MAXNESTING, MAXITRACE (.itrace calls to record, 16), MAXRETURNDEPTH (return-probe frames per thread, 100000), MAXPROCESSES (processes armed at once, 256), TRAP_PROBES (1: probe with a one-byte trap even where a jump fits, 0) (repeatable).
    #[arg(short = 'D', value_name = "NAME=VALUE", action = ArgAction::Append, value_parser = parse_define)]
    pub defines: Vec<(String, u64)>,

    /// Start global NAME with VALUE (a number, or a string), as SystemTap's -G (repeatable).
    #[arg(short = 'G', value_name = "NAME=VALUE", action = ArgAction::Append, value_parser = parse_set_global)]
    pub set_globals: Vec<(String, String)>,

    /// Stop after SECONDS (fractions allowed).
    #[arg(short = 'T', value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub timeout: Option<f64>,

    /// Guru mode: allow scripts to write target registers and memory.
    #[arg(short = 'g')]
    pub guru: bool,

    /// Do not print warnings.
    #[arg(short = 'w')]
    pub no_warnings: bool,

    /// SystemTap's "symbols and unwind data of every shared library the
    /// target's programs use": telco-stap reads those of every library the
    /// target loads at its start whenever a script names addresses or
    /// walks stacks, so this adds nothing (accepted for SystemTap's
    /// command lines).
    #[arg(long = "ldd")]
    pub ldd: bool,

    /// Unoptimized: compile every function of the script, called or not
    /// (its errors are reported), and keep unused globals (no "Eliding"
    /// warning), as SystemTap's -u.
    #[arg(short = 'u')]
    pub unoptimized: bool,

    /// Behave as SystemTap VERSION did where the language changed: the
    /// value of `systemtap_v` in `%( %)` conditionals, and `%p` as it
    /// printed before 1.3 (zero-filled to 16 digits).
    #[arg(long, value_name = "VERSION", value_parser = parse_version)]
    pub compatible: Option<String>,

    /// A context variable (`$name`) that cannot be found or read at a
    /// probe point is 0, with a warning, instead of an error.
    #[arg(long = "skip-badvars")]
    pub skip_badvars: bool,

    /// Print the version.
    #[arg(short = 'V', long = "version", action = ArgAction::Version)]
    pub version: Option<bool>,

    #[command(subcommand)]
    pub subcommand: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Read an ITRC instruction-trace file back.
    #[command(name = "itrc-dump")]
    ItrcDump {
        /// The ITRC file (written by telco-stap --itrc or by Frida's itracer).
        file: PathBuf,
        /// Also disassemble each block's instructions.
        #[arg(long)]
        disasm: bool,
        /// Convert the trace to a Chrome Trace Event JSON file.
        #[arg(long, value_name = "OUT")]
        chrome: Option<PathBuf>,
    },
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the telco-stap(1) manual page (roff), generated from these
    /// options: `telco-stap man | man -l -`.
    Man,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The limits `-D` may set, as in SystemTap.
pub const KNOWN_DEFINES: &[&str] = &[
    "MAXSTRINGLEN",
    "MAXMAPENTRIES",
    "MAXACTION",
    "MAXACTION_INTERRUPTIBLE",
    "MAXERRORS",
    "MAXSKIPPED",
    "MAXNESTING",
    "MAXITRACE",
    "MAXRETURNDEPTH",
    "MAXPROCESSES",
    "TRAP_PROBES",
];

impl Cli {
    /// The first `-p`: `target()`, and the process pass 2 resolves
    /// `process` probes without a path in.
    pub fn pid(&self) -> Option<u32> {
        self.pids.first().copied().or(self.target_pid)
    }

    /// Calls become spans: a trace file or --otlp asks for them. The
    /// first such flag, to name in warnings.
    pub fn calls_out(&self) -> Option<&'static str> {
        [
            (self.perfetto.is_some(), "--perfetto"),
            (self.chrome.is_some(), "--chrome"),
            (self.otlp.is_some(), "--otlp"),
            (self.flight_recorder.is_some(), telco_runtime::flight::FLAG),
        ]
        .into_iter()
        .find_map(|(asked, flag)| asked.then_some(flag))
    }
}

fn parse_pid(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("a process id is a positive number".into()),
        Err(_) if s.starts_with('-') => Err("a process id is a positive number".into()),
        Ok(n) if n > i32::MAX as u32 => Err(format!("`{s}` is larger than any process id")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a process id (a positive number)")),
    }
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("the command is empty".into())
    } else {
        Ok(s.to_string())
    }
}

fn existing_dir(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if p.is_dir() {
        Ok(p)
    } else if p.exists() {
        Err(format!("`{s}` is not a directory"))
    } else {
        Err(format!("directory `{s}` does not exist"))
    }
}

fn parse_version(s: &str) -> Result<String, String> {
    let ok = !s.is_empty() && s.split('.').all(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("expected a version such as 1.3 or 4.0, got `{s}`"))
    }
}

fn parse_set_global(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value))
            if !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit()) =>
        {
            Ok((name.to_string(), value.to_string()))
        }
        _ => Err(format!("expected NAME=VALUE (a global's name), got `{s}`")),
    }
}

fn parse_define(s: &str) -> Result<(String, u64), String> {
    let Some((name, value)) = s.split_once('=') else {
        return Err(format!("expected NAME=VALUE, got `{s}`"));
    };
    if !KNOWN_DEFINES.contains(&name) {
        let hint = telco_compiler::suggest::closest(name, KNOWN_DEFINES.iter().copied())
            .map(|c| format!(" (did you mean {c}?)"))
            .unwrap_or_default();
        return Err(format!("unknown limit `{name}`{hint}; known: {}", KNOWN_DEFINES.join(", ")));
    }
    let v = value.parse::<u64>().map_err(|_| format!("{name} needs a non-negative whole number, got `{value}`"))?;
    let zero_ok = matches!(name, "MAXERRORS" | "MAXSKIPPED");
    if v == 0 && !zero_ok {
        return Err(format!("{name} must be at least 1"));
    }
    Ok((name.to_string(), v))
}

/// `--max-size`: a size, at least 64 KB (a Perfetto batch and the
/// summary kept room for must fit).
fn parse_max_size(s: &str) -> Result<u64, String> {
    let n = telco_runtime::feed::parse_size(s)?;
    if n < 64 << 10 {
        return Err(format!("`{s}` is smaller than the least trace file size, 64K"));
    }
    Ok(n)
}

/// `--flight-size`: at least a megabyte (room for two chunks of history
/// per thread slot).
fn parse_flight_size(s: &str) -> Result<u64, String> {
    let n = telco_runtime::feed::parse_size(s)?;
    if n < 1 << 20 {
        return Err(format!("`{s}` is smaller than the least flight recorder, 1M"));
    }
    // The history is allocated at the start, all of it.
    if n > 4 << 30 {
        return Err(format!("`{s}` is larger than the largest flight recorder, 4G"));
    }
    Ok(n)
}

/// `--otlp`, `--pyroscope`: an http:// URL.
fn parse_otlp_url(s: &str) -> Result<String, String> {
    telco_runtime::export::Endpoint::parse(s).map(|_| s.to_string())
}

/// `--label KEY=VALUE`.
fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// `--export-queue`: a size, at least 64K.
fn parse_export_queue(s: &str) -> Result<u64, String> {
    let n = telco_runtime::feed::parse_size(s)?;
    if n < 64 << 10 {
        return Err(format!("`{s}` is smaller than the least export queue, 64K"));
    }
    Ok(n)
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number of seconds")),
    }
}

/// `--push-interval`: seconds, from a tenth of one to a day.
fn parse_push_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=86400.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds from 0.1 to 86400")),
    }
}

/// `500ns`, `10us`, `2ms`, `1s`; a bare number is microseconds (the unit of Chrome traces).
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        (s, 1e3)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(format!("`{s}` is not a duration (e.g. 500ns, 10us, 2ms, 1s)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("500ns"), Ok(500));
        assert_eq!(parse_duration_ns("10us"), Ok(10_000));
        assert_eq!(parse_duration_ns("2ms"), Ok(2_000_000));
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration_ns("3"), Ok(3_000));
        assert!(parse_duration_ns("fast").is_err());
        assert!(parse_duration_ns("-1ms").is_err());
    }

    #[test]
    fn defines() {
        assert_eq!(parse_define("MAXACTION=500"), Ok(("MAXACTION".into(), 500)));
        assert!(parse_define("MAXACTION").is_err());
        assert!(parse_define("MAXACTON=5").unwrap_err().contains("did you mean MAXACTION"));
        assert!(parse_define("MAXSTRINGLEN=0").is_err());
        assert_eq!(parse_define("MAXERRORS=0"), Ok(("MAXERRORS".into(), 0)));
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
