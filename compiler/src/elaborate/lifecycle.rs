//! Lifecycle probes (`process.begin`, `process.end`, `process.thread.begin`,
//! `process.thread.end`) where they happen inside a process: each becomes,
//! besides its own point (which pass 5 runs by a remote call when it
//! starts a process or sees one exec: `runtime/src/session/lifecycle.rs`), a probe on
//! a function of the GNU C library that every such event passes through,
//! with the same body and a guard:
//!
//! | point | hooked (libc.so.6) | guard |
//! |---|---|---|
//! | `process.begin` in a forked child | the return of `_Fork` | `returnval() == 0` |
//! | `process.end` | the entry of `_exit` (`exit` ends there) | |
//! | `process.thread.begin` | the entry of `__ctype_init` (`start_thread` calls it first) | `tid() != pid()` |
//! | `process.thread.end` | the entry of `__call_tls_dtors` (`start_thread` after the thread function, `pthread_exit` too) | `tid() != pid()` |
//!
//! The guard runs as the probe's condition (and with the written one).
//! `process("P")....` hooks only in processes running P
//! (`FunctionPoint::only_exe`). Not seen: a process killed by a signal ends
//! without `_exit`; threads made by a raw `clone`, and a program that does
//! not use glibc (2.34 or later), have no such functions.

use super::points::Resolver;
use crate::ast::BinOp;
use crate::diag::{Code, Diagnostic};
use crate::program::builtins::Builtin;
use crate::program::{Expr, ExprKind, Point, Probe, Ty};
use crate::span::Span;

/// The C library function a lifecycle point hooks, whether at its return,
/// and the guard.
fn hook_of(p: &Point) -> Option<(&'static str, bool, Guard)> {
    Some(match p {
        Point::ProcessBegin { .. } => ("_Fork", true, Guard::ForkChild),
        Point::ProcessEnd { .. } => ("_exit", false, Guard::None),
        Point::ThreadBegin { .. } => ("__ctype_init", false, Guard::NotMainThread),
        Point::ThreadEnd { .. } => ("__call_tls_dtors", false, Guard::NotMainThread),
        _ => return None,
    })
}

#[derive(Clone, Copy)]
enum Guard {
    None,
    ForkChild,
    NotMainThread,
}

fn guard_expr(g: Guard, span: Span) -> Option<Expr> {
    let e = |kind| Expr { kind, ty: Ty::Long, span };
    let call = |func| e(ExprKind::Builtin { func, args: Vec::new() });
    let cmp = |op, lhs, rhs| e(ExprKind::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) });
    match g {
        Guard::None => None,
        Guard::ForkChild => Some(cmp(BinOp::Eq, call(Builtin::Returnval), e(ExprKind::Long(0)))),
        Guard::NotMainThread => Some(cmp(BinOp::Ne, call(Builtin::Tid), call(Builtin::Pid))),
    }
}

/// `probes` with a hook probe added for every lifecycle point.
pub fn hooks(mut probes: Vec<Probe>, resolver: &mut Resolver<'_>, diags: &mut Vec<Diagnostic>) -> Vec<Probe> {
    let mut added = Vec::new();
    for p in &probes {
        for pt in &p.points {
            let Some((symbol, ret, guard)) = hook_of(pt) else { continue };
            let module = match pt {
                Point::ProcessBegin { module }
                | Point::ProcessEnd { module }
                | Point::ThreadBegin { module }
                | Point::ThreadEnd { module } => module.clone(),
                _ => None,
            };
            let name = super::show::point_name(pt);
            let f = match resolver.libc_function(module.as_deref(), symbol, ret) {
                Ok(Some(f)) => f,
                Ok(None) => continue,
                Err(why) => {
                    let threads = matches!(pt, Point::ThreadBegin { .. } | Point::ThreadEnd { .. });
                    let d = if threads {
                        Diagnostic::error(Code::Unsupported, p.span, format!("`{name}` cannot be seen: {why}"))
                            .with_label("this probe")
                            .with_help("threads are seen where the C library starts and ends them")
                    } else {
                        let event = if ret { "in forked children" } else { "when a process exits" };
                        Diagnostic::warning(Code::Unsupported, p.span, format!("`{name}` will not fire {event}: {why}"))
                            .with_label("this probe")
                            .with_help(
                                "it still fires when telco-stap starts or attaches to a process, and at each exec",
                            )
                    };
                    diags.push(d);
                    continue;
                }
            };
            let condition = match (guard_expr(guard, p.span), p.condition.clone()) {
                (Some(g), Some(c)) => Some(Expr {
                    kind: ExprKind::Binary { op: BinOp::And, lhs: Box::new(g), rhs: Box::new(c) },
                    ty: Ty::Long,
                    span: p.span,
                }),
                (g, c) => g.or(c),
            };
            added.push(Probe {
                points: vec![Point::Function(f)],
                written: p.written.clone(),
                condition,
                locals: p.locals.clone(),
                body: p.body.clone(),
                span: p.span,
                lifecycle: Some(name),
            });
        }
    }
    // Thread points have nothing to run at a start or an exec but a
    // thread.begin at attach; they stay for that.
    probes.extend(added);
    probes
}
