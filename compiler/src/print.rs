//! The canonical printer (`--last-pass 1`).
//!
//! Output is normalised: four-space indentation, every simple statement
//! closed with `;`, the fewest parentheses that keep the tree, numbers in
//! decimal. Printing, parsing the print and printing again gives the same
//! text; the test suite checks that for every `.tp` file in the repository.

use crate::ast::*;
use std::fmt::Write;

pub fn print_script(s: &Script) -> String {
    let mut p = Printer { out: String::new(), indent: 0 };
    let mut prev_global = false;
    for (i, item) in s.items.iter().enumerate() {
        let is_global = matches!(item, Item::Global(_));
        if i > 0 && !(prev_global && is_global) {
            p.out.push('\n');
        }
        p.item(item);
        prev_global = is_global;
    }
    p.out
}

pub fn print_expr(e: &Expr) -> String {
    let mut p = Printer { out: String::new(), indent: 0 };
    p.expr(e, 0);
    p.out
}

pub fn print_probe_point(pt: &ProbePoint) -> String {
    let mut p = Printer { out: String::new(), indent: 0 };
    p.point(pt);
    p.out
}

struct Printer {
    out: String,
    indent: usize,
}

// Precedence levels, higher binds tighter (see the grammar's tiers).
const P_ASSIGN: u8 = 1;
const P_TERNARY: u8 = 2;
const P_LOGOR: u8 = 3;
const P_IN: u8 = 8;
const P_EQUALITY: u8 = 9;
const P_UNARY: u8 = 15;
const P_POSTFIX: u8 = 16;
const P_PRIMARY: u8 = 17;

fn precedence(e: &Expr) -> u8 {
    match &e.kind {
        ExprKind::Assign { .. } => P_ASSIGN,
        ExprKind::Ternary { .. } => P_TERNARY,
        ExprKind::Binary { op, .. } => op.precedence(),
        ExprKind::In(_) => P_IN,
        ExprKind::Unary { .. } | ExprKind::IncDec { prefix: true, .. } => P_UNARY,
        ExprKind::IncDec { prefix: false, .. } => P_POSTFIX,
        // A negative number prints with a leading `-`, like a unary minus.
        ExprKind::Int(n) if *n < 0 && *n != i64::MIN => P_UNARY,
        _ => P_PRIMARY,
    }
}

