//! `stap-conformance`: SystemTap's own exact-output language tests, run
//! through telco-stap.
//!
//!     SYSTEMTAP_SRC=/path/to/systemtap cargo run --release --bin stap-conformance
//!     ... --bin stap-conformance -- --markdown docs/CONFORMANCE.md   # the report
//!     ... --bin stap-conformance -- --only foreach                   # some cases
//!
//! It reads the `.exp` files of `testsuite/systemtap.{base,maps,printf,
//! string}` in a SystemTap source tree (nothing of it is copied here) and
//! keeps the exact-output tests: those that set `result_string` and run
//! their script with `stap_run2`, whose check is SystemTap's
//! `lib/stap_run2.exp`: standard output then standard error, less one final
//! newline, equal line for line to `result_string`. Options that only
//! tune SystemTap's kernel runtime (`--runtime=…`, `-DSTP_*`,
//! `-DMAPHASHBIAS=…`) are dropped; the rest are passed on.
//!
//! A case is out of scope, with the reason, when its script has embedded C
//! (`%{`) or reads the kernel's data structures, when pass 2 refuses a
//! probe point telco-stap does not have (kernel probes) or `@const`, when
//! it needs SystemTap's remote execution, a program its `.exp` compiles
//! first or a variable its `.exp` sets, or when the expected text is wrong
//! upstream; the `.exp` files that check output with `expect` patterns or
//! run other programs are listed as not exact-output tests.
//! Everything else is run and must match exactly: `N passed, M failed, S
//! out of scope` ends the report, and the exit status is 1 if any failed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SUITES: [&str; 4] = ["systemtap.base", "systemtap.maps", "systemtap.printf", "systemtap.string"];

/// One exact-output case of an `.exp` file.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// `suite/test`, with the options when an `.exp` runs its script more
    /// than once.
    pub name: String,
    /// Where the `.exp` is: the command runs there.
    pub dir: PathBuf,
    /// telco-stap's arguments: the options, then the script file (or
    /// `-e TEXT`) and its arguments, as `stap_run2` gives them.
    pub args: Vec<String>,
    pub expected: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pass,
    /// The first line that differs: (line, expected, got).
    Fail(String),
    OutOfScope(String),
}

/// The text of a Tcl brace-quoted word starting at `text[at]` (`{`): up to
/// the matching `}` (braces nest; a backslash-escaped brace does not count).
fn braced(text: &str, at: usize) -> Option<(String, usize)> {
    let b = text.as_bytes();
    if b.get(at) != Some(&b'{') {
        return None;
    }
    let mut depth = 0usize;
    let mut i = at;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some((text[at + 1..i].to_string(), i + 1));
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The value a `set result_string` (or `set ::result_string`) starting at
/// `exp[at..]` gives, braced or double-quoted (then with `\n` and `\"`
/// read).
fn result_string_at(exp: &str, at: usize) -> Option<String> {
    let rest = &exp[at..];
    let key = ["set ::result_string ", "set result_string "].into_iter().find(|k| rest.starts_with(k))?;
    let at = at + key.len();
    if exp[at..].starts_with('{') {
        return braced(exp, at).map(|(s, _)| s);
    }
    let rest = exp[at..].strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => return None,
            },
            c => out.push(c),
        }
    }
    None
}

/// The first `result_string` an `.exp` sets.
#[cfg(test)]
fn result_string(exp: &str) -> Option<String> {
    let at = exp.find("set ::result_string ").or_else(|| exp.find("set result_string "))?;
    result_string_at(exp, at)
}

