//! The mechanical part of INTERNALS.md's "Where code may live", checked on
//! the source tree: file sizes, import cycles between top-level modules,
//! who calls the OS, who names instruction decoders and ELF, what the
//! compiler may touch, and that INTERNALS.md names only paths that exist.
//!
//! Each rule is a function from a tree's root to its violations, one
//! message each naming the file and line, so that it runs on the workspace
//! and on the small fixture trees below, which show that each rule fails
//! when broken. What a rule cannot check without false positives (x86
//! opcodes written as bytes, a path read through a variable) is left to the
//! text. The sources are read, never run; std only.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// The source trees of the workspace's crates, relative to its root.
const CRATES: &[&str] = &["compiler/src", "runtime/src", "itrc/src", "abi/src", "src"];

type Rule = fn(&Path) -> Vec<String>;

/// Every rule, by the name its failures are reported under.
const RULES: &[(&str, Rule)] = &[
    ("file sizes", file_sizes),
    ("import cycles between top-level modules", module_cycles),
    ("the OS only in runtime/src/os/", os_calls),
    ("instruction decoders only in the architecture layers", decoders),
    ("the runtime parses no ELF", runtime_elf),
    ("the compiler never touches a process", compiler_processes),
    ("INTERNALS.md names paths that exist", internals_paths),
];

// ---------------------------------------------------------------------------
// Reading the tree

/// Every `.rs` file under `root/dir`, as (path relative to root with `/`,
/// text), sorted by path. A missing directory has none.
fn rust_files(root: &Path, dir: &str) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
                out.push((rel, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &root.join(dir), &mut out);
    out.sort();
    out
}

/// Every `.rs` file of every crate.
fn all_sources(root: &Path) -> Vec<(String, String)> {
    CRATES.iter().flat_map(|c| rust_files(root, c)).collect()
}

/// Violations in file order, then line order (`path:line: …`).
fn in_order(mut v: Vec<String>) -> Vec<String> {
    let key = |m: &String| {
        let mut parts = m.splitn(3, ':');
        let path = parts.next().unwrap_or("").to_string();
        let line = parts.next().and_then(|l| l.parse::<usize>().ok()).unwrap_or(0);
        (path, line)
    };
    v.sort_by_key(key);
    v
}

// ---------------------------------------------------------------------------
// A lexer good enough for paths: scripts/module-cycles.py's, ported as it is

/// A source text with its comments and string and char literals blanked
/// (newlines kept, so lines still count), and the string literals' contents
/// with their lines.
struct Lexed {
    code: Vec<char>,
    strings: Vec<(usize, String)>,
}

fn starts(c: &[char], i: usize, s: &str) -> bool {
    s.chars().enumerate().all(|(k, ch)| c.get(i + k) == Some(&ch))
}

fn find(c: &[char], from: usize, s: &str) -> Option<usize> {
    (from..c.len()).find(|&j| starts(c, j, s))
}

