//! Probe alias expansion.
//!
//! `probe NAME = POINT, ... { prologue }` makes `NAME` stand for its points,
//! with the prologue run before the user's body; `+=` runs its body after
//! (an epilogue). A use may add suffixes: with `probe foo = bar.x {}`,
//! `foo.return` becomes `bar.x.return`, unless an alias named `foo.return`
//! exists, which wins (the longest matching alias name is used). Every
//! definition with that name expands, as in SystemTap.

use crate::ast::{Block, ProbeAlias, ProbePoint};
use crate::diag::{Code, Diagnostic};
use crate::span::Span;
use std::collections::HashMap;

/// The probe point families the tool itself provides.
pub const BUILTIN_FAMILIES: &[&str] = &["begin", "end", "error", "timer", "process"];

pub fn is_builtin_family(first: &str) -> bool {
    BUILTIN_FAMILIES.contains(&first)
}

/// Whether alias `name` (`libc.malloc`) matches `pattern` component by
/// component (`libc.*`, `pthread.mutex_*`): as many components, each a
/// shell glob of the name's.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), name.split('.').collect());
    p.len() == n.len() && p.iter().zip(&n).all(|(p, n)| crate::glob::glob_match(p, n))
}

/// A probe point after expansion, with the alias bodies to run around the
/// user's body.
#[derive(Clone, Debug)]
pub struct Expanded<'a> {
    pub point: ProbePoint,
    /// Prologues, in the order they run (the alias nearest the built-in
    /// point first).
    pub before: Vec<&'a Block>,
    /// Epilogues, in the order they run.
    pub after: Vec<&'a Block>,
    /// How the user wrote it (for `pp()` and messages).
    pub written: String,
}

/// Alias definitions by name (`libc.malloc`).
pub struct Aliases<'a> {
    by_name: HashMap<String, Vec<&'a ProbeAlias>>,
    /// Every alias name of every tapset, pulled in or not, for "did you mean".
    known: Vec<String>,
}

const MAX_DEPTH: usize = 16;

impl<'a> Aliases<'a> {
    pub fn new(defs: impl IntoIterator<Item = &'a ProbeAlias>) -> Aliases<'a> {
        let mut by_name: HashMap<String, Vec<&'a ProbeAlias>> = HashMap::new();
        for d in defs {
            by_name.entry(d.name.shape()).or_default().push(d);
        }
        let known = by_name.keys().cloned().collect();
        Aliases { by_name, known }
    }

    /// Also suggest these names (aliases of tapsets not pulled in).
    pub fn with_suggestions(mut self, names: impl IntoIterator<Item = String>) -> Aliases<'a> {
        self.known.extend(names);
        self.known.sort();
        self.known.dedup();
        self
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Expand one written point into built-in points.
    pub fn expand(&self, point: &ProbePoint, diags: &mut Vec<Diagnostic>) -> Vec<Expanded<'a>> {
        let written = crate::print::print_probe_point(&without_condition(point));
        let mut out = Vec::new();
        let mut reported_cycle = false;
        self.expand_into(
            point.clone(),
            Vec::new(),
            Vec::new(),
            &written,
            &mut Vec::new(),
            point.span,
            diags,
            &mut out,
            &mut reported_cycle,
        );
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn expand_into(
        &self,
        point: ProbePoint,
        before: Vec<&'a Block>,
        after: Vec<&'a Block>,
        written: &str,
        path: &mut Vec<String>,
        use_span: Span,
        diags: &mut Vec<Diagnostic>,
        out: &mut Vec<Expanded<'a>>,
        reported_cycle: &mut bool,
    ) {
        let names: Vec<&str> = point.components.iter().map(|c| c.name.name.as_str()).collect();
        if names.first().is_some_and(|f| is_builtin_family(f)) {
            out.push(Expanded { point, before, after, written: written.to_string() });
            return;
        }
        if path.len() >= MAX_DEPTH {
            if std::mem::replace(reported_cycle, true) {
                return;
            }
            diags.push(
                Diagnostic::error(
                    Code::AliasCycle,
                    use_span,
                    format!("probe alias `{}` expands into itself", names.join(".")),
                )
                .with_label(format!("still not a built-in probe point after {MAX_DEPTH} expansions")),
            );
            return;
        }
        // The longest alias name that is a prefix of this point; with
        // wildcards in the prefix (`libc.*`), every alias name that matches
        // it component by component, in name order.
        let found = (1..=names.len()).rev().find_map(|n| {
            let key = names[..n].join(".");
            if let Some(defs) = self.by_name.get(&key) {
                return Some((n, vec![(key, defs)]));
            }
            if !key.contains(['*', '?', '[']) {
                return None;
            }
            let mut all: Vec<(String, &Vec<&'a ProbeAlias>)> =
                self.by_name.iter().filter(|(name, _)| name_matches(&key, name)).map(|(k, d)| (k.clone(), d)).collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            (!all.is_empty()).then_some((n, all))
        });
        let Some((n, matched)) = found else {
            if point.optional {
                return;
            }
            let full = names.join(".");
            let mut d = Diagnostic::error(
                Code::UnknownProbePoint,
                point.span,
                format!("probe point `{full}` is neither built in nor a tapset alias"),
            )
            .with_label("no probe alias has this name");
            let candidates: Vec<&str> =
                self.known.iter().map(String::as_str).chain(BUILTIN_FAMILIES.iter().copied()).collect();
            if let Some(s) = crate::suggest::closest(&full, candidates.iter().copied()) {
                d = d.with_help(format!("did you mean `{s}`?"));
            }
            diags.push(d);
            return;
        };
        for (name, defs) in matched {
            if path.contains(&name) {
                // One error for the whole use, however many paths lead back here.
                if !std::mem::replace(reported_cycle, true) {
                    diags.push(
                        Diagnostic::error(
                            Code::AliasCycle,
                            use_span,
                            format!("probe alias `{name}` expands into itself"),
                        )
                        .with_label(format!("expansion: {} -> {name}", path.join(" -> "))),
                    );
                }
                return;
            }
            // Arguments on the alias-name part of the use are not meaningful.
            let suffix = &point.components[n..];
            for def in defs {
                for target in &def.points {
                    let mut p = target.clone();
                    p.components.extend(suffix.iter().cloned());
                    p.optional |= point.optional;
                    p.sufficient |= point.sufficient;
                    p.condition = match (&point.condition, &target.condition) {
                        (Some(a), Some(b)) => Some(Box::new(crate::ast::Expr::new(
                            crate::ast::ExprKind::Binary { op: crate::ast::BinOp::And, lhs: a.clone(), rhs: b.clone() },
                            a.span,
                        ))),
                        (a, b) => a.clone().or_else(|| b.clone()),
                    };
                    let (mut bf, mut af) = (before.clone(), after.clone());
                    if def.epilogue {
                        af.push(&def.body);
                    } else {
                        bf.insert(0, &def.body);
                    }
                    path.push(name.clone());
                    self.expand_into(p, bf, af, written, path, use_span, diags, out, reported_cycle);
                    path.pop();
                }
            }
        }
    }
}

fn without_condition(p: &ProbePoint) -> ProbePoint {
    ProbePoint { condition: None, ..p.clone() }
}
