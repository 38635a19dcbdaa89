//! Pass 1c: checks that need the tree but no symbols: the shapes of the
//! built-in probe point families, `@` operator names and arities, where
//! `break`/`continue`/`return` may stand, and what may be assigned to.
//!
//! Probe points whose first component is not a built-in family (`begin`,
//! `end`, `error`, `timer`, `process`) are tapset aliases, checked in pass 2.

use crate::ast::*;
use crate::diag::{Code, Diagnostic};
use crate::suggest::closest;

pub fn validate(script: &Script, text: &str, diags: &mut Vec<Diagnostic>) {
    let mut v = Validator { diags, text };
    for item in &script.items {
        match item {
            Item::Global(g) => {
                for var in &g.vars {
                    if let Some(size) = &var.size {
                        if let ExprKind::Int(n) = size.kind {
                            if n <= 0 {
                                v.diags.push(
                                    Diagnostic::error(Code::UnexpectedToken, size.span, "array size must be positive")
                                        .with_label(format!("`{n}` entries")),
                                );
                            }
                        }
                        if let ExprKind::Str(_) = size.kind {
                            v.diags.push(
                                Diagnostic::error(Code::UnexpectedToken, size.span, "array size must be a number")
                                    .with_label("a string"),
                            );
                        }
                    }
                }
            }
            Item::Probe(p) => {
                for pt in &p.points {
                    v.point(pt);
                    if let Some(c) = &pt.condition {
                        v.expr(c);
                    }
                }
                v.block(&p.body, Ctx { in_function: false, loops: 0 });
            }
            Item::Alias(a) => {
                for pt in &a.points {
                    v.point(pt);
                }
                v.block(&a.body, Ctx { in_function: false, loops: 0 });
            }
            Item::Function(f) => v.block(&f.body, Ctx { in_function: true, loops: 0 }),
        }
    }
}

/// Check one probe point's shape (also used by pass 2 on points produced
/// by alias expansion, which pass 1 never saw).
pub fn check_probe_point(p: &ProbePoint, diags: &mut Vec<Diagnostic>) {
    Validator { diags, text: "" }.point(p);
}

#[derive(Clone, Copy)]
struct Ctx {
    in_function: bool,
    loops: u32,
}

struct Validator<'d> {
    diags: &'d mut Vec<Diagnostic>,
    /// The file's text, for hints that depend on layout.
    text: &'d str,
}

/// `@` operators: name, minimum and maximum number of arguments.
pub const AT_OPERATORS: &[(&str, usize, usize)] = &[
    ("entry", 1, 1),
    ("count", 1, 1),
    ("sum", 1, 1),
    ("min", 1, 1),
    ("max", 1, 1),
    ("avg", 1, 1),
    ("variance", 1, 2),
    ("hist_log", 1, 1),
    ("hist_linear", 4, 4),
    // Debugging information (`elaborate::dwarf_vars`).
    ("defined", 1, 1),
    ("var", 1, 2),
    ("cast", 2, 3),
];

/// What may follow a component of a built-in probe point, and whether that
/// component takes an argument.
#[derive(Clone, Copy, PartialEq)]
enum Arg {
    None,
    Optional,
    Number,
    String,
    NumberOrString,
}

struct Shape {
    name: &'static str,
    arg: Arg,
    next: &'static [Shape],
    /// The point may end after this component.
    complete: bool,
}

const fn s(name: &'static str, arg: Arg, complete: bool, next: &'static [Shape]) -> Shape {
    Shape { name, arg, next, complete }
}

