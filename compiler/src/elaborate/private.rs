//! SystemTap's `private`: a global or function declared `private` is seen
//! only in its own file (a tapset's helpers do not clash with a script's
//! names, and scripts cannot reach them). As SystemTap does, each is
//! renamed, with every use of it in that file, to `__private_F_NAME` (F:
//! the file's number); other files keep naming whatever else has that
//! name. A function's parameters hide a private global of the same name.

use crate::ast::*;
use crate::span::FileId;
use std::collections::{HashMap, HashSet};

/// The file's script with its private names renamed, or None when it
/// declares nothing private.
pub fn privatize(script: &Script, file: FileId) -> Option<Script> {
    let mangle = |n: &str| format!("__private_{}_{n}", file.0);
    let mut globals: HashMap<String, String> = HashMap::new();
    let mut functions: HashMap<String, String> = HashMap::new();
    for item in &script.items {
        match item {
            Item::Global(g) if g.private => {
                for v in &g.vars {
                    globals.insert(v.name.name.to_string(), mangle(&v.name.name));
                }
            }
            Item::Function(f) if f.private => {
                functions.insert(f.name.name.to_string(), mangle(&f.name.name));
            }
            _ => {}
        }
    }
    if globals.is_empty() && functions.is_empty() {
        return None;
    }
    let mut out = script.clone();
    let r = Renamer { globals: &globals, functions: &functions };
    for item in &mut out.items {
        match item {
            Item::Global(g) => {
                for v in &mut g.vars {
                    r.global(&mut v.name);
                }
            }
            Item::Function(f) => {
                if let Some(m) = functions.get(f.name.name.as_str()) {
                    f.name.name = Name::new(m);
                }
                let hidden: HashSet<&str> = f.params.iter().map(|p| p.name.name.as_str()).collect();
                let shadowed: HashMap<String, String> = globals
                    .iter()
                    .filter(|(k, _)| !hidden.contains(k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Renamer { globals: &shadowed, functions: &functions }.block(&mut f.body);
            }
            Item::Probe(p) => {
                r.points(&mut p.points);
                r.block(&mut p.body);
            }
            Item::Alias(a) => {
                r.points(&mut a.points);
                r.block(&mut a.body);
            }
        }
    }
    Some(out)
}

struct Renamer<'a> {
    globals: &'a HashMap<String, String>,
    functions: &'a HashMap<String, String>,
}

impl Renamer<'_> {
    fn global(&self, id: &mut Ident) {
        if let Some(m) = self.globals.get(id.name.as_str()) {
            id.name = Name::new(m);
        }
    }

    fn points(&self, points: &mut [ProbePoint]) {
        for p in points {
            if let Some(c) = &mut p.condition {
                self.expr(c);
            }
        }
    }

    fn block(&self, b: &mut Block) {
        for s in &mut b.stmts {
            self.stmt(s);
        }
    }

    fn stmt(&self, s: &mut Stmt) {
        match &mut s.kind {
            StmtKind::Block(b) => self.block(b),
            StmtKind::Expr(e) | StmtKind::Delete(e) | StmtKind::Return(Some(e)) => self.expr(e),
            StmtKind::If(i) => {
                self.expr(&mut i.cond);
                self.stmt(&mut i.then);
                if let Some(e) = &mut i.els {
                    self.stmt(e);
                }
            }
            StmtKind::While(w) => {
                self.expr(&mut w.cond);
                self.stmt(&mut w.body);
            }
            StmtKind::For(x) => {
                for e in [&mut x.init, &mut x.cond, &mut x.step].into_iter().flatten() {
                    self.expr(e);
                }
                self.stmt(&mut x.body);
            }
            StmtKind::Foreach(x) => {
                self.global(&mut x.array);
                for e in x.slice.iter_mut().flatten().chain(&mut x.hist) {
                    self.expr(e);
                }
                if let Some(l) = &mut x.limit {
                    self.expr(l);
                }
                self.stmt(&mut x.body);
            }
            StmtKind::Try(t) => {
                self.block(&mut t.body);
                self.block(&mut t.handler);
            }
            StmtKind::Return(None)
            | StmtKind::Empty
            | StmtKind::Break
            | StmtKind::Continue
            | StmtKind::Next
            | StmtKind::Error => {}
        }
    }

    fn expr(&self, e: &mut Expr) {
        match &mut e.kind {
            ExprKind::Var(n) => {
                if let Some(m) = self.globals.get(n.as_str()) {
                    *n = Name::new(m);
                }
            }
            ExprKind::Call(c) => {
                if let Some(m) = self.functions.get(c.name.name.as_str()) {
                    c.name.name = Name::new(m);
                }
                c.args.iter_mut().for_each(|a| self.expr(a));
            }
            ExprKind::AtOp(c) => c.args.iter_mut().for_each(|a| self.expr(a)),
            ExprKind::TargetPath(p) => {
                self.expr(&mut p.base);
                for s in &mut p.steps {
                    if let PathStep::Index(i) = s {
                        self.expr(i);
                    }
                }
            }
            ExprKind::Index(ix) | ExprKind::In(ix) => {
                self.global(&mut ix.array);
                ix.keys.iter_mut().for_each(|k| self.expr(k));
            }
            ExprKind::Unary { operand, .. } => self.expr(operand),
            ExprKind::Binary { lhs, rhs, .. } | ExprKind::Assign { target: lhs, value: rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::Ternary { cond, then, els } => {
                self.expr(cond);
                self.expr(then);
                self.expr(els);
            }
            ExprKind::IncDec { target, .. } => self.expr(target),
            ExprKind::Int(_)
            | ExprKind::Str(_)
            | ExprKind::TargetVar(_)
            | ExprKind::ScriptArg { .. }
            | ExprKind::ScriptArgCount { .. }
            | ExprKind::Error => {}
        }
    }
}
