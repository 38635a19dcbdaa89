//! Tapsets: library files of probe aliases, functions and globals.
//!
//! Built-in tapsets are compiled into the binary; `-I DIR` adds every `.tp`
//! file below DIR. As in SystemTap, a tapset file joins the program only
//! when it defines something the program uses (a function it calls, a probe
//! alias it names, a global it uses and does not declare), transitively.

use crate::ast::{Item, Script};
use crate::diag::{Code, Diagnostic};
use crate::span::FileId;
use std::collections::{BTreeSet, HashMap};

pub use crate::library::{builtin, builtin_macro_libraries, from_dirs, macro_libraries, TapsetSource};

/// What a file defines, for pulling tapsets in.
#[derive(Default)]
struct Defines {
    functions: BTreeSet<String>,
    aliases: BTreeSet<String>,
    /// Globals other files see (not `private`).
    globals: BTreeSet<String>,
}

/// What a file refers to.
#[derive(Default)]
struct Uses {
    functions: BTreeSet<String>,
    /// Names used as variables or arrays.
    names: BTreeSet<String>,
    /// Every dotted prefix of every probe point that is not a built-in family.
    alias_candidates: BTreeSet<String>,
}

/// Choose which tapset files the program needs. `files[0]` is the user's
/// script; the result lists indices into `files`, the script first.
pub fn select(files: &[(FileId, &Script)]) -> Vec<usize> {
    let defines: Vec<Defines> = files.iter().map(|(_, s)| defines_of(s)).collect();
    let mut chosen = vec![0usize];
    let mut work = vec![0usize];
    let mut defined_fns: BTreeSet<String> = defines[0].functions.clone();
    let declared = defines[0].globals.clone();
    while let Some(i) = work.pop() {
        let uses = uses_of(files[i].1);
        for (j, d) in defines.iter().enumerate() {
            if chosen.contains(&j) {
                continue;
            }
            let wanted_fn = uses.functions.iter().any(|f| d.functions.contains(f) && !defined_fns.contains(f));
            let wanted_alias = uses.alias_candidates.iter().any(|a| {
                d.aliases.contains(a) || d.aliases.iter().any(|n| crate::elaborate::alias::name_matches(a, n))
            });
            let wanted_global = uses.names.iter().any(|n| d.globals.contains(n) && !declared.contains(n));
            if wanted_fn || wanted_alias || wanted_global {
                chosen.push(j);
                work.push(j);
                defined_fns.extend(d.functions.iter().cloned());
            }
        }
    }
    chosen.sort();
    chosen
}

fn defines_of(s: &Script) -> Defines {
    let mut d = Defines::default();
    for item in &s.items {
        match item {
            Item::Function(f) => {
                d.functions.insert(f.name.name.to_string());
            }
            Item::Alias(a) => {
                d.aliases.insert(a.name.shape());
            }
            Item::Global(g) if !g.private => d.globals.extend(g.vars.iter().map(|v| v.name.name.to_string())),
            _ => {}
        }
    }
    d
}

fn uses_of(s: &Script) -> Uses {
    let mut u = Uses::default();
    let mut points = Vec::new();
    for item in &s.items {
        match item {
            Item::Probe(p) => {
                points.extend(p.points.iter());
                crate::elaborate::walk::calls_in_block(&p.body, &mut u.functions);
                crate::elaborate::walk::names_in_block(&p.body, &mut u.names);
            }
            Item::Alias(a) => {
                points.extend(a.points.iter());
                crate::elaborate::walk::calls_in_block(&a.body, &mut u.functions);
            }
            Item::Function(f) => {
                crate::elaborate::walk::calls_in_block(&f.body, &mut u.functions);
                crate::elaborate::walk::names_in_block(&f.body, &mut u.names);
            }
            Item::Global(_) => {}
        }
    }
    for p in &points {
        if let Some(c) = &p.condition {
            crate::elaborate::walk::calls_in_expr(c, &mut u.functions);
        }
    }
    for p in points {
        let names: Vec<&str> = p.components.iter().map(|c| c.name.name.as_str()).collect();
        if crate::elaborate::alias::is_builtin_family(names.first().copied().unwrap_or("")) {
            continue;
        }
        for n in 1..=names.len() {
            u.alias_candidates.insert(names[..n].join("."));
        }
    }
    u
}

