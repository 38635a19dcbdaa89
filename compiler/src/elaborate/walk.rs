//! Small read-only walks over the AST.

use crate::ast::*;
use std::collections::BTreeSet;

/// Names of every function called in a block.
pub fn calls_in_block(b: &Block, out: &mut BTreeSet<String>) {
    visit_exprs_in_block(b, &mut |e| note_call(e, out));
}

/// Names used as variables or arrays in a block (`n`, `a[k]`).
pub fn names_in_block(b: &Block, out: &mut BTreeSet<String>) {
    visit_exprs_in_block(b, &mut |e| match &e.kind {
        ExprKind::Var(n) => {
            out.insert(n.to_string());
        }
        ExprKind::Index(ix) => {
            out.insert(ix.array.name.to_string());
        }
        _ => {}
    });
}

pub fn calls_in_expr(e: &Expr, out: &mut BTreeSet<String>) {
    visit_expr(e, &mut |e| note_call(e, out));
}

fn note_call(e: &Expr, out: &mut BTreeSet<String>) {
    if let ExprKind::Call(c) = &e.kind {
        out.insert(c.name.name.to_string());
    }
}

/// Whether a block has a `return EXPR` anywhere.
pub fn returns_value(b: &Block) -> bool {
    b.stmts.iter().any(stmt_returns_value)
}

fn stmt_returns_value(s: &Stmt) -> bool {
    match &s.kind {
        StmtKind::Return(Some(_)) => true,
        StmtKind::Block(b) => returns_value(b),
        StmtKind::If(i) => stmt_returns_value(&i.then) || i.els.as_ref().is_some_and(stmt_returns_value),
        StmtKind::While(w) => stmt_returns_value(&w.body),
        StmtKind::For(f) => stmt_returns_value(&f.body),
        StmtKind::Foreach(f) => stmt_returns_value(&f.body),
        StmtKind::Try(t) => returns_value(&t.body) || returns_value(&t.handler),
        _ => false,
    }
}

/// Names assigned (`name = ...`) at the top level of a block, with the kind
/// of value when it is evident (`name:long`, `name:string`), for `-L`.
pub fn assigned_locals(b: &Block, string_functions: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    for s in &b.stmts {
        if let StmtKind::Expr(Expr { kind: ExprKind::Assign { op: AssignOp::Assign, target, value }, .. }) = &s.kind {
            if let ExprKind::Var(name) = &target.kind {
                let ty = if evidently_string(value, string_functions) { "string" } else { "long" };
                out.insert(format!("{name}:{ty}"));
            }
        }
    }
}

/// Whether an expression is evidently a string: a literal, a
/// concatenation, a built-in that returns one, a choice between such.
fn evidently_string(e: &Expr, string_functions: &BTreeSet<String>) -> bool {
    match &e.kind {
        ExprKind::Str(_) | ExprKind::Binary { op: BinOp::Concat, .. } => true,
        ExprKind::Call(c) => {
            string_functions.contains(c.name.name.as_str())
                || crate::program::builtins::lookup(&c.name.name).is_some_and(|s| s.ret == crate::program::Ty::String)
        }
        ExprKind::AtOp(c) if c.name.name == "entry" => {
            c.args.first().is_some_and(|a| evidently_string(a, string_functions))
        }
        ExprKind::Ternary { then, els, .. } => {
            evidently_string(then, string_functions) || evidently_string(els, string_functions)
        }
        _ => false,
    }
}

/// Whether a block reads target variables by name from debugging
/// information: `$name` (not `$argN`, `$return`), `->` and `[...]` paths,
/// `$var$`, `$$parms` and friends, `@var`, `@cast`, `@defined`.
pub fn uses_debug_info(b: &Block) -> bool {
    let mut found = false;
    visit_exprs_in_block(b, &mut |e| {
        found |= match &e.kind {
            ExprKind::TargetPath(_) => true,
            ExprKind::TargetVar(n) => {
                let n = n.as_str();
                let arg = n.strip_prefix("arg").is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()));
                !arg && n != "return"
                    && (!n.starts_with('$') || matches!(n, "$parms" | "$locals" | "$vars" | "$return"))
            }
            ExprKind::AtOp(c) => matches!(c.name.name.as_str(), "var" | "cast" | "defined"),
            _ => false,
        }
    });
    found
}

