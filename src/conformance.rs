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
//! their script with `stap_run2` (or `stap_run3`, the same with a test
//! name first), whose check is SystemTap's
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
    /// Programs the `.exp` compiles first (`target_compile`), built in a
    /// fresh directory where the case then runs.
    pub builds: Vec<Build>,
    /// A variable of the expected text that the `.exp` computes (reading
    /// a pipe, say), which this reader cannot: the case is out of scope.
    pub computed: Option<String>,
}

/// One `target_compile SRC OUT executable FLAGS`: gcc SRC -o OUT and the
/// `additional_flags=` of FLAGS ([`PWD`] stands for the build directory).
#[derive(Debug, Clone, PartialEq)]
pub struct Build {
    pub src: PathBuf,
    pub out: String,
    pub flags: Vec<String>,
}

/// `[pwd]` in an `.exp`: the directory the case is built and run in.
const PWD: &str = "\u{0}PWD\u{0}";

/// The `.exp`'s own variables (`set NAME VALUE`) as far as this reader
/// follows them: `$test`, paths under `$srcdir/$subdir` (made absolute),
/// `[pwd]`, and flags built up word by word. None for a value it does
/// not follow.
fn tcl_subst(text: &str, vars: &std::collections::HashMap<String, String>, dir: &Path) -> Option<String> {
    let mut s = text.replace("[pwd]", PWD).replace("[sdt_includes]", "");
    let d = dir.display().to_string();
    s = s.replace("$srcdir/$subdir", &d);
    // Longest names first (`$testpath` before `$test`).
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in names {
        s = s.replace(&format!("${{{n}}}"), &vars[n]).replace(&format!("${n}"), &vars[n]);
    }
    (!s.contains('$') && !s.contains('[')).then_some(s)
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
    value_at(exp, at + key.len())
}