/// The exact-output cases of one `.exp` file (empty: not such a test).
pub fn cases(suite: &str, exp_path: &Path, exp: &str) -> Vec<Case> {
    let dir = exp_path.parent().unwrap_or(Path::new("."));
    let stem = exp_path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
    // The test name in force: the last `set test` before each stap_run2.
    let mut test = stem.clone();
    let mut out: Vec<Case> = Vec::new();
    // The result_string in force at each stap_run2: the last one set
    // before it.
    let mut expected: Option<String> = None;
    // `if {$::tcl_platform(wordSize) == 8} { ... } else { ... }`: the
    // results of a 32-bit machine (the else branch) are not ours.
    let (mut word_size_if, mut in_32_bit_branch) = (false, false);
    let mut at = 0;
    for line in exp.split_inclusive('\n') {
        let here = at;
        at += line.len();
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if trimmed.starts_with("if {$::tcl_platform(wordSize) == 8}") {
            word_size_if = true;
        } else if word_size_if && trimmed.starts_with("} else {") {
            (word_size_if, in_32_bit_branch) = (false, true);
        } else if in_32_bit_branch && trimmed == "}" {
            in_32_bit_branch = false;
        }
        if let Some(v) = result_string_at(exp, here + indent).filter(|_| !in_32_bit_branch) {
            expected = Some(v);
        }
        let line = trimmed;
        if let Some(v) = line.strip_prefix("set test ") {
            test = v.trim().trim_matches('"').to_string();
        }
        let Some(rest) = line.strip_prefix("stap_run2 ") else { continue };
        let Some(expected) = expected.clone() else { continue };
        let Some(words) = tcl_words(rest) else { continue };
        let mut args = Vec::new();
        for w in words {
            if w.starts_with("--runtime") || w.starts_with("-DSTP_") || w.starts_with("-DMAPHASHBIAS") {
                continue;
            }
            let w = w.replace("$srcdir/$subdir/", "").replace("${test}", &test).replace("$test", &test);
            if w.contains("$srcdir") || w.contains("$subdir") || w.starts_with('[') {
                args.clear();
                break;
            }
            args.push(w);
        }
        if args.is_empty() || out.iter().any(|c| c.args == args && c.expected == expected) {
            continue;
        }
        let shown: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.ends_with(".stp")).collect();
        let name = if shown.is_empty() {
            format!("{suite}/{test}")
        } else {
            let s = shown.join(" ");
            let s: String = s.chars().take(60).collect();
            format!("{suite}/{test} {s}")
        };
        out.push(Case { name, dir: dir.to_path_buf(), args, expected });
    }
    out
}

/// The words of a Tcl command line: braces quote literally (nesting),
/// double quotes with `\` escapes; None for what this reader does not
/// handle (a `;`, a comment, unbalanced quoting).
fn tcl_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' => i += 1,
            b';' | b'#' => return None,
            b'{' => {
                let (w, end) = braced(line, i)?;
                words.push(w);
                i = end;
            }
            b'"' => {
                let mut w = String::new();
                i += 1;
                loop {
                    match b.get(i)? {
                        b'"' => break,
                        b'\\' => {
                            i += 1;
                            w.push(*b.get(i)? as char);
                        }
                        &c => w.push(c as char),
                    }
                    i += 1;
                }
                words.push(w);
                i += 1;
            }
            _ => {
                let start = i;
                while i < b.len() && b[i] != b' ' && b[i] != b'\t' {
                    i += 1;
                }
                words.push(line[start..i].to_string());
            }
        }
    }
    Some(words)
}

/// Cases whose expected text is wrong upstream (SystemTap fails them too).
const UPSTREAM_WRONG: &[(&str, &str)] = &[(
    "systemtap.maps/exists",
    "the expected text says `comlete list` where the script prints `complete list`: SystemTap fails it too",
)];

/// SystemTap's comparison: output lines against expected lines.
pub fn compare(expected: &str, got: &str) -> Outcome {
    let exp: Vec<&str> = expected.split('\n').collect();
    let got: Vec<&str> = got.split('\n').collect();
    for (n, line) in got.iter().enumerate() {
        match exp.get(n) {
            Some(e) if e == line => {}
            Some(e) => return Outcome::Fail(format!("line {}: expected {e:?}, got {line:?}", n + 1)),
            None => return Outcome::Fail(format!("line {}: expected nothing more, got {line:?}", n + 1)),
        }
    }
    if got.len() == exp.len() {
        Outcome::Pass
    } else {
        Outcome::Fail(format!("too few lines: got {}, expected {}", got.len(), exp.len()))
    }
}

fn telco() -> PathBuf {
    if let Some(p) = std::env::var_os("TELCO_STAP") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().unwrap_or_default();
    me.with_file_name("telco-stap")
}

/// Run telco-stap with `args` in `dir` (60 s at most): stdout then stderr,
/// and the exit status.
fn run(dir: &Path, args: &[String]) -> (String, Option<i32>) {
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL", "60"]).arg(telco()).args(args).current_dir(dir).stdin(Stdio::null());
    match cmd.output() {
        Ok(o) => {
            let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            (s, o.status.code())
        }
        Err(e) => (format!("cannot run {}: {e}", telco().display()), None),
    }
}

