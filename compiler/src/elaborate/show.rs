//! Text forms of pass 2's results: `--last-pass 2` and `-l`/`-L` listings.

use crate::program::*;
use std::fmt::Write;

/// The resolved program: globals and functions with their types, then every
/// probe with each concrete point (module, symbol, address, size).
pub fn print_program(p: &Program) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# files: {}", p.files.join(", "));
    if !p.globals.is_empty() {
        o.push_str("\n# globals\n");
        for g in &p.globals {
            let _ = write!(o, "{}:{}", g.name, kind_name(&g.kind));
            match &g.init {
                Some(Const::Long(n)) => {
                    let _ = write!(o, " = {n}");
                }
                Some(Const::String(s)) => {
                    o.push_str(" = ");
                    crate::print::write_string(&mut o, s);
                }
                None => {}
            }
            o.push('\n');
        }
    }
    if !p.functions.is_empty() {
        o.push_str("\n# functions\n");
        for f in &p.functions {
            let params: Vec<String> =
                f.locals[..f.params as usize].iter().map(|l| format!("{}:{}", l.name, l.ty.name())).collect();
            let _ = writeln!(o, "function {}:{}({})", f.name, f.ret.name(), params.join(", "));
            locals(&mut o, &f.locals[f.params as usize..]);
        }
    }
    o.push_str("\n# probes\n");
    for pr in &p.probes {
        let _ = writeln!(
            o,
            "probe {}  /* {} point{} */",
            pr.written,
            pr.points.len(),
            if pr.points.len() == 1 { "" } else { "s" }
        );
        for pt in &pr.points {
            match (&pr.lifecycle, pt) {
                // A lifecycle point's hook in the C library: where, not the
                // address (which differs from one glibc to the next).
                (Some(name), Point::Function(f)) => {
                    let file = f.module.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                    let at = if f.ret { "the return of" } else { "the entry of" };
                    let guard = match &pr.condition {
                        Some(_) if f.ret || f.symbol != "_exit" => ", guarded",
                        _ => "",
                    };
                    let _ = writeln!(o, "    {name} at {at} {}  /* {file}{guard} */", f.symbol);
                }
                _ => {
                    let _ = writeln!(o, "    {}", point_detail(pt));
                }
            }
        }
        locals(&mut o, &pr.locals);
    }
    o
}

fn locals(o: &mut String, ls: &[Local]) {
    if !ls.is_empty() {
        let v: Vec<String> = ls.iter().map(|l| format!("{}:{}", l.name, l.ty.name())).collect();
        let _ = writeln!(o, "    locals: {}", v.join(", "));
    }
}

fn kind_name(k: &GlobalKind) -> String {
    match k {
        GlobalKind::Scalar(t) => t.name().to_string(),
        GlobalKind::Array { keys, value, capacity, wrap } => {
            let ks: Vec<&str> = keys.iter().map(|t| t.name()).collect();
            let cap = capacity.map(|c| format!(" capacity {c}")).unwrap_or_default();
            let wrap = if *wrap { ", wrapping" } else { "" };
            format!("[{}] -> {}{cap}{wrap}", ks.join(", "), value.name())
        }
    }
}

/// A point as SystemTap's listing writes it.
pub fn point_name(p: &Point) -> String {
    let order = |name: &str, n: i64| if n == 0 { name.to_string() } else { format!("{name}({n})") };
    let module = |m: &Option<std::path::PathBuf>| match m {
        Some(p) => format!("process(\"{}\")", p.display()),
        None => "process".to_string(),
    };
    match p {
        Point::Begin { order: n } => order("begin", *n),
        Point::End { order: n } => order("end", *n),
        Point::Error { order: n } => order("error", *n),
        Point::Profile { period_ns } if *period_ns == 1_000_000_000 / 99 => "timer.profile".to_string(),
        Point::Profile { period_ns } => format!("timer.profile.hz({})", 1_000_000_000 / period_ns.max(&1)),
        Point::Blocked => "process.blocked".to_string(),
        Point::Timer { period_ns, randomize_ns } => {
            let base = if period_ns % 1_000_000_000 == 0 {
                format!("timer.s({})", period_ns / 1_000_000_000)
            } else if period_ns % 1_000_000 == 0 {
                format!("timer.ms({})", period_ns / 1_000_000)
            } else if period_ns % 1_000 == 0 {
                format!("timer.us({})", period_ns / 1_000)
            } else {
                format!("timer.ns({period_ns})")
            };
            if *randomize_ns > 0 {
                format!("{base}.randomize({randomize_ns}ns)")
            } else {
                base
            }
        }
        Point::Function(f) => {
            let name = f.demangled.as_deref().unwrap_or(&f.symbol);
            let suffix = if f.ret {
                ".return"
            } else if f.itrace {
                ".itrace"
            } else {
                ""
            };
            format!("process(\"{}\").function(\"{}\"){suffix}", f.module.display(), name)
        }
        // A C label's, as SystemTap names it.
        Point::Statement { module, function: Some(f), label: Some(l), .. } => {
            format!("process(\"{}\").function(\"{f}\").label(\"{l}\")", module.display())
        }
        Point::Statement { module, addr, .. } => format!("process(\"{}\").statement({addr:#x})", module.display()),
        Point::Mark(m) => {
            format!("process(\"{}\").provider(\"{}\").mark(\"{}\")", m.module.display(), m.provider, m.name)
        }
        Point::ProcessBegin { module: m } => format!("{}.begin", module(m)),
        Point::ProcessEnd { module: m } => format!("{}.end", module(m)),
        Point::ThreadBegin { module: m } => format!("{}.thread.begin", module(m)),
        Point::ThreadEnd { module: m } => format!("{}.thread.end", module(m)),
    }
}

fn point_detail(p: &Point) -> String {
    match p {
        Point::Function(f) => {
            let mangled = if f.demangled.is_some() { format!(" [{}]", f.symbol) } else { String::new() };
            format!(
                "{}{mangled}  /* addr {:#x} size {} file offset {:#x} */",
                point_name(p),
                f.addr,
                f.size,
                f.file_offset
            )
        }
        Point::Statement { function: Some(func), .. } => format!("{}  /* in {func} */", point_name(p)),
        Point::Mark(m) => format!(
            "{}  /* addr {:#x}{} in {}, args `{}` */",
            point_name(p),
            m.addr,
            m.semaphore.map(|s| format!(" semaphore {s:#x}")).unwrap_or_default(),
            m.function.as_deref().unwrap_or("?"),
            m.args_text
        ),
        _ => point_name(p),
    }
}

/// The variables `-L` shows for a point.
pub fn point_variables(p: &Point) -> Vec<String> {
    match p {
        Point::Function(f) => {
            // Arguments by position: the integer argument registers of the
            // platform ABI are always available.
            let n = telco_abi::arch::native::ARG_REGS.len();
            let mut v: Vec<String> = (1..=n).map(|i| format!("$arg{i}:long")).collect();
            if f.ret {
                v.push("$return:long".into());
            }
            v
        }
        Point::Statement { .. } => Vec::new(),
        Point::Mark(m) => {
            let mut v: Vec<String> = (1..=m.args.len()).map(|i| format!("$arg{i}:long")).collect();
            v.extend(["$$name:string", "$$provider:string", "$$parms:string"].map(String::from));
            v
        }
        _ => Vec::new(),
    }
}