/// The braced or double-quoted Tcl value at `exp[at..]`.
fn value_at(exp: &str, at: usize) -> Option<String> {
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
                // Tcl's \uXXXX, \UXXXXXXXX, \xHH: up to that many hex digits.
                Some(k @ ('u' | 'U' | 'x')) => {
                    let most = match k {
                        'u' => 4,
                        'U' => 8,
                        _ => 2,
                    };
                    let digits: String = chars.clone().take(most).take_while(char::is_ascii_hexdigit).collect();
                    match u32::from_str_radix(&digits, 16).ok().and_then(char::from_u32) {
                        Some(c) => {
                            out.push(c);
                            for _ in 0..digits.len() {
                                chars.next();
                            }
                        }
                        None => out.push(k),
                    }
                }
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
    let mut vars: std::collections::HashMap<String, String> = Default::default();
    let mut pieces: std::collections::HashMap<String, String> = Default::default();
    let mut builds: Vec<Build> = Vec::new();
    let mut computed: Option<String> = None;
    let mut piped: Option<Vec<u8>> = None;
    let mut literals: std::collections::HashMap<String, String> = Default::default();
    // `if {$::tcl_platform(wordSize) == 8} { ... } else { ... }`: the
    // results of a 32-bit machine (the else branch) are not ours.
    let (mut word_size_if, mut in_32_bit_branch) = (false, false);
    let mut at = 0;
    for line in exp.split_inclusive('\n') {
        let here = at;
        let line_len = line.len();
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
        // `set result_string1 {...}`: pieces a later result_string joins
        // (`"${result_string1}${result_string3}"`).
        if let Some(rest) = line.trim_start().strip_prefix("set result_string") {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if !digits.is_empty() && rest[digits.len()..].starts_with(' ') {
                let at = here + indent + "set result_string".len() + digits.len() + 1;
                if let Some(v) = value_at(exp, at) {
                    pieces.insert(format!("result_string{digits}"), v);
                }
            }
        }
        if let Some(v) = result_string_at(exp, here + indent).filter(|_| !in_32_bit_branch) {
            let mut v = v;
            for (k, piece) in &pieces {
                v = v.replace(&format!("${{{k}}}"), piece);
            }
            // Double-quoted: Tcl substitutes the .exp's variables.
            computed = None;
            if exp[here + indent..]
                .split_once(' ')
                .and_then(|(_, r)| r.split_once(' '))
                .is_some_and(|(_, r)| r.starts_with('"'))
            {
                let known: std::collections::HashMap<&String, &String> = vars.iter().chain(literals.iter()).collect();
                let mut names: Vec<&String> = known.keys().copied().collect();
                names.sort_by_key(|n| std::cmp::Reverse(n.len()));
                for n in names {
                    v = v.replace(&format!("${{{n}}}"), known[n]).replace(&format!("${n}"), known[n]);
                }
                computed = v.find('$').map(|i| {
                    let name: String = v[i + 1..]
                        .trim_start_matches('{')
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    format!("${name}")
                });
            }
            expected = Some(v);
        }
        // The line, and those a `\` at its end goes on to.
        let mut whole = trimmed.to_string();
        let mut more = exp[here + line_len..].split_inclusive('\n');
        while whole.ends_with('\\') {
            let Some(next) = more.next() else { break };
            whole = format!("{} {}", whole.trim_end_matches('\\').trim_end(), next.trim());
        }
        let line = whole.as_str();
        // Text the .exp writes to a file (`puts -nonewline $fd "..."`,
        // binary) and reads back as UTF-8 (`set NAME [read $fd]`): the
        // bytes, then the text.
        if let Some(rest) = line.strip_prefix("puts -nonewline $fd ") {
            let at = here + indent + (line.len() - rest.len());
            piped = value_at(exp, at).map(|v| v.chars().map(|c| c as u32 as u8).collect());
        } else if let (Some(name), Some(bytes)) =
            (line.strip_prefix("set ").and_then(|r| r.strip_suffix(" [read $fd]")), &piped)
        {
            vars.insert(name.to_string(), String::from_utf8_lossy(bytes).into_owned());
        }
        if let Some(v) = line.strip_prefix("set test ") {
            test = v.trim().trim_matches('"').to_string();
            vars.insert("test".into(), test.clone());
        } else if let Some(rest) = line.strip_prefix("set ") {
            // `set NAME VALUE`: a variable this reader may need later.
            if let Some((name, value)) = rest.split_once(' ') {
                let value = value.trim();
                // The flags of the first compile variant (native: none).
                if value.starts_with("[all_compile_flag ") {
                    vars.insert(name.to_string(), String::new());
                } else if value.starts_with('{') && value.ends_with('}') && !name.contains(':') {
                    // A braced literal on its line: for the expected text
                    // only (a probe point list in one is left to the
                    // .exp's own setup).
                    literals.insert(name.to_string(), value[1..value.len() - 1].to_string());
                } else if !name.contains(':') && !value.starts_with("[target_compile") && !value.starts_with('{') {
                    let value = value.trim_matches('"');
                    if let Some(v) = tcl_subst(value, &vars, dir) {
                        vars.insert(name.to_string(), v);
                    }
                }
            }
        }
        // `[target_compile SRC OUT executable FLAGS]`, bare or in a `set`.
        if let Some(at) = line.find("target_compile ") {
            let inner = line[at + "target_compile ".len()..].trim_end_matches(']');
            if let Some(w) = tcl_words(inner).filter(|w| w.len() >= 4) {
                let parts: Option<Vec<String>> = w.iter().map(|x| tcl_subst(x, &vars, dir)).collect();
                if let Some(p) = parts {
                    let flags = p[3]
                        .split_whitespace()
                        .filter_map(|f| f.strip_prefix("additional_flags="))
                        .map(str::to_string)
                        .collect();
                    builds.push(Build { src: PathBuf::from(&p[0]), out: p[1].clone(), flags });
                }
            }
        }
        // `stap_run2 ARGS`, or `stap_run3 NAME ARGS` (the same check,
        // lib/stap_run2.exp), a line ending in `\` going on on the next.
        let (rest, named) = match (line.strip_prefix("stap_run2 "), line.strip_prefix("stap_run3 ")) {
            (Some(r), _) => (r.to_string(), false),
            (None, Some(r)) => (r.to_string(), true),
            _ => continue,
        };
        let mut rest = rest;
        let mut more = exp[at..].split_inclusive('\n');
        while rest.trim_end().ends_with('\\') {
            let Some(next) = more.next() else { break };
            rest = format!("{} {}", rest.trim_end().trim_end_matches('\\'), next.trim());
        }
        let Some(expected) = expected.clone() else { continue };
        // The branch for SystemTap's other runtimes (dyninst, BPF): the
        // default runtime's case is the one beside it.
        if rest.contains("--runtime=$runtime") {
            continue;
        }
        let Some(mut words) = tcl_words(&rest) else { continue };
        if named {
            if words.is_empty() {
                continue;
            }
            words.remove(0);
        }
        let mut args = Vec::new();
        for w in words {
            if w.starts_with("--runtime") || w.starts_with("-DSTP_") || w.starts_with("-DMAPHASHBIAS") {
                continue;
            }
            // The .exp's own variables (`$exepath`, `$testpath`), where it
            // builds programs; a path under the .exp's directory made
            // absolute (the case runs where its programs are built).
            let w = if builds.is_empty() { w } else { tcl_subst(&w, &vars, dir).unwrap_or(w) };
            let w = w.replace("$srcdir/$subdir/", "").replace("${test}", &test).replace("$test", &test);
            if w.contains("$srcdir") || w.contains("$subdir") || w.starts_with('[') {
                args.clear();
                break;
            }
            let w = if !builds.is_empty() && w.ends_with(".stp") && !w.starts_with('/') {
                dir.join(&w).display().to_string()
            } else {
                w
            };
            args.push(w);
        }
        if args.is_empty() || out.iter().any(|c| c.args == args && c.expected == expected) {
            continue;
        }
        let shown: Vec<String> = args
            .iter()
            .filter(|a| !a.ends_with(".stp"))
            .map(|a| a.replace(&format!("{}/", dir.display()), "").replace(PWD, "[pwd]"))
            .collect();
        let name = if shown.is_empty() {
            format!("{suite}/{test}")
        } else {
            let s = shown.join(" ");
            let s: String = s.chars().take(60).collect();
            format!("{suite}/{test} {s}")
        };
        out.push(Case {
            name,
            dir: dir.to_path_buf(),
            args,
            expected,
            builds: builds.clone(),
            computed: computed.clone(),
        });
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
const UPSTREAM_WRONG: &[(&str, &str)] = &[
    (
        "systemtap.maps/exists",
        "the expected text says `comlete list` where the script prints `complete list`: SystemTap fails it too",
    ),
    (
        "systemtap.base/at_var -c ./at_var -w",
        "its expected output includes what its kernel probe (`kernel.function(\"do_utimes\")`) prints",
    ),
];

/// Whether this system's C library carries SDT markers (a
/// `.note.stapsdt` section).
fn libc_has_markers() -> bool {
    ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .any(|b| b.windows(b".note.stapsdt".len()).any(|w| w == b".note.stapsdt"))
}

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

/// A directory removed when dropped.
struct BuildDir(PathBuf);

impl Drop for BuildDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Build the programs a case's `.exp` compiles, with gcc, in a fresh
/// directory.
fn build(case: &Case) -> Result<BuildDir, String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "stap-conformance-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).map_err(|e| format!("cannot make {}: {e}", d.display()))?;
    let d = BuildDir(d);
    for b in &case.builds {
        let here = d.0.display().to_string();
        let flags: Vec<String> = b.flags.iter().map(|f| f.replace(PWD, &here)).collect();
        // `SRC` may name several files (`"$a.c $b.c"`).
        let o = Command::new("gcc")
            .args(b.src.to_string_lossy().split_whitespace())
            .arg("-o")
            .arg(d.0.join(b.out.replace(PWD, &here)))
            .args(&flags)
            .current_dir(&d.0)
            .output()
            .map_err(|e| format!("cannot run gcc: {e}"))?;
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            return Err(format!(
                "building `{}` failed: {}",
                b.out.replace(PWD, "[pwd]"),
                err.lines().next().unwrap_or("")
            ));
        }
    }
    Ok(d)
}