/// Whether the case is in scope; if it is, run it.
pub fn check(case: &Case) -> Outcome {
    if let Some((_, why)) = UPSTREAM_WRONG.iter().find(|(n, _)| *n == case.name) {
        return Outcome::OutOfScope((*why).to_string());
    }
    if let Some(a) = case.args.iter().find(|a| a.starts_with("--remote")) {
        return Outcome::OutOfScope(format!("`{a}`: SystemTap's remote execution"));
    }
    if let Some(a) = case.args.iter().find(|a| a.contains('$')) {
        return Outcome::OutOfScope(format!("`{a}`: set by the .exp's own setup, which this runner does not run"));
    }
    if let Some(w) = case.args.windows(2).find(|w| w[0] == "-c") {
        let prog = w[1].split_whitespace().next().unwrap_or_default();
        if prog.starts_with("./") && !case.dir.join(prog).exists() {
            return Outcome::OutOfScope(format!(
                "`{prog}`: a program the .exp compiles first, which this runner does not"
            ));
        }
    }
    let text: String = case
        .args
        .iter()
        .map(|a| {
            if a.ends_with(".stp") {
                std::fs::read_to_string(case.dir.join(a)).unwrap_or_default()
            } else {
                a.clone()
            }
        })
        .collect();
    if text.contains("%{") {
        return Outcome::OutOfScope("embedded C".into());
    }
    if text.contains("task_current()") || text.contains("\"kernel\"") || text.contains("\"kernel<") {
        return Outcome::OutOfScope("the kernel's data structures (`task_current()`, `@cast` to kernel types)".into());
    }
    // Pass 2 alone: a probe point we do not have is a kernel one.
    let mut p2: Vec<String> = vec!["--last-pass".into(), "2".into()];
    p2.extend(case.args.iter().cloned());
    let (out, code) = run(&case.dir, &p2);
    if code != Some(0) {
        if let Some(l) = out.lines().find(|l| l.contains("is neither built in nor a tapset alias")) {
            let point = l.split('`').nth(1).unwrap_or("?");
            return Outcome::OutOfScope(format!("probe point `{point}` (kernel)"));
        }
        if out.contains("`@const` is not supported") {
            return Outcome::OutOfScope("`@const`: a C macro of SystemTap's kernel-side runtime".into());
        }
    }
    let (mut got, _) = run(&case.dir, &case.args);
    if got.ends_with('\n') {
        got.pop();
    }
    compare(&case.expected, &got)
}