impl Printer {
    fn line_start(&mut self) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
    }

    fn item(&mut self, item: &Item) {
        match item {
            Item::Global(g) => {
                if g.private {
                    self.out.push_str("private ");
                }
                self.out.push_str("global ");
                for (i, v) in g.vars.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.out.push_str(&v.name.name);
                    if v.wrap {
                        self.out.push('%');
                    }
                    if let Some(sz) = &v.size {
                        self.out.push('[');
                        self.literal(sz);
                        self.out.push(']');
                    }
                    if let Some(init) = &v.init {
                        self.out.push_str(" = ");
                        self.literal(init);
                    }
                }
                self.out.push('\n');
            }
            Item::Probe(p) => {
                self.out.push_str("probe ");
                self.points(&p.points);
                self.out.push(' ');
                self.block(&p.body);
                self.out.push('\n');
            }
            Item::Alias(a) => {
                self.out.push_str("probe ");
                self.point(&a.name);
                self.out.push_str(if a.epilogue { " += " } else { " = " });
                self.points(&a.points);
                self.out.push(' ');
                self.block(&a.body);
                self.out.push('\n');
            }
            Item::Function(f) => {
                if f.private {
                    self.out.push_str("private ");
                }
                self.out.push_str("function ");
                self.out.push_str(&f.name.name);
                if let Some(t) = &f.ret {
                    self.out.push(':');
                    self.out.push_str(type_name(t.ty));
                }
                self.out.push('(');
                for (i, p) in f.params.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.out.push_str(&p.name.name);
                    if let Some(t) = &p.ty {
                        self.out.push(':');
                        self.out.push_str(type_name(t.ty));
                    }
                }
                self.out.push_str(") ");
                self.block(&f.body);
                self.out.push('\n');
            }
        }
    }

    fn points(&mut self, pts: &[ProbePoint]) {
        for (i, pt) in pts.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.point(pt);
        }
    }

    fn point(&mut self, pt: &ProbePoint) {
        for (i, c) in pt.components.iter().enumerate() {
            if i > 0 {
                self.out.push('.');
            }
            self.out.push_str(&c.name.name);
            if let Some(a) = &c.arg {
                self.out.push('(');
                match a.kind {
                    // Addresses read best in hex.
                    ExprKind::Int(n) if c.name.name == "statement" && n >= 0 => {
                        let _ = write!(self.out, "{n:#x}");
                    }
                    _ => self.literal(a),
                }
                self.out.push(')');
            }
        }
        if pt.sufficient {
            self.out.push('!');
        } else if pt.optional {
            self.out.push('?');
        }
        if let Some(c) = &pt.condition {
            self.out.push_str(" if (");
            self.expr(c, 0);
            self.out.push(')');
        }
    }

    /// Literals in constant positions: negative numbers keep their sign.
    fn literal(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Int(n) if *n < 0 => {
                let _ = write!(self.out, "-{}", n.unsigned_abs());
            }
            _ => self.expr(e, 0),
        }
    }

    fn block(&mut self, b: &Block) {
        if b.stmts.is_empty() {
            self.out.push_str("{\n");
            self.line_start();
            self.out.push('}');
            return;
        }
        self.out.push_str("{\n");
        self.indent += 1;
        for s in &b.stmts {
            self.line_start();
            self.stmt(s);
            self.out.push('\n');
        }
        self.indent -= 1;
        self.line_start();
        self.out.push('}');
    }

    /// A statement that is the body of `if`/`while`/...: a block stays on the
    /// line, anything else goes on its own indented line.
    fn body(&mut self, s: &Stmt, force_block: bool) {
        match &s.kind {
            StmtKind::Block(b) => {
                self.out.push(' ');
                self.block(b);
            }
            _ if force_block => {
                self.out.push_str(" {\n");
                self.indent += 1;
                self.line_start();
                self.stmt(s);
                self.out.push('\n');
                self.indent -= 1;
                self.line_start();
                self.out.push('}');
            }
            _ => {
                self.out.push('\n');
                self.indent += 1;
                self.line_start();
                self.stmt(s);
                self.indent -= 1;
            }
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Block(b) => self.block(b),
            StmtKind::Expr(e) => {
                self.expr(e, 0);
                self.out.push(';');
            }
            StmtKind::Empty => self.out.push(';'),
            StmtKind::Error => self.out.push_str("/* error */;"),
            StmtKind::If(i) => {
                let (cond, then, els) = (&i.cond, &i.then, &i.els);
                self.out.push_str("if (");
                self.expr(cond, 0);
                self.out.push(')');
                // `if (a) if (b) x; else y;` would give the `else` to the
                // inner `if`; braces keep it where the tree has it.
                let force = els.is_some() && ends_unmatched(then);
                self.body(then, force);
                if let Some(e) = els {
                    if matches!(then.kind, StmtKind::Block(_)) || force {
                        self.out.push(' ');
                    } else {
                        self.out.push('\n');
                        self.line_start();
                    }
                    self.out.push_str("else");
                    if matches!(e.kind, StmtKind::If(_)) {
                        self.out.push(' ');
                        self.stmt(e);
                    } else {
                        self.body(e, false);
                    }
                }
            }
            StmtKind::While(w) => {
                self.out.push_str("while (");
                self.expr(&w.cond, 0);
                self.out.push(')');
                self.body(&w.body, false);
            }
            StmtKind::For(f) => {
                let (init, cond, step, body) = (&f.init, &f.cond, &f.step, &f.body);
                self.out.push_str("for (");
                if let Some(e) = init {
                    self.expr(e, 0);
                }
                self.out.push(';');
                if let Some(e) = cond {
                    self.out.push(' ');
                    self.expr(e, 0);
                }
                self.out.push(';');
                if let Some(e) = step {
                    self.out.push(' ');
                    self.expr(e, 0);
                }
                self.out.push(')');
                self.body(body, false);
            }
            StmtKind::Foreach(f) => {
                self.out.push_str("foreach (");
                if let Some(v) = &f.value {
                    self.out.push_str(&v.name);
                    self.out.push_str(sort_mark(f.value_mark));
                    self.out.push_str(" = ");
                }
                let bracket = f.bracketed || f.keys.len() != 1;
                if bracket {
                    self.out.push('[');
                }
                for (i, k) in f.keys.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.out.push_str(&k.name.name);
                    self.out.push_str(sort_mark(k.sort));
                }
                if bracket {
                    self.out.push(']');
                }
                self.out.push_str(" in ");
                match &f.hist {
                    Some(h) => self.expr(h, 0),
                    None => self.out.push_str(&f.array.name),
                }
                if !f.slice.is_empty() {
                    self.out.push('[');
                    for (i, k) in f.slice.iter().enumerate() {
                        if i > 0 {
                            self.out.push_str(", ");
                        }
                        match k {
                            Some(e) => self.expr(e, 0),
                            None => self.out.push('*'),
                        }
                    }
                    self.out.push(']');
                }
                if let Some(a) = &f.value_agg {
                    self.out.push_str(" @");
                    self.out.push_str(&a.name);
                }
                if f.value_mark.is_none() {
                    self.out.push_str(sort_mark(f.value_sort));
                }
                if let Some(l) = &f.limit {
                    self.out.push_str(" limit ");
                    self.expr(l, 0);
                }
                self.out.push(')');
                self.body(&f.body, false);
            }
            StmtKind::Break => self.out.push_str("break;"),
            StmtKind::Continue => self.out.push_str("continue;"),
            StmtKind::Next => self.out.push_str("next;"),
            StmtKind::Return(None) => self.out.push_str("return;"),
            StmtKind::Return(Some(e)) => {
                self.out.push_str("return ");
                self.expr(e, 0);
                self.out.push(';');
            }
            StmtKind::Delete(e) => {
                self.out.push_str("delete ");
                self.expr(e, 0);
                self.out.push(';');
            }
            StmtKind::Try(t) => {
                let (body, var, handler) = (&t.body, &t.var, &t.handler);
                self.out.push_str("try ");
                self.block(body);
                self.out.push_str(" catch");
                if let Some(v) = var {
                    self.out.push_str(" (");
                    self.out.push_str(&v.name);
                    self.out.push(')');
                }
                self.out.push(' ');
                self.block(handler);
            }
        }
    }

    /// Print `e`, in parentheses if it binds looser than `min`.
    fn expr(&mut self, e: &Expr, min: u8) {
        let paren = precedence(e) < min;
        if paren {
            self.out.push('(');
        }
        self.expr_inner(e);
        if paren {
            self.out.push(')');
        }
    }

    fn expr_inner(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Int(n) => {
                if *n == i64::MIN {
                    // As written: `9223372036854775808` (only legal after `-`).
                    self.out.push_str("9223372036854775808");
                } else {
                    let _ = write!(self.out, "{n}");
                }
            }
            ExprKind::Str(s) => write_string(&mut self.out, s),
            ExprKind::Var(v) => self.out.push_str(v),
            ExprKind::TargetVar(v) => {
                self.out.push('$');
                self.out.push_str(v);
            }
            ExprKind::TargetPath(p) => {
                if p.address {
                    self.out.push('&');
                }
                self.expr_inner(&p.base);
                for s in &p.steps {
                    match s {
                        crate::ast::PathStep::Member(m) => {
                            self.out.push_str("->");
                            self.out.push_str(&m.name);
                        }
                        crate::ast::PathStep::Index(i) => {
                            self.out.push('[');
                            self.expr_inner(i);
                            self.out.push(']');
                        }
                    }
                }
                self.out.push_str(&"$".repeat(p.pretty as usize));
            }
            ExprKind::ScriptArg { index, as_string } => {
                let _ = write!(self.out, "{}{index}", if *as_string { '@' } else { '$' });
            }
            ExprKind::ScriptArgCount { as_string } => self.out.push_str(if *as_string { "@#" } else { "$#" }),
            ExprKind::Index(ix) => {
                self.out.push_str(&ix.array.name);
                self.out.push('[');
                self.list(&ix.keys);
                self.out.push(']');
            }
            ExprKind::Call(c) => {
                self.out.push_str(&c.name.name);
                self.out.push('(');
                self.list(&c.args);
                self.out.push(')');
            }
            ExprKind::AtOp(c) => {
                self.out.push('@');
                self.out.push_str(&c.name.name);
                self.out.push('(');
                self.list(&c.args);
                self.out.push(')');
            }
            ExprKind::Unary { op, operand } => {
                self.out.push_str(op.symbol());
                self.prefix_operand(op.symbol(), operand);
            }
            ExprKind::IncDec { op, prefix: true, target } => {
                let sym = if *op == IncDec::Inc { "++" } else { "--" };
                self.out.push_str(sym);
                self.prefix_operand(sym, target);
            }
            ExprKind::IncDec { op, prefix: false, target } => {
                self.expr(target, P_POSTFIX);
                self.out.push_str(if *op == IncDec::Inc { "++" } else { "--" });
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let p = op.precedence();
                self.expr(lhs, p);
                self.out.push(' ');
                self.out.push_str(op.symbol());
                self.out.push(' ');
                self.expr(rhs, p + 1);
            }
            ExprKind::Assign { op, target, value } => {
                self.expr(target, P_TERNARY);
                self.out.push(' ');
                self.out.push_str(op.symbol());
                self.out.push(' ');
                self.expr(value, P_ASSIGN);
            }
            ExprKind::Ternary { cond, then, els } => {
                self.expr(cond, P_LOGOR);
                self.out.push_str(" ? ");
                self.expr(then, P_ASSIGN);
                self.out.push_str(" : ");
                self.expr(els, P_TERNARY);
            }
            ExprKind::In(ix) => {
                let (keys, array) = (&ix.keys, &ix.array);
                if keys.len() == 1 {
                    self.expr(&keys[0], P_EQUALITY);
                } else {
                    self.out.push('[');
                    self.list(keys);
                    self.out.push(']');
                }
                self.out.push_str(" in ");
                self.out.push_str(&array.name);
            }
            ExprKind::Error => self.out.push_str("/* error */0"),
        }
    }

    /// The operand of a prefix operator. `-` before `-x` or `--x` would lex
    /// as `--`, so such operands get parentheses.
    fn prefix_operand(&mut self, sym: &str, operand: &Expr) {
        let mut tmp = Printer { out: String::new(), indent: 0 };
        tmp.expr(operand, P_UNARY);
        let first = sym.chars().last();
        if matches!(first, Some('-' | '+')) && tmp.out.starts_with(first.unwrap_or(' ')) {
            self.out.push('(');
            self.out.push_str(&tmp.out);
            self.out.push(')');
        } else {
            self.out.push_str(&tmp.out);
        }
    }

    fn list(&mut self, es: &[Expr]) {
        for (i, e) in es.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.expr(e, P_ASSIGN);
        }
    }
}