/// Functions and globals defined twice among the chosen files.
pub fn duplicates(files: &[(FileId, &Script)]) -> Vec<Diagnostic> {
    let mut seen_fn: HashMap<&str, crate::span::Span> = HashMap::new();
    let mut seen_global: HashMap<&str, crate::span::Span> = HashMap::new();
    let mut diags = Vec::new();
    for (_, s) in files {
        for item in &s.items {
            match item {
                Item::Function(f) => {
                    if let Some(first) = seen_fn.insert(&f.name.name, f.name.span) {
                        diags.push(
                            Diagnostic::error(
                                Code::DuplicateDefinition,
                                f.name.span,
                                format!("function `{}` is defined twice", f.name.name),
                            )
                            .with_label("second definition")
                            .with_secondary(first, "first definition"),
                        );
                    }
                }
                Item::Global(g) => {
                    for v in &g.vars {
                        if let Some(first) = seen_global.insert(&v.name.name, v.name.span) {
                            diags.push(
                                Diagnostic::error(
                                    Code::DuplicateDefinition,
                                    v.name.span,
                                    format!("global `{}` is declared twice", v.name.name),
                                )
                                .with_label("second declaration")
                                .with_secondary(first, "first declaration"),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
    }
    diags
}

/// The summary a tapset's documentation comment gives the item that starts
/// at byte `at` of `text`: the comment must end right before it (only
/// white space between), and is either a `/** … */` block whose first line
/// reads `sfunction NAME - SUMMARY` or `probe NAME - SUMMARY` (SystemTap's
/// kernel-doc form), or `//` lines, joined.
pub fn doc_summary(text: &str, at: usize) -> Option<String> {
    let before = text[..at.min(text.len())].trim_end();
    if let Some(body) = before.strip_suffix("*/") {
        let start = body.rfind("/**")?;
        // The first paragraph, up to a blank line or the first `@arg:`.
        let lines: Vec<&str> = body[start + 3..]
            .lines()
            .map(|l| l.trim().trim_start_matches('*').trim())
            .skip_while(|l| l.is_empty())
            .take_while(|l| !l.is_empty() && !l.starts_with('@'))
            .collect();
        let first = lines.join(" ");
        let summary = first.split_once(" - ").map_or(first.as_str(), |(_, s)| s);
        return Some(summary.trim().to_string());
    }
    let lines: Vec<&str> = before.lines().rev().map(str::trim).take_while(|l| l.starts_with("//")).collect::<Vec<_>>();
    if lines.is_empty() {
        return None;
    }
    let joined: Vec<&str> = lines.iter().rev().map(|l| l.trim_start_matches('/').trim()).collect();
    Some(joined.join(" "))
}

fn parsed(tapsets: &[TapsetSource]) -> Vec<(String, String, Script)> {
    let cfg = crate::ParseConfig::default();
    let mut sources = crate::span::SourceMap::new();
    tapsets
        .iter()
        .map(|t| {
            let id = sources.add(t.name.clone(), t.text.clone());
            let (s, _) = crate::parse(&sources, id, &cfg);
            (t.name.clone(), t.text.clone(), s)
        })
        .collect()
}

/// `--dump-functions`: every function a script can call (not a tapset's
/// `private` ones), one per line, as SystemTap prints them (`NAME:TYPE (ARG:TYPE, …)`, `unknown` for no
/// value): the built-in ones, then the tapsets' with their file and the
/// summary of their documentation.
pub fn dump_functions(tapsets: &[TapsetSource]) -> Vec<String> {
    use crate::program::builtins::BUILTINS;
    let ty = |t: crate::program::Ty| if t == crate::program::Ty::Void { "unknown" } else { t.name() };
    let mut out: Vec<String> = BUILTINS
        .iter()
        .filter(|s| !s.name.starts_with("__telco"))
        .map(|s| {
            let mut args: Vec<String> = s.args.iter().map(|a| ty(*a).to_string()).collect();
            args.extend(s.optional.iter().map(|a| format!("[{}]", ty(*a))));
            if s.varargs {
                args.push("...".into());
            }
            format!("{}:{} ({})", s.name, ty(s.ret), args.join(", "))
        })
        .collect();
    out.sort();
    let mut tapset_fns = Vec::new();
    for (file, text, script) in parsed(tapsets) {
        for item in &script.items {
            let Item::Function(f) = item else { continue };
            // Internal, or private to its file: no script can call it.
            if f.name.name.starts_with("__") || f.private {
                continue;
            }
            let t = |a: &Option<crate::ast::TypeAnn>| match a.as_ref().map(|a| a.ty) {
                Some(crate::ast::Type::Long) => "long",
                Some(crate::ast::Type::String) => "string",
                None => "unknown",
            };
            let params: Vec<String> = f.params.iter().map(|p| format!("{}:{}", p.name.name, t(&p.ty))).collect();
            let summary = doc_summary(&text, f.span.start as usize).map(|s| format!(" - {s}")).unwrap_or_default();
            tapset_fns.push(format!("{}:{} ({})  [{file}]{summary}", f.name.name, t(&f.ret), params.join(", ")));
        }
    }
    tapset_fns.sort();
    out.extend(tapset_fns);
    out
}

/// `--dump-probe-aliases`: every probe alias of the tapsets, `NAME = POINT,
/// …` (`+=` for an epilogue), its file and the summary of its
/// documentation.
pub fn dump_aliases(tapsets: &[TapsetSource]) -> Vec<String> {
    let mut out = Vec::new();
    for (file, text, script) in parsed(tapsets) {
        for item in &script.items {
            let Item::Alias(a) = item else { continue };
            let points: Vec<String> = a.points.iter().map(crate::print::print_probe_point).collect();
            let summary = doc_summary(&text, a.span.start as usize).map(|s| format!(" - {s}")).unwrap_or_default();
            let op = if a.epilogue { "+=" } else { "=" };
            out.push(format!(
                "{} {op} {}  [{file}]{summary}",
                crate::print::print_probe_point(&a.name),
                points.join(", ")
            ));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_tapset_functions_are_not_dumped() {
        let text = "// What a script calls.\nfunction open_one(a) { return a }\n\
                    // Its helper.\nprivate function helper(a) { return a }\n";
        let tapsets = [TapsetSource { name: "t.tp".into(), text: text.into() }];
        let listed: Vec<String> = dump_functions(&tapsets).into_iter().filter(|l| l.contains("[t.tp]")).collect();
        assert_eq!(listed, ["open_one:unknown (a:unknown)  [t.tp] - What a script calls."]);
    }
}