const FUNCTION_SUFFIXES: &[Shape] = &[
    s("return", Arg::None, true, &[]),
    s("call", Arg::None, true, &[]),
    s("exported", Arg::None, true, &[]),
    s("inline", Arg::None, true, &[]),
    s("itrace", Arg::None, true, &[]),
    s("label", Arg::String, true, &[]),
];
const STATEMENT_SUFFIXES: &[Shape] = &[s("nearest", Arg::None, true, &[])];
const THREAD_EVENTS: &[Shape] = &[s("begin", Arg::None, true, &[]), s("end", Arg::None, true, &[])];
const MARK: &[Shape] = &[s("mark", Arg::String, true, &[])];
const IN_MODULE: &[Shape] = &[
    s("function", Arg::String, true, FUNCTION_SUFFIXES),
    s("statement", Arg::NumberOrString, true, STATEMENT_SUFFIXES),
    s("mark", Arg::String, true, &[]),
    s("provider", Arg::String, false, MARK),
];
const PROCESS_NEXT: &[Shape] = &[
    s("function", Arg::String, true, FUNCTION_SUFFIXES),
    s("statement", Arg::NumberOrString, true, STATEMENT_SUFFIXES),
    s("mark", Arg::String, true, &[]),
    s("provider", Arg::String, false, MARK),
    s("library", Arg::String, false, IN_MODULE),
    s("begin", Arg::None, true, &[]),
    s("end", Arg::None, true, &[]),
    s("thread", Arg::None, false, THREAD_EVENTS),
    s("blocked", Arg::None, true, &[]),
];
const TIMER_RANDOMIZE: &[Shape] = &[s("randomize", Arg::Number, true, &[])];
const TIMER_NEXT: &[Shape] = &[
    s("ms", Arg::Number, true, TIMER_RANDOMIZE),
    s("msec", Arg::Number, true, TIMER_RANDOMIZE),
    s("s", Arg::Number, true, TIMER_RANDOMIZE),
    s("sec", Arg::Number, true, TIMER_RANDOMIZE),
    s("us", Arg::Number, true, TIMER_RANDOMIZE),
    s("usec", Arg::Number, true, TIMER_RANDOMIZE),
    s("ns", Arg::Number, true, TIMER_RANDOMIZE),
    s("nsec", Arg::Number, true, TIMER_RANDOMIZE),
    s("hz", Arg::Number, true, &[]),
    s("jiffies", Arg::Number, true, TIMER_RANDOMIZE),
    s("profile", Arg::None, true, TIMER_PROFILE),
];
/// `timer.profile[.hz(N)]`: samples of the target's threads (N per second
/// of each thread's CPU time; 99 without `.hz`).
const TIMER_PROFILE: &[Shape] = &[s("hz", Arg::Number, true, &[])];
const FAMILIES: &[Shape] = &[
    s("begin", Arg::Optional, true, &[]),
    s("end", Arg::Optional, true, &[]),
    s("error", Arg::Optional, true, &[]),
    s("timer", Arg::None, false, TIMER_NEXT),
    s("process", Arg::Optional, false, PROCESS_NEXT),
];

/// Every point of the `timer` family, spelled as `-l` lists them
/// (`timer.ms(number).randomize(number)`), sorted.
pub fn timer_points() -> Vec<String> {
    fn walk(prefix: &str, shapes: &[Shape], out: &mut Vec<String>) {
        for sh in shapes {
            let arg = match sh.arg {
                Arg::Number => "(number)",
                Arg::String => "(string)",
                Arg::NumberOrString => "(number|string)",
                Arg::None | Arg::Optional => "",
            };
            let p = format!("{prefix}.{}{arg}", sh.name);
            if sh.complete {
                out.push(p.clone());
            }
            walk(&p, sh.next, out);
        }
    }
    let mut out = Vec::new();
    walk("timer", TIMER_NEXT, &mut out);
    out.sort();
    out
}