/// Whether the case is in scope; if it is, run it.
pub fn check(case: &Case) -> Outcome {
    if let Some((_, why)) = UPSTREAM_WRONG.iter().find(|(n, _)| *n == case.name) {
        return Outcome::OutOfScope((*why).to_string());
    }
    if let Some(v) = &case.computed {
        return Outcome::OutOfScope(format!(
            "`{v}` in its expected text: computed by the .exp's own Tcl (from a pipe), which this runner does not run"
        ));
    }
    if let Some(a) = case.args.iter().find(|a| a.starts_with("--remote")) {
        return Outcome::OutOfScope(format!("`{a}`: SystemTap's remote execution"));
    }
    if let Some(a) = case.args.iter().find(|a| a.contains('$')) {
        return Outcome::OutOfScope(format!("`{a}`: set by the .exp's own setup, which this runner does not run"));
    }
    if let Some(w) = case.args.windows(2).find(|w| w[0] == "-c").filter(|_| case.builds.is_empty()) {
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
    if text.contains("libc.so") && text.contains(".mark(") && !libc_has_markers() {
        return Outcome::OutOfScope(
            "its probes are the C library's SDT markers, and this system's C library has none (Debian builds glibc \
             without them)"
                .into(),
        );
    }
    if text.contains("task_current()") || text.contains("\"kernel\"") || text.contains("\"kernel<") {
        return Outcome::OutOfScope("the kernel's data structures (`task_current()`, `@cast` to kernel types)".into());
    }
    // Where it runs: beside its .exp, or where its programs were built.
    let built = if case.builds.is_empty() {
        None
    } else {
        match build(case) {
            Ok(d) => Some(d),
            Err(why) => return Outcome::Fail(why),
        }
    };
    let here = built.as_ref().map_or(case.dir.as_path(), |d| d.0.as_path());
    // `[pwd]`: where it runs.
    let args: Vec<String> = case.args.iter().map(|a| a.replace(PWD, &here.display().to_string())).collect();
    // Pass 2 alone: a probe point we do not have is a kernel one.
    let mut p2: Vec<String> = vec!["--last-pass".into(), "2".into()];
    p2.extend(args.iter().cloned());
    let (out, code) = run(here, &p2);
    if code != Some(0) {
        if let Some(l) = out.lines().find(|l| l.contains("is neither built in nor a tapset alias")) {
            let point = l.split('`').nth(1).unwrap_or("?");
            return Outcome::OutOfScope(format!("probe point `{point}` (kernel)"));
        }
        if out.contains("`@const` is not supported") {
            return Outcome::OutOfScope("`@const`: a C macro of SystemTap's kernel-side runtime".into());
        }
    }
    let (mut got, _) = run(here, &args);
    if got.ends_with('\n') {
        got.pop();
    }
    let outcome = compare(&case.expected, &got);
    // A variable the compiler left without a place: nothing can read it.
    if let (Outcome::Fail(_), Some(d)) = (&outcome, &built) {
        for l in got.lines() {
            let Some(name) = l.split("target variable `$").nth(1).and_then(|r| r.split('`').next()) else { continue };
            if !l.contains("is not accessible at this address") {
                continue;
            }
            // The program the case runs (`-c ./prog`).
            let runs = |b: &&Build| {
                case.args.iter().any(|a| a.split_whitespace().any(|w| w.trim_start_matches("./") == b.out))
            };
            if let Some(prog) = case.builds.iter().filter(runs).map(|b| d.0.join(&b.out)).find(|p| !has_place(p, name))
            {
                return Outcome::OutOfScope(format!(
                    "this gcc gives `{name}` neither a location nor a constant value in `{}`'s DWARF: no tracer can read it",
                    prog.file_name().unwrap_or_default().to_string_lossy()
                ));
            }
        }
    }
    outcome
}

/// Whether any DIE named `name` in `prog`'s DWARF, or any DIE whose
/// abstract origin is one, has a location or a constant value (readelf's
/// dump: ` <2><11d>: Abbrev Number: ...` starts a DIE).
fn has_place(prog: &Path, name: &str) -> bool {
    let Ok(o) = Command::new("readelf").arg("--debug-dump=info").arg(prog).output() else { return true };
    let text = String::from_utf8_lossy(&o.stdout);
    // Each DIE: its offset, name, abstract origin, and whether it has a place.
    let mut dies: Vec<(String, bool, Option<String>, bool)> = Vec::new();
    for l in text.lines() {
        let t = l.trim_start();
        if t.starts_with('<') && t.contains("Abbrev Number") {
            let off = t.split('>').nth(1).map(|s| s.trim_start_matches('<').to_string()).unwrap_or_default();
            dies.push((off, false, None, false));
        } else if let Some(d) = dies.last_mut() {
            if l.contains("DW_AT_name") && l.trim_end().ends_with(&format!(": {name}")) {
                d.1 = true;
            } else if l.contains("DW_AT_abstract_origin") {
                d.2 = l.rsplit("<0x").next().map(|s| s.trim_end_matches('>').to_string());
            } else if l.contains("DW_AT_location") || l.contains("DW_AT_const_value") {
                d.3 = true;
            }
        }
    }
    let named: Vec<&str> = dies.iter().filter(|d| d.1).map(|d| d.0.as_str()).collect();
    dies.iter().any(|d| d.3 && (d.1 || d.2.as_deref().is_some_and(|o| named.contains(&o))))
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

    /// Programs the .exp builds (its flags variables followed, `[pwd]`
    /// kept for the build directory), and the case's arguments with the
    /// .exp's variables: the case runs where they are built.
    #[test]
    fn programs_the_exp_builds() {
        let exp = r#"set test "sv"
set testpath "$srcdir/$subdir"
set sopath "lib$test.so"
set exepath "$test"
set libflags [sdt_includes]
set libflags "$libflags additional_flags=-shared"
set libflags "$libflags additional_flags=-fPIC"
set res [target_compile $testpath/$test.c $sopath executable $libflags]
set exeflags [sdt_includes]
set exeflags "$exeflags additional_flags=-l$test"
set exeflags "$exeflags additional_flags=-Wl,-rpath,[pwd]"
set res [target_compile $testpath/$test.c $exepath executable $exeflags]
set ::result_string {x}
stap_run2 $testpath/$test.stp $exepath $sopath -c "./$exepath"
"#;
        let cs = cases("systemtap.base", Path::new("/s/systemtap.base/sv.exp"), exp);
        assert_eq!(cs.len(), 1, "{cs:?}");
        let c = &cs[0];
        assert_eq!(c.args, ["/s/systemtap.base/sv.stp", "sv", "libsv.so", "-c", "./sv"]);
        assert_eq!(
            c.builds,
            [
                Build {
                    src: "/s/systemtap.base/sv.c".into(),
                    out: "libsv.so".into(),
                    flags: vec!["-shared".into(), "-fPIC".into()]
                },
                Build {
                    src: "/s/systemtap.base/sv.c".into(),
                    out: "sv".into(),
                    flags: vec!["-lsv".into(), format!("-Wl,-rpath,{PWD}")]
                },
            ]
        );
        assert_eq!(c.name, "systemtap.base/sv sv libsv.so -c ./sv");
    }

    #[test]
    fn stap_run3_cases_and_joined_result_strings_are_read() {
        let exp = "set test \"t\"\nset result_string1 {a\nb}\nset result_string2 {c}\n\
                   set ::result_string \"${result_string1}\n${result_string2}\"\n\
                   stap_run3 $test -w \\\n    $srcdir/$subdir/$test.stp -c true\n";
        let cs = cases("systemtap.base", Path::new("/x/t.exp"), exp);
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].args, ["-w", "t.stp", "-c", "true"]);
        assert_eq!(cs[0].expected, "a\nb\nc");
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