/// Does this statement end with an `if` that has no `else`?
fn ends_unmatched(s: &Stmt) -> bool {
    match &s.kind {
        StmtKind::If(i) => i.els.as_ref().is_none_or(ends_unmatched),
        StmtKind::While(w) => ends_unmatched(&w.body),
        StmtKind::For(f) => ends_unmatched(&f.body),
        StmtKind::Foreach(f) => ends_unmatched(&f.body),
        _ => false,
    }
}

fn sort_mark(s: Option<Sort>) -> &'static str {
    match s.map(|s| s.dir) {
        None => "",
        Some(SortDir::Asc) => "+",
        Some(SortDir::Desc) => "-",
    }
}

fn type_name(t: Type) -> &'static str {
    match t {
        Type::Long => "long",
        Type::String => "string",
    }
}

/// A string literal that lexes back to the same bytes: printable UTF-8 as
/// is, control characters and invalid UTF-8 as escapes.
pub fn write_string(out: &mut String, s: &[u8]) {
    out.push('"');
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\x07' => out.push_str("\\a"),
                '\x08' => out.push_str("\\b"),
                '\x0c' => out.push_str("\\f"),
                '\x0b' => out.push_str("\\v"),
                c if (c as u32) < 0x20 || c == '\x7f' => {
                    let _ = write!(out, "\\{:03o}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\{b:03o}");
        }
    }
    out.push('"');
}