fn is_word(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// `strip` of scripts/module-cycles.py, which also keeps the strings.
fn lex(text: &str) -> Lexed {
    let c: Vec<char> = text.chars().collect();
    let n = c.len();
    let mut out: Vec<char> = Vec::with_capacity(n);
    let mut strings = Vec::new();
    let mut line = 1;
    let blank = |s: &[char], out: &mut Vec<char>, line: &mut usize| {
        for &ch in s {
            if ch == '\n' {
                *line += 1;
            }
            out.push(if ch == '\n' { '\n' } else { ' ' });
        }
    };
    let mut i = 0;
    while i < n {
        let ch = c[i];
        if starts(&c, i, "//") {
            let j = find(&c, i, "\n").unwrap_or(n);
            blank(&c[i..j], &mut out, &mut line);
            i = j;
        } else if starts(&c, i, "/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < n && depth > 0 {
                if starts(&c, j, "/*") {
                    depth += 1;
                    j += 2;
                } else if starts(&c, j, "*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&c[i..j], &mut out, &mut line);
            i = j;
        } else if let Some((hashes, open_end)) = raw_string_open(&c, i) {
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let (body_end, j) = match find(&c, open_end, &close) {
                Some(j) => (j, j + close.chars().count()),
                None => (n, n),
            };
            strings.push((line, c[open_end..body_end].iter().collect()));
            blank(&c[i..j], &mut out, &mut line);
            i = j;
        } else if ch == '"' {
            let mut j = i + 1;
            while j < n && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            strings.push((line, c[i + 1..j.min(n)].iter().collect()));
            blank(&c[i..(j + 1).min(n)], &mut out, &mut line);
            i = j + 1;
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if i + 1 < n && c[i + 1] == '\\' {
                let j = find(&c, i + 3, "'").unwrap_or(n);
                blank(&c[i..(j + 1).min(n)], &mut out, &mut line);
                i = j + 1;
            } else if i + 2 < n && c[i + 2] == '\'' {
                out.extend("   ".chars());
                i += 3;
            } else {
                out.push(ch);
                i += 1;
            }
        } else {
            if ch == '\n' {
                line += 1;
            }
            out.push(ch);
            i += 1;
        }
    }
    Lexed { code: out, strings }
}

/// At `r"`, `r#"`, `br##"`… (not inside a word): the number of `#`s and
/// the index after the opening quote.
fn raw_string_open(c: &[char], i: usize) -> Option<(usize, usize)> {
    if !(c[i] == 'r' || c[i] == 'b') || (i > 0 && is_word(c[i - 1])) {
        return None;
    }
    let mut p = if c[i] == 'b' { i + 1 } else { i };
    if c.get(p) != Some(&'r') {
        return None;
    }
    p += 1;
    let hashes = c[p..].iter().take_while(|&&h| h == '#').count();
    // module-cycles.py looks for the quote within 260 characters.
    if p + hashes - i >= 260 || c.get(p + hashes) != Some(&'"') {
        return None;
    }
    Some((hashes, p + hashes + 1))
}

#[derive(Clone, Debug)]
struct Tok {
    id: bool,
    val: String,
    line: usize,
}

/// Identifiers, `::` and single punctuation, with their lines (`tokens`
/// of module-cycles.py; numbers are skipped).
fn tokens(code: &[char]) -> Vec<Tok> {
    let mut toks = Vec::new();
    let (mut i, n, mut line) = (0, code.len(), 1);
    while i < n {
        let c = code[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let j = (i..n).find(|&j| !(code[j].is_ascii_alphanumeric() || code[j] == '_')).unwrap_or(n);
            toks.push(Tok { id: true, val: code[i..j].iter().collect(), line });
            i = j;
        } else if c.is_ascii_digit() {
            i = (i..n).find(|&j| !(code[j].is_ascii_alphanumeric() || code[j] == '_' || code[j] == '.')).unwrap_or(n);
        } else if starts(code, i, "::") {
            toks.push(Tok { id: false, val: "::".into(), line });
            i += 2;
        } else {
            toks.push(Tok { id: false, val: c.to_string(), line });
            i += 1;
        }
    }
    toks
}

fn tok_is(toks: &[Tok], k: usize, val: &str) -> bool {
    toks.get(k).is_some_and(|t| t.val == val)
}

/// Whether token `k` starts a path (`a::…`) rather than continuing one
/// (`x::a::…`): `::a` at the start counts, as in `::libc::kill`.
fn path_starts(toks: &[Tok], k: usize) -> bool {
    k == 0 || toks[k - 1].val != "::" || (k >= 2 && !toks[k - 2].id && toks[k - 2].val != ">")
}

/// Every full path written from token `k` on (its first segment), with the
/// line of its last segment: `a::b::c`, and one per leaf of a use group,
/// `a::{b, c::{self, d as e}}` giving `a::b`, `a::c::self`, `a::c::d`.
fn paths_at(toks: &[Tok], k: usize) -> Vec<(Vec<String>, usize)> {
    fn tree(toks: &[Tok], mut j: usize, mut path: Vec<String>, out: &mut Vec<(Vec<String>, usize)>) -> usize {
        while let Some(t) = toks.get(j) {
            if t.val == "{" {
                return group(toks, j, path, out);
            }
            if !t.id && t.val != "*" {
                break;
            }
            path.push(t.val.clone());
            let line = t.line;
            j += 1;
            if tok_is(toks, j, "::") {
                j += 1;
            } else {
                out.push((path, line));
                return j;
            }
        }
        if !path.is_empty() {
            let line = toks.get(j.saturating_sub(1)).map_or(0, |t| t.line);
            out.push((path, line));
        }
        j
    }
    fn group(toks: &[Tok], mut j: usize, path: Vec<String>, out: &mut Vec<(Vec<String>, usize)>) -> usize {
        j += 1;
        while j < toks.len() {
            if tok_is(toks, j, "}") {
                return j + 1;
            }
            j = tree(toks, j, path.clone(), out);
            if tok_is(toks, j, "as") {
                j += 2;
            }
            if tok_is(toks, j, ",") {
                j += 1;
            } else if tok_is(toks, j, "}") {
                return j + 1;
            } else {
                return j;
            }
        }
        j
    }
    let mut out = Vec::new();
    tree(toks, k, Vec::new(), &mut out);
    out
}

/// For each token, whether it is inside a `#[cfg(test)] mod … { … }`.
fn in_test_module(toks: &[Tok]) -> Vec<bool> {
    let mut inside = vec![false; toks.len()];
    let cfg_test = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut k = 0;
    while k < toks.len() {
        if !cfg_test.iter().enumerate().all(|(d, v)| tok_is(toks, k + d, v)) {
            k += 1;
            continue;
        }
        // Further attributes, then `pub`… `mod NAME {`.
        let mut j = k + cfg_test.len();
        while tok_is(toks, j, "#") {
            let mut depth = 0;
            j += 1;
            while j < toks.len() {
                match toks[j].val.as_str() {
                    "[" => depth += 1,
                    "]" => depth -= 1,
                    _ => {}
                }
                j += 1;
                if depth == 0 {
                    break;
                }
            }
        }
        while j < toks.len() && toks[j].val != "mod" && toks[j].val != "{" && toks[j].val != ";" {
            j += 1;
        }
        if !(tok_is(toks, j, "mod") && tok_is(toks, j + 2, "{")) {
            k += 1;
            continue;
        }
        let open = j + 2;
        let mut depth = 0;
        let mut end = open;
        while end < toks.len() {
            match toks[end].val.as_str() {
                "{" => depth += 1,
                "}" => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                break;
            }
            end += 1;
        }
        for flag in &mut inside[k..=end.min(toks.len() - 1)] {
            *flag = true;
        }
        k = end + 1;
    }
    inside
}

// ---------------------------------------------------------------------------
// Rule 1: file sizes

/// No runtime file outside `runtime/src/arch/` over 1,000 lines (the
/// architecture layers hold long tables of encodings), and `src/main.rs`,
/// the driver, under 400.
fn file_sizes(root: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for (path, text) in rust_files(root, "runtime/src") {
        let lines = text.lines().count();
        if !path.starts_with("runtime/src/arch/") && lines > 1000 {
            v.push(format!(
                "{path}:{lines}: {lines} lines; a runtime file outside runtime/src/arch/ has at most 1,000 (split it by concern)"
            ));
        }
    }
    if let Ok(text) = fs::read_to_string(root.join("src/main.rs")) {
        let lines = text.lines().count();
        if lines >= 400 {
            v.push(format!("src/main.rs:{lines}: {lines} lines; the driver stays under 400"));
        }
    }
    v
}

// ---------------------------------------------------------------------------
// Rule 2: import cycles (scripts/module-cycles.py, ported)

/// `mod NAME;` at the top of a crate root, and its re-exports: `pub use
/// m::Item;`, `pub use m::{A, B as C};` make `crate::Item` mean module m.
fn root_decls(text: &str) -> (Vec<String>, Vec<(String, String)>) {
    let code = lex(text).code;
    let toks = tokens(&code);
    let mut mods = Vec::new();
    let mut depth = 0i64;
    for (k, t) in toks.iter().enumerate() {
        match t.val.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "mod" if depth == 0 && k + 2 < toks.len() && toks[k + 1].id && toks[k + 2].val == ";" => {
                mods.push(toks[k + 1].val.clone())
            }
            _ => {}
        }
    }
    let mut reexports = Vec::new();
    let mut i = 0;
    while i < code.len() {
        match pub_use_at(&code, i) {
            Some((module, rest, end)) => {
                for name in group_names(&rest) {
                    reexports.push((name, module.clone()));
                }
                i = end;
            }
            None => i += 1,
        }
    }
    (mods, reexports)
}

/// The regex `\bpub(\([^)]*\))?\s+use\s+(?:crate::|self::)?([A-Za-z_]\w*)::([^;]*);`
/// matched at `i`: (module, rest, end of the match).
fn pub_use_at(c: &[char], i: usize) -> Option<(String, String, usize)> {
    if !starts(c, i, "pub") || (i > 0 && is_word(c[i - 1])) {
        return None;
    }
    let mut p = i + 3;
    if c.get(p) == Some(&'(') {
        // `[^)]*\)`; without its `)` the group is skipped, and `(` is no space.
        match (p + 1..c.len()).find(|&j| c[j] == ')') {
            Some(j) => p = j + 1,
            None => return None,
        }
    }
    let spaces = |mut p: usize| {
        let from = p;
        while p < c.len() && c[p].is_whitespace() {
            p += 1;
        }
        (p > from).then_some(p)
    };
    p = spaces(p)?;
    if !starts(c, p, "use") {
        return None;
    }
    p = spaces(p + 3)?;
    // `([A-Za-z_]\w*)::([^;]*);` at `q`.
    let module_at = |q: usize| -> Option<(String, String, usize)> {
        if !c.get(q).is_some_and(|ch| ch.is_ascii_alphabetic() || *ch == '_') {
            return None;
        }
        let e = (q..c.len()).find(|&j| !is_word(c[j])).unwrap_or(c.len());
        if !starts(c, e, "::") {
            return None;
        }
        let semi = (e + 2..c.len()).find(|&j| c[j] == ';')?;
        Some((c[q..e].iter().collect(), c[e + 2..semi].iter().collect(), semi + 1))
    };
    for prefix in ["crate::", "self::"] {
        if starts(c, p, prefix) {
            if let Some(m) = module_at(p + prefix.len()) {
                return Some(m);
            }
        }
    }
    module_at(p)
}

/// The names a `pub use` brings in: identifiers followed by `,`, `}` or the
/// end, and every `as NAME`.
fn group_names(rest: &str) -> Vec<String> {
    let c: Vec<char> = rest.chars().map(|ch| if ch == '\n' { ' ' } else { ch }).collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_ascii_alphabetic() || c[i] == '_' {
            let e = (i..c.len()).find(|&j| !is_word(c[j])).unwrap_or(c.len());
            let mut a = e;
            while a < c.len() && c[a].is_whitespace() {
                a += 1;
            }
            if a == c.len() || c[a] == ',' || c[a] == '}' {
                names.push(c[i..e].iter().collect());
                i = (a + 1).min(c.len()).max(e);
                continue;
            }
        }
        i += 1;
    }
    let mut i = 0;
    while i + 2 < c.len() {
        if starts(&c, i, "as") && (i == 0 || !is_word(c[i - 1])) && c[i + 2].is_whitespace() {
            let mut q = i + 2;
            while q < c.len() && c[q].is_whitespace() {
                q += 1;
            }
            if c.get(q).is_some_and(|ch| ch.is_ascii_alphabetic() || *ch == '_') {
                let e = (q..c.len()).find(|&j| !is_word(c[j])).unwrap_or(c.len());
                names.push(c[q..e].iter().collect());
                i = e;
                continue;
            }
        }
        i += 1;
    }
    names
}