impl Validator<'_> {
    /// Is there a line break between two offsets?
    fn newline_between(&self, a: u32, b: u32) -> bool {
        self.text.get(a as usize..b as usize).is_some_and(|s| s.contains('\n'))
    }

    fn point(&mut self, p: &ProbePoint) {
        let Some(first) = p.components.first() else { return };
        let Some(mut shape) = FAMILIES.iter().find(|f| f.name == first.name.name) else {
            return; // An alias: pass 2 resolves it.
        };
        let mut path = String::new();
        for (i, c) in p.components.iter().enumerate() {
            if i > 0 {
                let Some(next) = shape.next.iter().find(|n| n.name == c.name.name) else {
                    let names: Vec<&str> = shape.next.iter().map(|n| n.name).collect();
                    let mut d = Diagnostic::error(
                        Code::BadProbePoint,
                        c.name.span,
                        format!("unknown probe point suffix `.{}`", c.name.name),
                    );
                    d = if names.is_empty() {
                        d.with_label(format!("`{path}` takes no suffix"))
                    } else {
                        d.with_label(format!("`{path}` has no suffix `{}`", c.name.name))
                    };
                    d = match closest(&c.name.name, names.iter().copied()) {
                        Some(sugg) => d.with_help(format!("did you mean `.{sugg}`?")),
                        None if !names.is_empty() => d.with_help(format!(
                            "after `{path}` come: {}",
                            names.iter().map(|n| format!("`.{n}`")).collect::<Vec<_>>().join(", ")
                        )),
                        None => d,
                    };
                    self.diags.push(d);
                    return;
                };
                shape = next;
                path.push('.');
            }
            path.push_str(&c.name.name);
            self.component_arg(c, shape.arg, &path);
        }
        if !shape.complete {
            let names: Vec<String> = shape.next.iter().map(|n| format!("`.{}`", n.name)).collect();
            self.diags.push(
                Diagnostic::error(Code::BadProbePoint, p.span, format!("incomplete probe point `{path}`"))
                    .with_label(format!("expected {} after this", names.join(", "))),
            );
        }
    }

    fn component_arg(&mut self, c: &Component, want: Arg, path: &str) {
        let kind = c.arg.as_ref().map(|a| match a.kind {
            ExprKind::Int(_) | ExprKind::ScriptArg { as_string: false, .. } => Arg::Number,
            _ => Arg::String,
        });
        let example_arg = match path.rsplit('.').next().unwrap_or("") {
            "function" => "(\"main\")",
            "library" => "(\"libc.so.6\")",
            "statement" => "(0x1234)",
            "mark" => "(\"function__entry\")",
            "provider" => "(\"python\")",
            "randomize" => "(5)",
            "ms" | "msec" => "(100)",
            "s" | "sec" => "(1)",
            "us" | "usec" => "(500)",
            "ns" | "nsec" => "(100000)",
            "hz" => "(100)",
            "jiffies" => "(10)",
            _ => "",
        };
        let example = match (example_arg.is_empty(), path.strip_suffix(".randomize")) {
            (true, _) => String::new(),
            // The interval before `.randomize` needs its own argument.
            (false, Some(timer)) => format!("{timer}(100).randomize(5)"),
            (false, None) => format!("{path}{example_arg}"),
        };
        let bad = |msg: String, label: &str| {
            let mut d = Diagnostic::error(Code::BadProbePoint, c.span, msg).with_label(label.to_string());
            if !example.is_empty() {
                d = d.with_help(format!("for example `{example}`"));
            }
            d
        };
        let d = match (want, kind) {
            (Arg::None, Some(_)) => Some(bad(format!("`{path}` takes no argument"), "remove the argument")),
            (Arg::Number | Arg::String | Arg::NumberOrString, None) => {
                Some(bad(format!("`{path}` needs an argument"), "argument missing"))
            }
            (Arg::Number, Some(Arg::String)) => Some(bad(format!("`{path}` needs a number"), "a string")),
            (Arg::String, Some(Arg::Number)) => Some(bad(format!("`{path}` needs a string"), "a number")),
            (Arg::Optional, Some(Arg::String)) if path != "process" => {
                Some(bad(format!("`{path}` takes a number (its order), not a string"), "a string"))
            }
            _ => None,
        };
        if let Some(d) = d {
            self.diags.push(d);
        }
    }

    fn block(&mut self, b: &Block, ctx: Ctx) {
        for s in &b.stmts {
            self.stmt(s, ctx);
        }
    }

    fn stmt(&mut self, s: &Stmt, ctx: Ctx) {
        let in_loop = Ctx { loops: ctx.loops + 1, ..ctx };
        match &s.kind {
            StmtKind::Block(b) => self.block(b, ctx),
            StmtKind::Expr(e) => self.expr(e),
            StmtKind::Empty | StmtKind::Error => {}
            // SystemTap refuses it too: a function has no probe to leave.
            StmtKind::Next if ctx.in_function => self.diags.push(
                Diagnostic::error(Code::MisplacedStatement, s.span, "cannot `next` from a function")
                    .with_label("`next` leaves a probe body; this is a function")
                    .with_help("return from the function, and `next` in the probe that called it"),
            ),
            StmtKind::Next => {}
            StmtKind::If(i) => {
                self.expr(&i.cond);
                self.stmt(&i.then, ctx);
                if let Some(e) = &i.els {
                    self.stmt(e, ctx);
                }
            }
            StmtKind::While(w) => {
                self.expr(&w.cond);
                self.stmt(&w.body, in_loop);
            }
            StmtKind::For(f) => {
                for e in [&f.init, &f.cond, &f.step].into_iter().flatten() {
                    self.expr(e);
                }
                self.stmt(&f.body, in_loop);
            }
            StmtKind::Foreach(f) => {
                if f.keys.len() > 9 {
                    self.diags.push(
                        Diagnostic::error(Code::UnexpectedToken, s.span, "too many array keys")
                            .with_label(format!("{} keys; at most 9", f.keys.len())),
                    );
                }
                let marks: Vec<Sort> =
                    f.keys.iter().filter_map(|k| k.sort).chain(f.value_mark).chain(f.value_sort).collect();
                // A mark on the value variable is also the value sort: count it once.
                let marks: Vec<Sort> = if f.value_mark.is_some() && f.value_mark == f.value_sort {
                    marks[..marks.len() - 1].to_vec()
                } else {
                    marks
                };
                if let [first, second, ..] = marks[..] {
                    self.diags.push(
                        Diagnostic::error(Code::UnexpectedToken, second.span, "`foreach` sorts by one thing only")
                            .with_label("a second sort mark")
                            .with_secondary(first.span, "sorted here already")
                            .with_help("put `+` or `-` on one key, or on the array (to sort by value)"),
                    );
                }
                if !f.slice.is_empty() && f.slice.len() != f.keys.len() {
                    self.diags.push(
                        Diagnostic::error(
                            Code::UnexpectedToken,
                            s.span,
                            "the array slice and the keys differ in number",
                        )
                        .with_label(format!(
                            "{} keys, {} in the slice",
                            f.keys.len(),
                            f.slice.len()
                        )),
                    );
                }
                if f.hist.is_some() && f.keys.len() != 1 {
                    self.diags.push(
                        Diagnostic::error(Code::UnexpectedToken, s.span, "Invalid indexing of histogram")
                            .with_label("a histogram's buckets take one key: `foreach (b in @hist_log(s))`"),
                    );
                }
                for e in f.slice.iter().flatten().chain(&f.hist) {
                    self.expr(e);
                }
                if let Some(l) = &f.limit {
                    self.expr(l);
                }
                self.stmt(&f.body, in_loop);
            }
            StmtKind::Break | StmtKind::Continue if ctx.loops == 0 => {
                let word = if s.kind == StmtKind::Break { "break" } else { "continue" };
                self.diags.push(
                    Diagnostic::error(Code::MisplacedStatement, s.span, format!("`{word}` outside a loop"))
                        .with_label("not inside `while`, `for` or `foreach`"),
                );
            }
            StmtKind::Break | StmtKind::Continue => {}
            StmtKind::Return(e) => {
                if !ctx.in_function {
                    let label = if e.is_some() {
                        "a probe body cannot return a value"
                    } else {
                        "a probe body has no caller to return to"
                    };
                    self.diags.push(
                        Diagnostic::error(Code::MisplacedStatement, s.span, "`return` outside a function")
                            .with_label(label)
                            .with_help("use `next` to leave a probe early"),
                    );
                }
                if let Some(e) = e {
                    self.expr(e);
                }
            }
            StmtKind::Delete(e) => {
                if !matches!(e.kind, ExprKind::Var(_) | ExprKind::Index(_) | ExprKind::Error) {
                    self.diags.push(
                        Diagnostic::error(
                            Code::UnexpectedToken,
                            e.span,
                            "`delete` needs a variable or an array element",
                        )
                        .with_label("cannot delete this"),
                    );
                }
                self.expr(e);
            }
            StmtKind::Try(t) => {
                self.block(&t.body, ctx);
                self.block(&t.handler, ctx);
            }
        }
    }

    fn lvalue(&mut self, e: &Expr, what: &str) {
        let target = matches!(&e.kind, ExprKind::TargetPath(p) if p.pretty == 0)
            || matches!(&e.kind, ExprKind::AtOp(c) if c.name.name == "var");
        if !target
            && !matches!(e.kind, ExprKind::Var(_) | ExprKind::Index(_) | ExprKind::TargetVar(_) | ExprKind::Error)
        {
            self.diags.push(
                Diagnostic::error(Code::UnexpectedToken, e.span, format!("cannot {what} this expression"))
                    .with_label("not a variable, array element or target variable"),
            );
        }
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Int(_)
            | ExprKind::Str(_)
            | ExprKind::Var(_)
            | ExprKind::TargetVar(_)
            | ExprKind::ScriptArg { .. }
            | ExprKind::ScriptArgCount { .. }
            | ExprKind::Error => {}
            ExprKind::Index(ix) | ExprKind::In(ix) => {
                let keys = &ix.keys;
                if keys.len() > 9 {
                    self.diags.push(
                        Diagnostic::error(Code::UnexpectedToken, e.span, "too many array keys")
                            .with_label(format!("{} keys; at most 9", keys.len())),
                    );
                }
                keys.iter().for_each(|k| self.expr(k));
            }
            ExprKind::Call(c) => c.args.iter().for_each(|a| self.expr(a)),
            ExprKind::TargetPath(p) => {
                self.expr(&p.base);
                for s in &p.steps {
                    if let crate::ast::PathStep::Index(i) = s {
                        self.expr(i);
                    }
                }
            }
            ExprKind::AtOp(c) => {
                let (op, args) = (&c.name, &c.args);
                match AT_OPERATORS.iter().find(|(n, _, _)| *n == op.name) {
                    // SystemTap's operators that need its kernel-side C.
                    None if matches!(op.name.as_str(), "const" | "kregister" | "uregister") => {
                        let what = if op.name == "const" {
                            "`@const` takes the value of a C macro or constant from the kernel's headers, \
                             compiled into SystemTap's kernel module; telco-stap compiles no C"
                        } else {
                            "this operator reads registers through SystemTap's kernel-side C"
                        };
                        self.diags.push(
                            Diagnostic::error(Code::Unsupported, op.span, format!("`@{}` is not supported", op.name))
                                .with_label(what)
                                .with_help(if op.name == "const" {
                                    "write the value in the script, or `@define NAME %( value %)` once and use `@NAME`"
                                } else {
                                    "use register(\"name\")"
                                }),
                        );
                    }
                    None => {
                        let mut d = Diagnostic::error(
                            Code::UnknownOperator,
                            op.span,
                            format!("unknown operator `@{}`", op.name),
                        )
                        .with_label("no such `@` operator or macro");
                        // Prefer operators that take this many arguments.
                        let fits = AT_OPERATORS.iter().filter(|(_, lo, hi)| (*lo..=*hi).contains(&args.len()));
                        let fits: Vec<&str> = fits.map(|(n, _, _)| *n).collect();
                        let suggestion = fits
                            .iter()
                            .copied()
                            .find(|n| n.starts_with(op.name.as_str()))
                            .or_else(|| closest(&op.name, fits.iter().copied()))
                            .or_else(|| closest(&op.name, AT_OPERATORS.iter().map(|(n, _, _)| *n)));
                        if let Some(s) = suggestion {
                            d = d.with_help(format!("did you mean `@{s}`?"));
                        }
                        self.diags.push(d);
                    }
                    Some(&(name, lo, hi)) if args.len() < lo || args.len() > hi => {
                        let want = if lo == hi { format!("{lo}") } else { format!("{lo} or {hi}") };
                        self.diags.push(
                            Diagnostic::error(
                                Code::UnknownOperator,
                                e.span,
                                format!("`@{name}` takes {want} argument(s), not {}", args.len()),
                            )
                            .with_label("wrong number of arguments"),
                        );
                    }
                    Some(_) => {}
                }
                args.iter().for_each(|a| self.expr(a));
            }
            ExprKind::Unary { operand, .. } => self.expr(operand),
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::Assign { op, target, value } => {
                self.lvalue(target, if *op == AssignOp::Aggregate { "add a value (`<<<`) to" } else { "assign to" });
                self.expr(target);
                self.expr(value);
            }
            ExprKind::Ternary { cond, then, els } => {
                self.expr(cond);
                self.expr(then);
                self.expr(els);
            }
            ExprKind::IncDec { op, target, prefix } => {
                let n = self.diags.len();
                self.lvalue(target, if *op == IncDec::Inc { "increment" } else { "decrement" });
                if !prefix && self.diags.len() > n && self.newline_between(target.span.end, e.span.end) {
                    let sym = if *op == IncDec::Inc { "++" } else { "--" };
                    if let Some(d) = self.diags.last_mut() {
                        d.help = Some(format!(
                            "`;` is optional, so a `{sym}` that starts a line continues the expression before \
                             it; if `{sym}` begins a new statement, end the previous one with `;`"
                        ));
                    }
                }
                self.expr(target);
            }
        }
    }
}