/// A fully parenthesised S-expression of an expression, for tests that
/// check structure (precedence, associativity) independently of spans.
pub fn expr_tree(e: &Expr) -> String {
    let list = |es: &[Expr]| es.iter().map(expr_tree).collect::<Vec<_>>().join(" ");
    match &e.kind {
        ExprKind::Int(n) => n.to_string(),
        ExprKind::Str(s) => {
            let mut o = String::new();
            write_string(&mut o, s);
            o
        }
        ExprKind::Var(v) => v.to_string(),
        ExprKind::TargetVar(v) => format!("${v}"),
        ExprKind::TargetPath(p) => {
            let steps: Vec<String> = p
                .steps
                .iter()
                .map(|s| match s {
                    crate::ast::PathStep::Member(m) => format!("->{}", m.name),
                    crate::ast::PathStep::Index(i) => format!("[{}]", expr_tree(i)),
                })
                .collect();
            format!(
                "(path {}{}{}{})",
                if p.address { "&" } else { "" },
                expr_tree(&p.base),
                steps.concat(),
                "$".repeat(p.pretty as usize)
            )
        }
        ExprKind::ScriptArg { index, as_string } => format!("{}{index}", if *as_string { '@' } else { '$' }),
        ExprKind::ScriptArgCount { as_string } => (if *as_string { "@#" } else { "$#" }).to_string(),
        ExprKind::Index(ix) => format!("(index {} {})", ix.array.name, list(&ix.keys)),
        ExprKind::Call(c) => format!("(call {} {})", c.name.name, list(&c.args)),
        ExprKind::AtOp(c) => format!("(@{} {})", c.name.name, list(&c.args)),
        ExprKind::Unary { op, operand } => format!("({} {})", op.symbol(), expr_tree(operand)),
        ExprKind::Binary { op, lhs, rhs } => format!("({} {} {})", op.symbol(), expr_tree(lhs), expr_tree(rhs)),
        ExprKind::Assign { op, target, value } => {
            format!("({} {} {})", op.symbol(), expr_tree(target), expr_tree(value))
        }
        ExprKind::Ternary { cond, then, els } => {
            format!("(? {} {} {})", expr_tree(cond), expr_tree(then), expr_tree(els))
        }
        ExprKind::IncDec { op, prefix, target } => {
            let sym = if *op == IncDec::Inc { "++" } else { "--" };
            if *prefix {
                format!("(pre{sym} {})", expr_tree(target))
            } else {
                format!("(post{sym} {})", expr_tree(target))
            }
        }
        ExprKind::In(ix) => format!("(in [{}] {})", list(&ix.keys), ix.array.name),
        ExprKind::Error => "<error>".to_string(),
    }
}