/// The modules `@cast(p, "type", "MODULE")` and `@var("name", "MODULE")`
/// name with string literals in the blocks, each once.
pub fn modules_named(blocks: &[&Block], args: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for b in blocks {
        visit_exprs_in_block(b, &mut |e| {
            let ExprKind::AtOp(c) = &e.kind else { return };
            let at = match c.name.name.as_str() {
                "cast" => 2,
                "var" => 1,
                _ => return,
            };
            let name = match c.args.get(at).map(|a| &a.kind) {
                Some(ExprKind::Str(s)) => Some(String::from_utf8_lossy(s).into_owned()),
                // `@N`: the script's argument.
                Some(ExprKind::ScriptArg { index, as_string: true }) => {
                    (*index as usize).checked_sub(1).and_then(|i| args.get(i)).cloned()
                }
                _ => None,
            };
            if let Some(name) = name {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        });
    }
    out
}

/// Whether a block reads `$return`.
pub fn uses_return(b: &Block) -> bool {
    let mut found = false;
    visit_exprs_in_block(b, &mut |e| found |= matches!(&e.kind, ExprKind::TargetVar(n) if n.as_str() == "return"));
    found
}

/// Call `f` on every expression of a block (outer before inner).
pub fn visit_exprs_in_block(b: &Block, f: &mut dyn FnMut(&Expr)) {
    for s in &b.stmts {
        visit_stmt(s, f);
    }
}

fn visit_stmt(s: &Stmt, f: &mut dyn FnMut(&Expr)) {
    match &s.kind {
        StmtKind::Block(b) => visit_exprs_in_block(b, f),
        StmtKind::Expr(e) | StmtKind::Delete(e) | StmtKind::Return(Some(e)) => visit_expr(e, f),
        StmtKind::If(i) => {
            visit_expr(&i.cond, f);
            visit_stmt(&i.then, f);
            if let Some(e) = &i.els {
                visit_stmt(e, f);
            }
        }
        StmtKind::While(w) => {
            visit_expr(&w.cond, f);
            visit_stmt(&w.body, f);
        }
        StmtKind::For(x) => {
            for e in [&x.init, &x.cond, &x.step].into_iter().flatten() {
                visit_expr(e, f);
            }
            visit_stmt(&x.body, f);
        }
        StmtKind::Foreach(x) => {
            for e in x.slice.iter().flatten().chain(&x.hist) {
                visit_expr(e, f);
            }
            if let Some(l) = &x.limit {
                visit_expr(l, f);
            }
            visit_stmt(&x.body, f);
        }
        StmtKind::Try(t) => {
            visit_exprs_in_block(&t.body, f);
            visit_exprs_in_block(&t.handler, f);
        }
        StmtKind::Return(None)
        | StmtKind::Empty
        | StmtKind::Break
        | StmtKind::Continue
        | StmtKind::Next
        | StmtKind::Error => {}
    }
}

fn visit_expr(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Call(c) | ExprKind::AtOp(c) => c.args.iter().for_each(|a| visit_expr(a, f)),
        ExprKind::TargetPath(p) => {
            visit_expr(&p.base, f);
            for s in &p.steps {
                if let PathStep::Index(i) = s {
                    visit_expr(i, f);
                }
            }
        }
        ExprKind::Index(ix) | ExprKind::In(ix) => ix.keys.iter().for_each(|k| visit_expr(k, f)),
        ExprKind::Unary { operand, .. } => visit_expr(operand, f),
        ExprKind::Binary { lhs, rhs, .. } | ExprKind::Assign { target: lhs, value: rhs, .. } => {
            visit_expr(lhs, f);
            visit_expr(rhs, f);
        }
        ExprKind::Ternary { cond, then, els } => {
            visit_expr(cond, f);
            visit_expr(then, f);
            visit_expr(els, f);
        }
        ExprKind::IncDec { target, .. } => visit_expr(target, f),
        ExprKind::Int(_)
        | ExprKind::Str(_)
        | ExprKind::Var(_)
        | ExprKind::TargetVar(_)
        | ExprKind::ScriptArg { .. }
        | ExprKind::ScriptArgCount { .. }
        | ExprKind::Error => {}
    }
}
