//! Globals: where each one lives (`Layout::storage`), and every load,
//! store and update of one (sharded counters and statistics, array
//! elements, strings).

use super::*;

impl Gen<'_, '_, '_> {
    /// A global's value: a long, a string in a temporary, a statistic's
    /// address (the per-thread copies merged into a temporary), an array's
    /// table.
    pub(super) fn load_global(&mut self, g: GlobalId) -> Value {
        match self.sh.layout.storage(g.0) {
            Storage::Long { off } => self.load(self.region, off as i32),
            Storage::ShardedLong { off, col, .. } => {
                let o = self.iconst(off as i64);
                let kv = self.iconst(i64::from(col));
                self.rt(Rt::ShardSum, &[self.region, o, kv])
            }
            Storage::Str { off } => {
                let t = self.temp();
                let p = self.region_addr(off);
                let cap = self.cap_val();
                self.rt(Rt::GstrLoad, &[t, p, cap]);
                t
            }
            Storage::Stat { off, .. } => self.region_addr(off),
            Storage::ShardedStat { off, desc, hists, copies, row } => {
                // Merge the per-thread copies into a temporary.
                let size = super::super::layout::stat_desc(&hists).size;
                let tmp = self.buffer(size);
                let base = self.region_addr(off);
                let shards = self.iconst(copies as i64);
                let row = self.iconst(i64::from(row));
                let d = self.const_addr(desc);
                self.rt(Rt::StatMerge, &[self.region, tmp, base, shards, row, d]);
                tmp
            }
            Storage::Table(t) => self.region_addr(t.off),
        }
    }

    /// `delete g`: a scalar back to 0 or "", a statistic emptied, an array
    /// cleared.
    pub(super) fn clear_global(&mut self, g: GlobalId) {
        match self.sh.layout.storage(g.0) {
            Storage::Long { off } => {
                let z = self.iconst(0);
                self.b.ins().store(flags(), z, self.region, off as i32);
            }
            Storage::ShardedLong { off, col, .. } => {
                let o = self.iconst(off as i64);
                let kv = self.iconst(i64::from(col));
                let z = self.iconst(0);
                self.rt(Rt::ShardSet, &[self.region, o, kv, z]);
            }
            Storage::Str { off } => {
                let p = self.region_addr(off);
                let e = self.const_addr(self.sh.layout.zero_off);
                let cap = self.cap_val();
                self.rt(Rt::GstrStore, &[p, e, cap]);
            }
            Storage::Stat { off, desc, .. } => {
                let p = self.region_addr(off);
                let d = self.const_addr(desc);
                self.rt(Rt::StatClear, &[p, d]);
            }
            Storage::ShardedStat { off, desc, copies, row, .. } => {
                let p = self.region_addr(off);
                let d = self.const_addr(desc);
                let shards = self.iconst(copies as i64);
                let row = self.iconst(i64::from(row));
                self.rt(Rt::StatClearAll, &[self.region, p, shards, row, d]);
            }
            Storage::Table(t) => {
                let p = self.region_addr(t.off);
                self.rt(Rt::MapClear, &[p]);
            }
        }
    }

    /// An array's table.
    pub(super) fn table(&self, array: GlobalId) -> Option<Table> {
        match self.sh.layout.storage(array.0) {
            Storage::Table(t) => Some(t),
            _ => None,
        }
    }

    /// A statement-level `g++`, `g--`, `g += e`, `g -= e` on a sharded
    /// counter: a plain add into this thread's row of the shards (in a
    /// target thread), or an atomic add to the counter's word (in the
    /// tracer, where the context has no slot). Returns false when `e` is
    /// not such an update.
    pub(super) fn shard_update(&mut self, e: &Expr) -> bool {
        let (g, value, negate) = match &e.kind {
            ExprKind::IncDec { op, target, .. } => match target.kind {
                ExprKind::Global(g) => (g, None, *op == IncDec::Dec),
                _ => return false,
            },
            ExprKind::Assign { op: op @ (AssignOp::Add | AssignOp::Sub), target, value } => match target.kind {
                ExprKind::Global(g) => (g, Some(&**value), *op == AssignOp::Sub),
                _ => return false,
            },
            _ => return false,
        };
        let Storage::ShardedLong { off, col: k, shards_off, row_bytes } = self.sh.layout.storage(g.0) else {
            return false;
        };
        let mut d = match value {
            Some(v) => self.expr(v),
            None => self.iconst(1),
        };
        if negate {
            d = self.b.ins().ineg(d);
        }
        let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
        let in_thread = self.b.create_block();
        let in_tracer = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().brif(slot, in_thread, &[], in_tracer, &[]);
        self.b.switch_to_block(in_thread);
        self.b.seal_block(in_thread);
        let row = self.slot_row(slot);

        let row_off = self.b.ins().imul_imm_s(row, i64::from(row_bytes));
        let base = self.region_addr(shards_off + 8 * u64::from(k));
        let addr = self.b.ins().iadd(base, row_off);
        let old = self.load(addr, 0);
        let new = self.b.ins().iadd(old, d);
        self.b.ins().store(flags(), new, addr, 0);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(in_tracer);
        self.b.seal_block(in_tracer);
        let p = self.region_addr(off);
        self.b.ins().atomic_rmw(I64, flags(), AtomicRmwOp::Add, p, d);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        true
    }

    /// A thread slot's index: (slot - threads) / sizeof(ThreadSlot).
    /// `rt_stat_add_local` inline, for a thread's own copy at `p` of a
    /// statistic whose histograms are all logarithmic: plain adds, the
    /// extremes by select, each bucket from a count of leading zeros.
    pub(super) fn stat_add_inline(&mut self, p: Value, v: Value, hists: &[HistKey]) {
        use abi::Stat;
        let add = |t: &mut Self, field: usize, by: Value| {
            let old = t.b.ins().load(I64, flags(), p, field as i32);
            let new = t.b.ins().iadd(old, by);
            t.b.ins().store(flags(), new, p, field as i32);
        };
        let n = self.b.ins().load(I64, flags(), p, core::mem::offset_of!(Stat, count) as i32);
        let n1 = self.b.ins().iadd_imm_s(n, 1);
        self.b.ins().store(flags(), n1, p, core::mem::offset_of!(Stat, count) as i32);
        // (No running state for @variance: a statistic whose @variance is
        // read is never added to inline.)
        add(self, core::mem::offset_of!(Stat, sum), v);
        let first = self.b.ins().icmp_imm_s(IntCC::Equal, n, 0);
        for (field, cc) in [
            (core::mem::offset_of!(Stat, min), IntCC::SignedLessThan),
            (core::mem::offset_of!(Stat, max), IntCC::SignedGreaterThan),
        ] {
            let old = self.b.ins().load(I64, flags(), p, field as i32);
            let better = self.b.ins().icmp(cc, v, old);
            let take = self.b.ins().bor(first, better);
            let new = self.b.ins().select(take, v, old);
            self.b.ins().store(flags(), new, p, field as i32);
        }
        let desc = super::super::layout::stat_desc(hists);
        for h in desc.hists.iter().take(desc.nhists as usize) {
            // log_bucket (rt.c): B0 + 64 - clz(|v|), mirrored below B0 for
            // negative v (0 -> B0; i64::MIN -> 0).
            let a = self.b.ins().iabs(v);
            let z = self.b.ins().clz(a);
            let top = self.iconst(i64::from(abi::HIST_LOG_BUCKET0) + 64);
            let up = self.b.ins().isub(top, z);
            let nb = self.iconst(i64::from(abi::HIST_LOG_BUCKETS));
            let down = self.b.ins().isub(nb, up);
            let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
            let b = self.b.ins().select(neg, down, up);
            let off = self.b.ins().ishl_imm_u(b, 3);
            let at = self.b.ins().iadd(p, off);
            let c = self.b.ins().load(I64, flags(), at, h.offset as i32);
            let c1 = self.b.ins().iadd_imm_s(c, 1);
            self.b.ins().store(flags(), c1, at, h.offset as i32);
        }
    }

    pub(super) fn slot_row(&mut self, slot: Value) -> Value {
        let index = self.b.ins().load(types::I32, flags(), slot, core::mem::offset_of!(abi::ThreadSlot, index) as i32);
        self.b.ins().uextend(types::I64, index)
    }

    /// Evaluate an array's keys into a key buffer: (table address, buffer).
    pub(super) fn keys(&mut self, array: GlobalId, keys: &[Expr]) -> (Value, Value) {
        let vals: Vec<Value> = keys.iter().map(|k| self.expr(k)).collect();
        let buf = self.buffer(8 * vals.len() as u32);
        for (i, v) in vals.into_iter().enumerate() {
            self.b.ins().store(flags(), v, buf, 8 * i as i32);
        }
        let off = self.table(array).map_or(0, |t| t.off);
        (self.region_addr(off), buf)
    }

    /// The value address of an array element, created when absent (an
    /// overflow raises the error).
    pub(super) fn element_for_write(&mut self, array: GlobalId, keys: &[Expr], span: Span) -> Value {
        let (tab, kb) = self.keys(array, keys);
        let one = self.iconst(1);
        let p = self.rt(Rt::MapFind, &[tab, kb, one]);
        let full = self.b.ins().icmp_imm_s(IntCC::Equal, p, 1);
        // SystemTap names the limit that was hit.
        let declared = match &self.sh.program.globals[array.0 as usize].kind {
            GlobalKind::Array { capacity: Some(c), .. } => Some(*c),
            _ => None,
        };
        let msg = match declared {
            Some(c) => format!("Array overflow, check size limit ({c})"),
            None => "Array overflow, check MAXMAPENTRIES".to_string(),
        };
        let err = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(err);
        self.b.ins().brif(full, err, &[], cont, &[]);
        self.b.switch_to_block(err);
        self.b.seal_block(err);
        let off = self.sh.layout.string(msg.as_bytes());
        let m = self.region_addr(off);
        self.user_error(m, span);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
        p
    }

    /// The value address of an array element for reading, or 0.
    pub(super) fn element_for_read(&mut self, array: GlobalId, keys: &[Expr]) -> Value {
        let (tab, kb) = self.keys(array, keys);
        let zero = self.iconst(0);
        self.rt(Rt::MapFind, &[tab, kb, zero])
    }

    /// `target op= value`; returns the new value.
    pub(super) fn assign(&mut self, op: AssignOp, target: &Expr, value: &Expr, span: Span) -> Value {
        let bop = match op {
            AssignOp::Assign | AssignOp::Aggregate => None,
            AssignOp::Add => Some(BinOp::Add),
            AssignOp::Sub => Some(BinOp::Sub),
            AssignOp::Mul => Some(BinOp::Mul),
            AssignOp::Div => Some(BinOp::Div),
            AssignOp::Mod => Some(BinOp::Mod),
            AssignOp::Shl => Some(BinOp::Shl),
            AssignOp::Shr => Some(BinOp::Shr),
            AssignOp::BitAnd => Some(BinOp::BitAnd),
            AssignOp::BitOr => Some(BinOp::BitOr),
            AssignOp::BitXor => Some(BinOp::BitXor),
            AssignOp::Concat => Some(BinOp::Concat),
        };
        if op == AssignOp::Aggregate {
            let v = self.expr(value);
            let (p, desc) = match &target.kind {
                ExprKind::Global(g) => match self.sh.layout.storage(g.0) {
                    Storage::ShardedStat { off, desc, hists, copies, row: row_bytes } => {
                        {
                            // This thread's own copy (in a target thread), or
                            // the shared one (in the tracer).
                            let d = self.const_addr(desc);
                            let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                            let own = self.b.create_block();
                            let shared = self.b.create_block();
                            let done = self.b.create_block();
                            self.b.ins().brif(slot, own, &[], shared, &[]);
                            self.b.switch_to_block(own);
                            self.b.seal_block(own);
                            let row = self.slot_row(slot);
                            let row_off = self.b.ins().imul_imm_s(row, i64::from(row_bytes));
                            let base = self.region_addr(copies);
                            let p = self.b.ins().iadd(base, row_off);
                            if hists.iter().all(|h| matches!(h, HistKey::Log)) {
                                self.stat_add_inline(p, v, &hists);
                            } else {
                                self.rt(Rt::StatAddLocal, &[p, v, d]);
                            }
                            self.b.ins().jump(done, &[]);
                            self.b.switch_to_block(shared);
                            self.b.seal_block(shared);
                            let p = self.region_addr(off);
                            self.rt(Rt::StatAdd, &[p, v, d]);
                            self.b.ins().jump(done, &[]);
                            self.b.switch_to_block(done);
                            self.b.seal_block(done);
                            return v;
                        }
                    }
                    Storage::Stat { off, desc, .. } => (self.region_addr(off), desc),
                    _ => return v,
                },
                ExprKind::Index { array, keys } => {
                    let desc = self.table(*array).map_or(0, |t| t.desc);
                    (self.element_for_write(*array, keys, span), desc)
                }
                _ => return v,
            };
            let d = self.const_addr(desc);
            self.rt(Rt::StatAdd, &[p, v, d]);
            return v;
        }
        let v = self.expr(value);
        if target.ty == Ty::String {
            return self.assign_string(bop.is_some(), target, v, span);
        }
        // Division by zero is checked before any store.
        if let Some(BinOp::Div | BinOp::Mod) = bop {
            let zero = self.b.ins().icmp_imm_s(IntCC::Equal, v, 0);
            self.raise_if(zero, abi::ERR_DIV0, span);
        }
        match &target.kind {
            ExprKind::Local(l) => {
                let LocalStore::Long(var) = self.locals[l.0 as usize] else { return v };
                let new = match bop {
                    Some(op) => {
                        let old = self.b.use_var(var);
                        self.arith(op, old, v, span)
                    }
                    None => v,
                };
                self.b.def_var(var, new);
                new
            }
            ExprKind::Global(g) => {
                let (off, sharded) = match self.sh.layout.storage(g.0) {
                    Storage::Long { off } => (off, None),
                    Storage::ShardedLong { off, col, .. } => (off, Some(col)),
                    _ => return v,
                };
                if let Some(k) = sharded {
                    // Tracer-side code only (the analysis keeps target code
                    // to plain adds): the sum, the operator, then set.
                    let new = match bop {
                        Some(op) => {
                            let o = self.iconst(off as i64);
                            let kv = self.iconst(i64::from(k));
                            let old = self.rt(Rt::ShardSum, &[self.region, o, kv]);
                            self.arith(op, old, v, span)
                        }
                        None => v,
                    };
                    let o = self.iconst(off as i64);
                    let kv = self.iconst(i64::from(k));
                    self.rt(Rt::ShardSet, &[self.region, o, kv, new]);
                    return new;
                }
                let p = self.region_addr(off);
                self.update_long(p, bop, v, span)
            }
            ExprKind::Index { array, keys } => {
                let p = self.element_for_write(*array, keys, span);
                self.update_long(p, bop, v, span)
            }
            // Guru mode (pass 2 checked -g): the saved register the
            // trampoline restores, so the function (or its caller, for
            // `$return`) sees the new value.
            ExprKind::Target(t) => {
                self.ctx_escapes = true;
                let new = match bop {
                    Some(op) => {
                        let old = self.expr(target);
                        self.arith(op, old, v, span)
                    }
                    None => v,
                };
                let (f, n) = match t {
                    Target::Arg(n) => (Rt::SetArg, i64::from(*n)),
                    Target::Return => (Rt::SetArg, 0),
                    Target::Register(r) => (Rt::SetRegister, i64::from(*r)),
                };
                let nv = self.iconst(n);
                self.rt(f, &[self.ctx, nv, new]);
                new
            }
            _ => v,
        }
    }

    /// Store to a shared long: atomic for every operator, so concurrent
    /// `n++` from many threads never loses a count.
    pub(super) fn update_long(&mut self, p: Value, op: Option<BinOp>, v: Value, span: Span) -> Value {
        let rmw = match op {
            None => {
                self.b.ins().atomic_store(flags(), v, p);
                return v;
            }
            Some(BinOp::Add) => Some(AtomicRmwOp::Add),
            Some(BinOp::Sub) => Some(AtomicRmwOp::Sub),
            Some(BinOp::BitAnd) => Some(AtomicRmwOp::And),
            Some(BinOp::BitOr) => Some(AtomicRmwOp::Or),
            Some(BinOp::BitXor) => Some(AtomicRmwOp::Xor),
            _ => None,
        };
        let op = op.unwrap_or(BinOp::Add);
        if let Some(r) = rmw {
            let old = self.b.ins().atomic_rmw(I64, flags(), r, p, v);
            return self.arith(op, old, v, span);
        }
        // Other operators: a compare-and-swap loop.
        let head = self.b.create_block();
        let done = self.b.create_block();
        self.b.append_block_param(done, I64);
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let old = self.b.ins().atomic_load(I64, flags(), p);
        let new = self.arith(op, old, v, span);
        let seen = self.b.ins().atomic_cas(flags(), p, old, new);
        let ok = self.b.ins().icmp(IntCC::Equal, seen, old);
        self.b.ins().brif(ok, done, &[new.into()], head, &[]);
        self.b.seal_block(head);
        self.b.switch_to_block(done);
        self.b.seal_block(done);
        self.b.block_params(done)[0]
    }

    pub(super) fn assign_string(&mut self, concat: bool, target: &Expr, v: Value, span: Span) -> Value {
        let cap = self.cap_val();
        match &target.kind {
            ExprKind::Local(l) => {
                let LocalStore::Str(ss) = self.locals[l.0 as usize] else { return v };
                let p = self.b.ins().stack_addr(I64, ss, 0);
                if concat {
                    self.rt(Rt::Concat, &[p, p, v, cap]);
                } else {
                    self.rt(Rt::Strcpy, &[p, v, cap]);
                }
                p
            }
            ExprKind::Global(_) | ExprKind::Index { .. } => {
                let p = match &target.kind {
                    ExprKind::Global(g) => match self.sh.layout.storage(g.0) {
                        Storage::Str { off } => self.region_addr(off),
                        _ => return v,
                    },
                    ExprKind::Index { array, keys } => self.element_for_write(*array, keys, span),
                    _ => return v,
                };
                let t = self.temp();
                if concat {
                    self.rt(Rt::GstrLoad, &[t, p, cap]);
                    self.rt(Rt::Concat, &[t, t, v, cap]);
                } else {
                    self.rt(Rt::Strcpy, &[t, v, cap]);
                }
                self.rt(Rt::GstrStore, &[p, t, cap]);
                t
            }
            _ => v,
        }
    }
}
