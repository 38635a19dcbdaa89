//! Statements: control flow, loops, `foreach`, `delete`, `try`.

use super::*;

impl Gen<'_, '_, '_> {
    pub(super) fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Expr(e) => {
                self.charge(s.span);
                if !self.shard_update(e) {
                    self.expr(e);
                }
            }
            StmtKind::Block(b) => {
                for s in b {
                    self.stmt(s);
                }
            }
            StmtKind::If { cond, then, els } => {
                self.charge(s.span);
                let c = self.expr(cond);
                let tb = self.b.create_block();
                let eb = self.b.create_block();
                let done = self.b.create_block();
                self.b.ins().brif(c, tb, &[], eb, &[]);
                self.b.switch_to_block(tb);
                self.b.seal_block(tb);
                self.stmt(then);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(eb);
                self.b.seal_block(eb);
                if let Some(e) = els {
                    self.stmt(e);
                }
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
            }
            StmtKind::While { cond, body } => self.gen_loop(None, Some(cond), None, body, s.span),
            StmtKind::For { init, cond, step, body } => {
                self.gen_loop(init.as_ref(), cond.as_ref(), step.as_ref(), body, s.span)
            }
            StmtKind::Foreach { array, keys, value, sort, limit, slice, body } => {
                self.gen_foreach(*array, keys, *value, *sort, limit.as_ref(), slice, body, s.span)
            }
            StmtKind::Break | StmtKind::Continue => {
                self.charge(s.span);
                if let Some(&(brk, cont)) = self.loops.last() {
                    let t = if matches!(s.kind, StmtKind::Break) { brk } else { cont };
                    self.b.ins().jump(t, &[]);
                    self.fresh_block();
                }
            }
            StmtKind::Next => {
                self.charge(s.span);
                let exit = self.exit;
                self.b.ins().jump(exit, &[]);
                self.fresh_block();
            }
            StmtKind::Return(e) => {
                self.charge(s.span);
                if let Some(e) = e {
                    let v = self.expr(e);
                    if e.ty == Ty::String {
                        if let Some(buf) = self.ret_buf {
                            let cap = self.cap_val();
                            self.rt(Rt::Strcpy, &[buf, v, cap]);
                        }
                    } else if e.ty == Ty::Long {
                        self.b.def_var(self.ret_var, v);
                    }
                }
                let exit = self.exit;
                self.b.ins().jump(exit, &[]);
                self.fresh_block();
            }
            StmtKind::DeleteLocal(l) => {
                self.charge(s.span);
                match self.locals[l.0 as usize] {
                    LocalStore::Long(v) => {
                        let z = self.iconst(0);
                        self.b.def_var(v, z);
                    }
                    LocalStore::Str(ss) => {
                        let p = self.b.ins().stack_addr(I64, ss, 0);
                        let z = self.b.ins().iconst(types::I8, 0);
                        self.b.ins().store(flags(), z, p, 0);
                    }
                }
            }
            StmtKind::DeleteGlobal(g) => {
                self.charge(s.span);
                self.clear_global(*g);
            }
            StmtKind::DeleteElement { array, keys } => {
                self.charge(s.span);
                let (tab, kb) = self.keys(*array, keys);
                self.rt(Rt::MapDelete, &[tab, kb]);
            }
            StmtKind::Try { body, var, handler } => {
                self.may_error = true;
                let catch = self.b.create_block();
                let done = self.b.create_block();
                let outer = std::mem::replace(&mut self.error_target, catch);
                for s in body {
                    self.stmt(s);
                }
                self.error_target = outer;
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(catch);
                self.b.seal_block(catch);
                // MAXACTION cannot be caught.
                let e = self.load32(self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
                let fatal = self.b.ins().icmp_imm_s(IntCC::Equal, e, i64::from(abi::ERR_MAXACTION));
                let handle = self.b.create_block();
                let exit = self.exit;
                self.b.ins().brif(fatal, exit, &[], handle, &[]);
                self.b.switch_to_block(handle);
                self.b.seal_block(handle);
                if let Some(v) = var {
                    if let LocalStore::Str(ss) = self.locals[v.0 as usize] {
                        let p = self.b.ins().stack_addr(I64, ss, 0);
                        let cap = self.cap_val();
                        self.rt(Rt::ErrorMessage, &[p, self.ctx, cap]);
                    }
                }
                self.store32(0, self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
                self.charge(s.span);
                for s in handler {
                    self.stmt(s);
                }
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
            }
        }
    }

    pub(super) fn gen_loop(
        &mut self,
        init: Option<&Expr>,
        cond: Option<&Expr>,
        step: Option<&Expr>,
        body: &Stmt,
        span: Span,
    ) {
        if let Some(i) = init {
            self.charge(span);
            self.expr(i);
        }
        let head = self.b.create_block();
        let body_b = self.b.create_block();
        let step_b = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        // SystemTap charges an iteration to the loop body's statement.
        self.charge(body.span);
        match cond {
            Some(c) => {
                let v = self.expr(c);
                self.b.ins().brif(v, body_b, &[], done, &[]);
            }
            None => {
                self.b.ins().jump(body_b, &[]);
            }
        }
        self.b.switch_to_block(body_b);
        self.b.seal_block(body_b);
        self.loops.push((done, step_b));
        self.stmt(body);
        self.loops.pop();
        self.b.ins().jump(step_b, &[]);
        self.b.switch_to_block(step_b);
        self.b.seal_block(step_b);
        if let Some(s) = step {
            self.expr(s);
        }
        self.b.ins().jump(head, &[]);
        self.b.seal_block(head);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn gen_foreach(
        &mut self,
        array: GlobalId,
        keys: &[LocalId],
        value: Option<LocalId>,
        sort: Option<(SortBy, SortDir)>,
        limit: Option<&Expr>,
        slice: &[Option<Expr>],
        body: &Stmt,
        span: Span,
    ) {
        self.charge(span);
        let Some(t) = self.table(array) else { return };
        let lim = match limit {
            Some(e) => {
                let v = self.expr(e);
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
                let z = self.iconst(0);
                self.b.ins().select(neg, z, v)
            }
            None => self.iconst(-1),
        };
        // `a[k, *]`: each given key, evaluated once (a string copied: the
        // body may change what it was read from).
        let wanted: Vec<Option<(Value, bool)>> = slice
            .iter()
            .map(|k| {
                k.as_ref().map(|e| {
                    let v = self.expr(e);
                    if e.ty == Ty::String {
                        let copy = self.temp();
                        let cap = self.cap_val();
                        self.rt(Rt::Strcpy, &[copy, v, cap]);
                        (copy, true)
                    } else {
                        (v, false)
                    }
                })
            })
            .collect();
        let (col, desc) = match sort {
            None => (-2, 0),
            Some((SortBy::Key(i), d)) => (i as i64, i64::from(d == SortDir::Desc)),
            Some((SortBy::Value, d)) => (-1, i64::from(d == SortDir::Desc)),
            // rt_map_collect's columns for a statistic's aggregates.
            Some((SortBy::Aggregate(op), d)) => {
                let col = match op {
                    AggOp::Count => -1,
                    AggOp::Sum => -3,
                    AggOp::Min => -4,
                    AggOp::Max => -5,
                    AggOp::Avg | AggOp::Variance => -6,
                };
                (col, i64::from(d == SortDir::Desc))
            }
        };
        let tab = self.region_addr(t.off);
        let buf = self.buffer(t.capacity.saturating_mul(4));
        let colv = self.iconst(col);
        let descv = self.iconst(desc);
        let n = self.rt(Rt::MapCollect, &[tab, buf, colv, descv, lim]);
        let idx = self.b.declare_var(I64);
        let z = self.iconst(0);
        self.b.def_var(idx, z);
        let head = self.b.create_block();
        let body_b = self.b.create_block();
        let step_b = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let i = self.b.use_var(idx);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, i, n);
        let fetch = self.b.create_block();
        self.b.ins().brif(more, fetch, &[], done, &[]);
        self.b.switch_to_block(fetch);
        self.b.seal_block(fetch);
        self.charge(span);
        let i4 = self.b.ins().ishl_imm_u(i, 2);
        let p = self.b.ins().iadd(buf, i4);
        let si = self.b.ins().load(types::I32, flags(), p, 0);
        let si = self.b.ins().uextend(I64, si);
        let slot = self.rt(Rt::MapSlot, &[tab, si]);
        self.b.ins().brif(slot, body_b, &[], step_b, &[]);
        self.b.switch_to_block(body_b);
        self.b.seal_block(body_b);
        // An element of another slice: on to the next (it counted toward
        // the limit, as in SystemTap).
        for (k, w) in wanted.iter().enumerate() {
            let (Some((want, is_str)), Some(&off)) = (w, t.key_off.get(k)) else { continue };
            let here = self.b.ins().iadd_imm_s(slot, off as i64);
            let differs = if *is_str {
                let c = self.rt(Rt::Strcmp, &[here, *want]);
                self.b.ins().icmp_imm_s(IntCC::NotEqual, c, 0)
            } else {
                let have = self.load(slot, off as i32);
                self.b.ins().icmp(IntCC::NotEqual, have, *want)
            };
            let same = self.b.create_block();
            self.b.ins().brif(differs, step_b, &[], same, &[]);
            self.b.switch_to_block(same);
            self.b.seal_block(same);
        }
        for (k, l) in keys.iter().enumerate() {
            let off = t.key_off[k] as i64;
            match self.locals[l.0 as usize] {
                LocalStore::Long(v) => {
                    let x = self.load(slot, off as i32);
                    self.b.def_var(v, x);
                }
                LocalStore::Str(ss) => {
                    let dst = self.b.ins().stack_addr(I64, ss, 0);
                    let src = self.b.ins().iadd_imm_s(slot, off);
                    let cap = self.cap_val();
                    self.rt(Rt::Strcpy, &[dst, src, cap]);
                }
            }
        }
        if let Some(v) = value {
            let vp = self.b.ins().iadd_imm_s(slot, i64::from(t.value_off));
            match self.locals[v.0 as usize] {
                LocalStore::Long(var) => {
                    let x = self.load(vp, 0);
                    self.b.def_var(var, x);
                }
                LocalStore::Str(ss) => {
                    let dst = self.b.ins().stack_addr(I64, ss, 0);
                    let cap = self.cap_val();
                    self.rt(Rt::GstrLoad, &[dst, vp, cap]);
                }
            }
        }
        self.loops.push((done, step_b));
        self.stmt(body);
        self.loops.pop();
        self.b.ins().jump(step_b, &[]);
        self.b.switch_to_block(step_b);
        self.b.seal_block(step_b);
        let i = self.b.use_var(idx);
        let i1 = self.b.ins().iadd_imm_s(i, 1);
        self.b.def_var(idx, i1);
        self.b.ins().jump(head, &[]);
        self.b.seal_block(head);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
    }
}