fn main() {
    let mut markdown: Option<PathBuf> = None;
    let mut only: Option<String> = None;
    let mut argv = std::env::args().skip(1);
    while let Some(a) = argv.next() {
        match a.as_str() {
            "--markdown" => markdown = argv.next().map(PathBuf::from),
            "--only" => only = argv.next(),
            _ => {
                eprintln!("usage: SYSTEMTAP_SRC=DIR stap-conformance [--markdown FILE] [--only TEXT]");
                std::process::exit(2);
            }
        }
    }
    let Some(src) = std::env::var_os("SYSTEMTAP_SRC").map(PathBuf::from) else {
        eprintln!("stap-conformance: set SYSTEMTAP_SRC to a SystemTap source tree (its testsuite/ is read)");
        std::process::exit(2);
    };
    if !telco().exists() {
        eprintln!(
            "stap-conformance: {} not found: build it (cargo build --release) or set TELCO_STAP",
            telco().display()
        );
        std::process::exit(2);
    }
    let mut all: Vec<(Case, Outcome)> = Vec::new();
    let mut not_exact: Vec<String> = Vec::new();
    for suite in SUITES {
        let dir = src.join("testsuite").join(suite);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            eprintln!("stap-conformance: no {}", dir.display());
            std::process::exit(2);
        };
        let mut exps: Vec<PathBuf> =
            rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "exp")).collect();
        exps.sort();
        for exp_path in exps {
            let exp = std::fs::read_to_string(&exp_path).unwrap_or_default();
            let cs = cases(suite, &exp_path, &exp);
            if cs.is_empty() {
                not_exact.push(format!("{suite}/{}", exp_path.file_stem().unwrap_or_default().to_string_lossy()));
            }
            for c in cs {
                if only.as_ref().is_some_and(|o| !c.name.contains(o.as_str())) {
                    continue;
                }
                let r = check(&c);
                let mark = match &r {
                    Outcome::Pass => "PASS".to_string(),
                    Outcome::Fail(why) => format!("FAIL  {why}"),
                    Outcome::OutOfScope(why) => format!("OUT   {why}"),
                };
                println!("{:<48} {mark}", c.name);
                all.push((c, r));
            }
        }
    }
    let passed = all.iter().filter(|(_, r)| *r == Outcome::Pass).count();
    let failed = all.iter().filter(|(_, r)| matches!(r, Outcome::Fail(_))).count();
    let out = all.iter().filter(|(_, r)| matches!(r, Outcome::OutOfScope(_))).count();
    let summary = format!("{passed} passed, {failed} failed, {out} out of scope");
    println!("{summary}");
    println!("({} .exp files are not exact-output tests: expect patterns or other programs)", not_exact.len());
    if let Some(md) = markdown {
        let mut t = String::new();
        t.push_str("| case | result |\n|---|---|\n");
        for (c, r) in &all {
            let (mark, why) = match r {
                Outcome::Pass => ("pass", String::new()),
                Outcome::Fail(w) => ("**fail**", w.clone()),
                Outcome::OutOfScope(w) => ("out of scope", w.clone()),
            };
            let why = why.replace('|', "\\|");
            t.push_str(&format!("| `{}` | {mark}{}{why} |\n", c.name, if why.is_empty() { "" } else { ": " }));
        }
        t.push_str(&format!("\n**{summary}**; {} `.exp` files are not exact-output tests (they match output with `expect` patterns, or run other programs): {}.\n", not_exact.len(), not_exact.join(", ")));
        if let Err(e) = std::fs::write(&md, t) {
            eprintln!("stap-conformance: cannot write {}: {e}", md.display());
            std::process::exit(2);
        }
    }
    std::process::exit(if failed > 0 { 1 } else { 0 });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exp_file_gives_its_cases() {
        let exp = r#"set test "basic1"
set ::result_string {Hello{World}
  two \{ lines}

foreach runtime [get_runtime_list] {
    if {$runtime != ""} {
	stap_run2 $srcdir/$subdir/$test.stp --runtime=$runtime
	stap_run2 $srcdir/$subdir/$test.stp --runtime=$runtime -DSTP_LEGACY_PRINT
    } else {
	stap_run2 $srcdir/$subdir/$test.stp
	stap_run2 $srcdir/$subdir/$test.stp -DMAXACTION=100 -g
    }
}
"#;
        let cs = cases("systemtap.printf", Path::new("/s/t/systemtap.printf/basic1.exp"), exp);
        assert_eq!(cs.len(), 2, "{cs:?}");
        assert_eq!(cs[0].name, "systemtap.printf/basic1");
        assert_eq!(cs[0].dir, Path::new("/s/t/systemtap.printf"));
        assert_eq!(cs[0].args, ["basic1.stp"]);
        assert_eq!(cs[0].expected, "Hello{World}\n  two \\{ lines");
        assert_eq!(cs[1].args, ["basic1.stp", "-DMAXACTION=100", "-g"]);
        let cs = cases(
            "b",
            Path::new("/t/b/p.exp"),
            "set test p\nset result_string {34}\nstap_run2 -e {global l probe oneshot {l<<<1}} -c \"echo x > /dev/null\"\n",
        );
        assert_eq!(cs.len(), 1, "{cs:?}");
        assert_eq!(cs[0].args, ["-e", "global l probe oneshot {l<<<1}", "-c", "echo x > /dev/null"]);
        assert!(cases("s", Path::new("x.exp"), "spawn stap $script\nexpect {}").is_empty());
    }

    #[test]
    fn comparison_is_stap_run2s() {
        assert_eq!(compare("a\nb", "a\nb"), Outcome::Pass);
        assert!(matches!(compare("a\nb", "a\nc"), Outcome::Fail(w) if w.contains("line 2")));
        assert!(matches!(compare("a\nb", "a"), Outcome::Fail(w) if w.contains("too few")));
        assert!(matches!(compare("a", "a\nb"), Outcome::Fail(_)));
        let exp = "if {$::tcl_platform(wordSize) == 8} {\n  set ::result_string \"0x0000000000000000\"\n} else {\n  set ::result_string \"0x00000000\"\n}\nstap_run2 $srcdir/$subdir/$test.stp --compatible=1.2\n";
        let c = cases("systemtap.printf", Path::new("/s/ptr-1.2.exp"), exp);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].expected, "0x0000000000000000", "the 64-bit machine's result");
        assert_eq!(result_string("set result_string \"x\\ny\\\"\"\n"), Some("x\ny\"".into()));
    }
}