/// Every source file of top-level module `name` under `src`, with its
/// module path, and the lalrpop grammars its `lalrpop_mod!`s include.
fn module_files(src: &Path, name: &str) -> Vec<(PathBuf, Vec<String>)> {
    fn walk(src: &Path, dir: &Path, files: &mut Vec<(PathBuf, Vec<String>)>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        let rel: Vec<String> =
            dir.strip_prefix(src).unwrap().components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        for p in paths.iter().filter(|p| p.is_file()) {
            let fname = p.file_name().unwrap().to_string_lossy();
            let Some(stem) = fname.strip_suffix(".rs") else { continue };
            let mut mpath = rel.clone();
            if stem != "mod" {
                mpath.push(stem.to_string());
            }
            files.push((p.clone(), mpath));
        }
        for p in paths.iter().filter(|p| p.is_dir()) {
            walk(src, p, files);
        }
    }
    let mut files = Vec::new();
    let flat = src.join(format!("{name}.rs"));
    if flat.is_file() {
        files.push((flat, vec![name.to_string()]));
    }
    walk(src, &src.join(name), &mut files);
    for (p, mpath) in files.clone() {
        let code = lex(&fs::read_to_string(&p).unwrap_or_default()).code;
        let mut i = 0;
        while let Some(at) = find(&code, i, "lalrpop_mod!") {
            i = at + 1;
            let mut q = at + "lalrpop_mod!".len();
            while q < code.len() && code[q].is_whitespace() {
                q += 1;
            }
            if code.get(q) != Some(&'(') {
                continue;
            }
            // The arguments, to the matching `)`.
            let mut depth = 0;
            let mut end = q;
            while end < code.len() {
                match code[end] {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ';' => break,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                end += 1;
            }
            if code.get(end) != Some(&')') {
                continue;
            }
            let words = identifiers(&without_attributes(&code[q + 1..end]));
            if let Some(last) = words.last() {
                let g = p.parent().unwrap().join(format!("{last}.lalrpop"));
                if g.is_file() {
                    let mut gpath = mpath.clone();
                    gpath.push(last.clone());
                    files.push((g, gpath));
                }
            }
        }
    }
    files
}

/// `#[…]` (to its first `]`) replaced by a space.
fn without_attributes(c: &[char]) -> Vec<char> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if starts(c, i, "#[") {
            if let Some(j) = (i + 2..c.len()).find(|&j| c[j] == ']') {
                out.push(' ');
                i = j + 1;
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

fn identifiers(c: &[char]) -> Vec<String> {
    let mut words = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_ascii_alphabetic() || c[i] == '_' {
            let e = (i..c.len()).find(|&j| !(c[j].is_ascii_alphanumeric() || c[j] == '_')).unwrap_or(c.len());
            words.push(c[i..e].iter().collect());
            i = e;
        } else {
            i += 1;
        }
    }
    words
}

/// (root segment, line) for every path in a file that starts at the crate
/// root: the segment after `crate::` (or after enough `super::`s), one per
/// item of a `{..}` group.
fn references(text: &str, mpath: &[String]) -> Vec<(String, usize)> {
    let toks = tokens(&lex(text).code);
    let mut found = Vec::new();
    let mut inline: Vec<(String, i64)> = Vec::new();
    let mut depth = 0i64;
    let mut k = 0;
    while k < toks.len() {
        let t = &toks[k];
        if t.val == "{" {
            depth += 1;
        } else if t.val == "}" {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth -= 1;
        } else if t.val == "mod" && k + 2 < toks.len() && toks[k + 1].id && toks[k + 2].val == "{" {
            inline.push((toks[k + 1].val.clone(), depth + 1));
            depth += 1;
            k += 3;
            continue;
        }
        let here: Vec<&str> = mpath.iter().map(|s| s.as_str()).chain(inline.iter().map(|(n, _)| n.as_str())).collect();
        let starts_path = k == 0 || toks[k - 1].val != "::";
        let val = t.val.as_str();
        if t.id && matches!(val, "crate" | "super" | "self") && starts_path && tok_is(&toks, k + 1, "::") {
            let mut prefix: &[&str] = match val {
                "crate" => &[],
                "super" => &here[..here.len().saturating_sub(1)],
                _ => &here,
            };
            let mut j = k + 2;
            while val != "crate" && j + 1 < toks.len() && toks[j].val == "super" && toks[j + 1].val == "::" {
                prefix = &prefix[..prefix.len().saturating_sub(1)];
                j += 2;
            }
            if prefix.is_empty() && j < toks.len() {
                if toks[j].id {
                    found.push((toks[j].val.clone(), toks[j].line));
                } else if toks[j].val == "{" {
                    let (mut d, mut first) = (0, true);
                    while j < toks.len() {
                        let v = toks[j].val.as_str();
                        if v == "{" {
                            d += 1;
                            first = d == 1;
                        } else if v == "}" {
                            d -= 1;
                            if d == 0 {
                                break;
                            }
                        } else if v == "," && d == 1 {
                            first = true;
                        } else if first && d == 1 && toks[j].id {
                            found.push((v.to_string(), toks[j].line));
                            first = false;
                        }
                        j += 1;
                    }
                }
            }
        }
        k += 1;
    }
    found
}

type Edges = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn tarjan(nodes: &[String], edges: &Edges) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a Edges,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        out: Vec<Vec<String>>,
    }
    fn visit(s: &mut State, v: &str) {
        let n = s.index.len();
        s.index.insert(v.into(), n);
        s.low.insert(v.into(), n);
        s.stack.push(v.into());
        s.on.insert(v.into());
        let next: Vec<String> = s.edges.get(v).map(|e| e.keys().cloned().collect()).unwrap_or_default();
        for w in next {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let l = s.low[v].min(s.low[&w]);
                s.low.insert(v.into(), l);
            } else if s.on.contains(&w) {
                let l = s.low[v].min(s.index[&w]);
                s.low.insert(v.into(), l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    let mut sorted = nodes.to_vec();
    sorted.sort();
    for v in &sorted {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The elementary cycles inside one component, each from its smallest
/// member, shortest first (at most `limit`).
fn cycles_in(comp: &[String], edges: &Edges, limit: usize) -> Vec<Vec<String>> {
    let mut members = comp.to_vec();
    members.sort();
    let mut found: Vec<Vec<String>> = Vec::new();
    for (i, start) in members.iter().enumerate() {
        let allowed = &members[i..];
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while found.len() < limit * 4 {
            let Some((v, path)) = stack.pop() else { break };
            let next: Vec<&String> = edges.get(&v).map(|e| e.keys().rev().collect()).unwrap_or_default();
            for w in next {
                if w == start {
                    let mut c = path.clone();
                    c.push(start.clone());
                    found.push(c);
                } else if allowed.contains(w) && !path.contains(w) {
                    let mut p = path.clone();
                    p.push(w.clone());
                    stack.push((w.clone(), p));
                }
            }
        }
    }
    found.sort_by(|a, b| (a.len(), a).cmp(&(b.len(), b)));
    found.truncate(limit);
    found
}

/// The top-level modules of crate `src_rel` (relative to `root`) and the
/// edges between them, each with the `file:line`s (relative to the crate's
/// source folder) that make it.
fn crate_edges(root: &Path, src_rel: &str) -> (Vec<String>, Edges) {
    let src = root.join(src_rel);
    let mut mods: Vec<String> = Vec::new();
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for crate_root in ["lib.rs", "main.rs"] {
        let Ok(text) = fs::read_to_string(src.join(crate_root)) else { continue };
        let (m, r) = root_decls(&text);
        for x in m {
            if !mods.contains(&x) {
                mods.push(x);
            }
        }
        for (item, module) in r {
            reexports.entry(item).or_insert(module);
        }
    }
    reexports.retain(|_, m| mods.contains(m));

    let mut edges: Edges = mods.iter().map(|m| (m.clone(), BTreeMap::new())).collect();
    for m in &mods {
        for (path, mpath) in module_files(&src, m) {
            let text = fs::read_to_string(&path).unwrap_or_default();
            for (seg, line) in references(&text, &mpath) {
                let to = if mods.contains(&seg) { Some(&seg) } else { reexports.get(&seg) };
                if let Some(to) = to.filter(|to| *to != m) {
                    let rel = path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
                    edges.get_mut(m).unwrap().entry(to.clone()).or_default().push(format!("{rel}:{line}"));
                }
            }
        }
    }
    (mods, edges)
}

/// module-cycles.py's report for crate `src_rel`, or None when its
/// top-level modules import each other in no cycle.
fn crate_cycles(root: &Path, src_rel: &str) -> Option<String> {
    let (mods, edges) = crate_edges(root, src_rel);
    let mut comps: Vec<Vec<String>> = tarjan(&mods, &edges).into_iter().filter(|c| c.len() > 1).collect();
    if comps.is_empty() {
        return None;
    }
    comps.sort();
    let mut out = format!("{src_rel}: {} group(s) of top-level modules import each other:\n", comps.len());
    for comp in &comps {
        out.push('\n');
        for cycle in cycles_in(comp, &edges, 50) {
            writeln!(out, "  cycle: {}", cycle.join(" -> ")).unwrap();
        }
        for a in comp {
            for (b, uses) in &edges[a] {
                if comp.contains(b) {
                    let more = if uses.len() > 3 { format!(" (+{} more)", uses.len() - 3) } else { String::new() };
                    writeln!(out, "    {a} -> {b}: {}{more}", uses[..uses.len().min(3)].join(", ")).unwrap();
                }
            }
        }
    }
    Some(out)
}

/// No import cycles between the top-level modules of any crate: a file of
/// module A names B through `crate::B`, a `use crate::{B, ..}` group, a
/// `super::` that climbs to the crate root, or an item the root re-exports.
/// scripts/module-cycles.py prints the same report (and `--graph`).
fn module_cycles(root: &Path) -> Vec<String> {
    CRATES.iter().filter_map(|c| crate_cycles(root, c)).collect()
}

// ---------------------------------------------------------------------------
// Rule 3: the OS

/// The libc functions that act on processes, memory and signals.
const LIBC_OS: &str = "ptrace waitpid waitid wait4 kill tgkill tkill pidfd_open pidfd_send_signal \
    mmap mmap64 munmap mprotect mremap memfd_create process_vm_readv process_vm_writev \
    sigaction signal sigprocmask pthread_sigmask fork vfork clone execv execve execvp execvpe syscall";

/// The nix modules and functions that act on processes, memory and signals.
const NIX_OS: &[&[&str]] = &[
    &["nix", "sys", "ptrace"],
    &["nix", "sys", "wait"],
    &["nix", "sys", "signal"],
    &["nix", "sys", "mman"],
    &["nix", "sys", "memfd"],
    &["nix", "sys", "uio"],
    &["nix", "unistd", "fork"],
    &["nix", "unistd", "execv"],
    &["nix", "unistd", "execve"],
    &["nix", "unistd", "execvp"],
    &["nix", "unistd", "execvpe"],
];

/// Paths into `crate_name` (`libc`, `nix`) written in a file, outside
/// comments and strings.
fn paths_into(toks: &[Tok], crate_name: &str) -> Vec<(Vec<String>, usize)> {
    let mut v = Vec::new();
    for k in 0..toks.len() {
        if toks[k].id && toks[k].val == crate_name && tok_is(toks, k + 1, "::") && path_starts(toks, k) {
            v.extend(paths_at(toks, k));
        }
    }
    v
}

/// A string naming a process's `/proc` directory: `/proc/{pid}/…`,
/// `/proc/1/…` (the tracer's own `/proc/self`, `/proc/sys` are not).
fn names_a_process_proc(s: &str) -> bool {
    s.strip_prefix("/proc/").is_some_and(|r| r.starts_with('{') || r.starts_with(|c: char| c.is_ascii_digit()))
}

/// Only `runtime/src/os/` calls the kernel about processes, memory and
/// signals (libc's and nix's calls for ptrace, waits, kill, mappings and
/// memfds, signal dispositions, fork and exec, raw system calls) and reads
/// a process's `/proc` (in the runtime, any `/proc` path). Constants
/// (`libc::SIGTRAP`, `libc::SYS_mmap` for an injected call) and the
/// tracer's other calls (`geteuid`, `dup`, clocks) are anyone's.
fn os_calls(root: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for (path, text) in all_sources(root) {
        if path.starts_with("runtime/src/os/") {
            continue;
        }
        let lexed = lex(&text);
        let toks = tokens(&lexed.code);
        for (p, line) in paths_into(&toks, "libc") {
            if p.len() >= 2 && LIBC_OS.split_whitespace().any(|f| f == p[1]) {
                v.push(format!(
                    "{path}:{line}: `{}`: calls about processes, memory and signals belong to runtime/src/os/",
                    p.join("::")
                ));
            }
        }
        for (p, line) in paths_into(&toks, "nix") {
            if NIX_OS
                .iter()
                .any(|pre| p.len() >= pre.len() && p[..pre.len()].iter().zip(pre.iter()).all(|(a, b)| a == b))
            {
                v.push(format!(
                    "{path}:{line}: `{}`: calls about processes, memory and signals belong to runtime/src/os/",
                    p.join("::")
                ));
            }
        }
        let runtime = path.starts_with("runtime/src/");
        for (line, s) in &lexed.strings {
            if names_a_process_proc(s) || (runtime && s.starts_with("/proc/")) {
                v.push(format!("{path}:{line}: \"{s}\": reads of /proc belong to runtime/src/os/ (os::proc)"));
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// Rule 4: instruction decoders and ELF

/// Where instruction encoders and decoders may be named: the architecture
/// layers, and ITRC's per-architecture block analysis (a file format).
fn may_decode(path: &str) -> bool {
    ["compiler/src/arch/", "runtime/src/arch/", "abi/src/arch/"].iter().any(|d| path.starts_with(d))
        || path == "itrc/src/x64.rs"
        || path == "itrc/src/a64.rs"
}

/// `iced_x86` and `yaxpeax_*` only in the architecture layers (and
/// `itrc/src/x64.rs`, `itrc/src/a64.rs`); unit tests (a `#[cfg(test)]`
/// module, or a module file `tests.rs`) may assemble their inputs anywhere.
fn decoders(root: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for (path, text) in all_sources(root) {
        if may_decode(&path) || path.ends_with("/tests.rs") {
            continue;
        }
        let toks = tokens(&lex(&text).code);
        let tests = in_test_module(&toks);
        let mut lines = BTreeSet::new();
        for (k, t) in toks.iter().enumerate() {
            if t.id && (t.val == "iced_x86" || t.val.starts_with("yaxpeax")) && !tests[k] && lines.insert(t.line) {
                v.push(format!(
                    "{path}:{}: `{}`: instruction encodings are the architecture layers' (*/src/arch/)",
                    t.line, t.val
                ));
            }
        }
    }
    v
}

/// The runtime parses no ELF: no `goblin` under `runtime/src/` (symbols come
/// through the driver's `SymbolSource`, files through the compiler's `elf`).
fn runtime_elf(root: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for (path, text) in rust_files(root, "runtime/src") {
        let toks = tokens(&lex(&text).code);
        let mut lines = BTreeSet::new();
        for t in toks.iter().filter(|t| t.id && t.val == "goblin") {
            if lines.insert(t.line) {
                v.push(format!("{path}:{}: `goblin`: the runtime parses no ELF (ask the SymbolSource)", t.line));
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// Rule 5: the compiler

/// `compiler/` never touches a live process (invariant 4): it does not
/// depend on `telco-runtime` or `nix`, names neither, and reads no
/// process's `/proc` (facts about processes come through `TargetQuery`).
/// Reading the tracer's own `/proc/self` or `/proc/sys` is not touching a
/// process.
fn compiler_processes(root: &Path) -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(text) = fs::read_to_string(root.join("compiler/Cargo.toml")) {
        let mut deps = false;
        for (n, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.starts_with('[') {
                deps = l.trim_matches(|c| c == '[' || c == ']').ends_with("dependencies")
                    && !l.contains("dev-dependencies");
            } else if deps {
                let key = l.split(|c: char| c == '=' || c == '.' || c.is_whitespace()).next().unwrap_or("");
                if key == "telco-runtime" || key == "nix" {
                    v.push(format!("compiler/Cargo.toml:{}: `{key}`: the compiler never touches a process", n + 1));
                }
            }
        }
    }
    for (path, text) in rust_files(root, "compiler/src") {
        let lexed = lex(&text);
        let toks = tokens(&lexed.code);
        let mut lines = BTreeSet::new();
        for (k, t) in toks.iter().enumerate() {
            let named = t.id
                && (t.val == "telco_runtime"
                    || (t.val == "nix" && tok_is(&toks, k + 1, "::") && path_starts(&toks, k)));
            if named && lines.insert(t.line) {
                v.push(format!(
                    "{path}:{}: `{}`: the compiler never touches a process (ask TargetQuery)",
                    t.line, t.val
                ));
            }
        }
        for (line, s) in &lexed.strings {
            if names_a_process_proc(s) {
                v.push(format!("{path}:{line}: \"{s}\": the compiler reads no process's /proc (ask TargetQuery)"));
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// Rule 6: the map names what exists

/// Whether a backquoted span of INTERNALS.md is a path in the repository:
/// relative, with a `/`, made of path characters (`runtime/src/place/`,
/// `compiler/rt/rt.c`).
fn looks_like_repo_path(s: &str) -> bool {
    s.contains('/')
        && !s.starts_with('/')
        && !s.starts_with('.')
        && s.split('/').enumerate().all(|(i, part)| {
            (part.is_empty() && i == s.split('/').count() - 1)
                || (!part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)))
        })
}

/// Every backquoted path in INTERNALS.md (outside fenced blocks) exists.
fn internals_paths(root: &Path) -> Vec<String> {
    let Ok(text) = fs::read_to_string(root.join("INTERNALS.md")) else {
        return vec!["INTERNALS.md:1: missing".into()];
    };
    let mut v = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            if looks_like_repo_path(span) && !root.join(span).exists() {
                v.push(format!("INTERNALS.md:{}: `{span}` does not exist", n + 1));
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// The workspace

#[test]
fn the_workspace_keeps_where_code_may_live() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = String::new();
    for (name, rule) in RULES {
        let found = in_order(rule(root));
        if !found.is_empty() {
            writeln!(report, "\n{name} ({} found):", found.len()).unwrap();
            for f in found {
                writeln!(report, "  {}", f.trim_end().replace('\n', "\n  ")).unwrap();
            }
        }
    }
    assert!(report.is_empty(), "INTERNALS.md, \"Where code may live\", is broken:\n{report}");
}

/// The rules see the tree: they read every crate (a rule over no files
/// would pass for nothing).
#[test]
fn the_rules_read_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for c in CRATES {
        assert!(!rust_files(root, c).is_empty(), "no sources under {c}");
    }
    let runtime = rust_files(root, "runtime/src");
    assert!(runtime.iter().any(|(p, _)| p.starts_with("runtime/src/os/")), "runtime/src/os/ not found");
    let (mods, _) = root_decls(&fs::read_to_string(root.join("compiler/src/lib.rs")).unwrap());
    assert!(mods.len() > 10, "compiler's top-level modules not found: {mods:?}");
}

// ---------------------------------------------------------------------------
// Fixtures: each rule fails when broken

/// A source tree in a directory of its own under the temporary directory,
/// removed when dropped (the test failing included).
struct Fixture(PathBuf);

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("telco-tidy-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the fixture directory");
        Fixture(dir)
    }

    fn file(&self, path: &str, text: &str) -> &Fixture {
        let p = self.0.join(path);
        fs::create_dir_all(p.parent().unwrap()).expect("create a fixture folder");
        fs::write(&p, text).expect("write a fixture file");
        self
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `found` has exactly one message per `expected` fragment, in order.
fn assert_found(found: &[String], expected: &[&str]) {
    let found = &in_order(found.to_vec())[..];
    assert_eq!(found.len(), expected.len(), "expected {expected:?}, found:\n{}", found.join("\n"));
    for (f, e) in found.iter().zip(expected) {
        assert!(f.contains(e), "expected {e:?} in {f:?}; all:\n{}", found.join("\n"));
    }
}

fn lines(n: usize) -> String {
    (0..n).map(|i| format!("// line {i}\n")).collect()
}

#[test]
fn a_runtime_file_over_1000_lines_is_reported() {
    let fx = Fixture::new("sizes");
    fx.file("runtime/src/big.rs", &lines(1001))
        .file("runtime/src/session/fits.rs", &lines(1000))
        .file("runtime/src/arch/x86_64/encodings.rs", &lines(1500))
        .file("src/main.rs", &lines(399));
    assert_found(&file_sizes(&fx.0), &["runtime/src/big.rs:1001: 1001 lines"]);
    fx.file("src/main.rs", &lines(400));
    assert_found(&file_sizes(&fx.0), &["runtime/src/big.rs:1001:", "src/main.rs:400: 400 lines"]);
}

#[test]
fn a_two_module_cycle_is_reported() {
    let fx = Fixture::new("cycles");
    // runtime: a -> b by a use, b -> a by `super::super::` from a file in b's folder.
    fx.file("runtime/src/lib.rs", "pub mod a;\npub mod b;\nmod c;\npub use c::Thing;\n")
        .file("runtime/src/a.rs", "// crate::b in a comment is nothing\nuse crate::b::X;\n")
        .file("runtime/src/b/mod.rs", "pub mod inner;\npub struct X;\n")
        .file("runtime/src/b/inner.rs", "\n\nfn f() { super::super::a::g(\"crate::c\") }\n")
        .file("runtime/src/c.rs", "use crate::{a, b::X};\npub struct Thing;\n");
    // compiler: x -> y through a group, y -> x through a root re-export, inline.
    fx.file("compiler/src/lib.rs", "pub mod x;\npub mod y;\npub use x::{Inner as Outer};\n")
        .file("compiler/src/x.rs", "use crate::{y::Z, self as _};\npub struct Inner;\n")
        .file("compiler/src/y.rs", "pub struct Z;\nfn f() -> crate::Outer { todo!() }\n");
    // itrc: no cycle.
    fx.file("itrc/src/lib.rs", "mod p;\nmod q;\n").file("itrc/src/p.rs", "use crate::q;\n").file("itrc/src/q.rs", "");
    let found = module_cycles(&fx.0);
    assert_found(&found, &["compiler/src: 1 group(s)", "runtime/src: 1 group(s)"]);
    assert!(found[0].contains("  cycle: x -> y -> x\n"), "{}", found[0]);
    assert!(found[0].contains("    x -> y: x.rs:1\n    y -> x: y.rs:2\n"), "{}", found[0]);
    assert!(found[1].contains("  cycle: a -> b -> a\n"), "{}", found[1]);
    assert!(found[1].contains("    a -> b: a.rs:2\n    b -> a: b/inner.rs:3\n"), "{}", found[1]);
    assert!(!found[1].contains("c ->"), "c is in no cycle: {}", found[1]);
}

#[test]
fn goblin_in_the_runtime_is_reported() {
    let fx = Fixture::new("goblin");
    fx.file(
        "runtime/src/x.rs",
        "// goblin is fine in a comment\nfn f(b: &[u8]) {\n    let _ = goblin::elf::Elf::parse(b);\n}\n",
    )
    .file("compiler/src/elf/load.rs", "use goblin::elf::Elf;\n");
    assert_found(&runtime_elf(&fx.0), &["runtime/src/x.rs:3: `goblin`"]);
}

#[test]
fn a_decoder_outside_arch_is_reported() {
    let fx = Fixture::new("decoders");
    fx.file("runtime/src/place/x.rs", "\nuse iced_x86::Decoder;\n")
        .file("itrc/src/writer.rs", "use yaxpeax_arm::armv8::a64::InstDecoder;\n")
        .file("runtime/src/arch/x86_64/patch.rs", "use iced_x86::Decoder;\n")
        .file("compiler/src/arch/aarch64/hop.rs", "use yaxpeax_arm::armv8::a64::InstDecoder;\n")
        .file("itrc/src/x64.rs", "use iced_x86::Decoder;\n")
        .file("itrc/src/a64.rs", "use yaxpeax_arch::Decoder;\n")
        .file("itrc/src/recorder.rs", "fn f() {}\n#[cfg(test)]\nmod tests {\n    use iced_x86::code_asm::*;\n}\n")
        .file("runtime/src/place/tests.rs", "use iced_x86::code_asm::*;\n");
    assert_found(&decoders(&fx.0), &["itrc/src/writer.rs:1: `yaxpeax_arm`", "runtime/src/place/x.rs:2: `iced_x86`"]);
}

#[test]
fn os_calls_outside_os_are_reported() {
    let fx = Fixture::new("os");
    fx.file(
        "runtime/src/session/x.rs",
        "use nix::sys::{ptrace, wait::waitpid};\n\
         // nix::sys::ptrace::seize in a comment is nothing\n\
         fn f(pid: i32) {\n\
         \x20   unsafe { libc::kill(pid, libc::SIGKILL) };\n\
         \x20   let _ = std::fs::read(format!(\"/proc/{pid}/maps\"));\n\
         \x20   let _ = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC);\n\
         \x20   let _ = (libc::SIGTRAP, libc::SYS_mmap, \"see /proc/{pid}/maps\");\n\
         }\n",
    )
    .file(
        "runtime/src/os/x.rs",
        "use nix::sys::ptrace;\nfn f() { unsafe { libc::waitpid(1, std::ptr::null_mut(), 0) }; }\n",
    )
    .file(
        "compiler/src/x.rs",
        "fn f() { let _ = (\"/proc/self/maps\", \"/proc/sys/kernel/osrelease\", \"/proc/{}/maps\"); }\n",
    )
    .file("src/x.rs", "fn f() { let _ = std::os::unix::fs::symlink(\"a\", \"b\"); }\n");
    assert_found(
        &os_calls(&fx.0),
        &[
            "compiler/src/x.rs:1: \"/proc/{}/maps\"",
            "runtime/src/session/x.rs:1: `nix::sys::ptrace`",
            "runtime/src/session/x.rs:1: `nix::sys::wait::waitpid`",
            "runtime/src/session/x.rs:4: `libc::kill`",
            "runtime/src/session/x.rs:5: \"/proc/{pid}/maps\"",
        ],
    );
}

#[test]
fn the_runtime_in_the_compiler_is_reported() {
    let fx = Fixture::new("compiler");
    fx.file(
        "compiler/Cargo.toml",
        "[package]\nname = \"c\"\n\n[dependencies]\ngoblin = \"0.10\"\ntelco-runtime = { path = \"../runtime\" }\n\n[dev-dependencies]\nnix = \"0.32\"\n",
    )
    .file("compiler/src/elaborate/points.rs", "use telco_runtime::os::proc;\n")
    .file("compiler/src/image.rs", "fn f() { let _ = (\"/proc/self/fd/3\", nix::unistd::getpid()); }\n");
    assert_found(
        &compiler_processes(&fx.0),
        &[
            "compiler/Cargo.toml:6: `telco-runtime`",
            "compiler/src/elaborate/points.rs:1: `telco_runtime`",
            "compiler/src/image.rs:1: `nix`",
        ],
    );
}

#[test]
fn a_missing_path_in_internals_is_reported() {
    let fx = Fixture::new("internals");
    fx.file("runtime/src/session/mod.rs", "").file(
        "INTERNALS.md",
        "# Map\n\n`runtime/src/session/` and `runtime/src/session/mod.rs` exist;\n\
             `runtime/src/target.rs` does not, nor `compiler/src/gone/`.\n\
             Not paths: `/proc/PID/maps`, `-l`/`-L`, `crate::B`, `a b/c`.\n\
             ```\nruntime/src/fenced.rs\n```\n",
    );
    assert_found(
        &internals_paths(&fx.0),
        &["INTERNALS.md:4: `runtime/src/target.rs`", "INTERNALS.md:4: `compiler/src/gone/`"],
    );
}
