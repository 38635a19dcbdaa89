//! Expressions: constants, locals, operators, calls, target values.

use super::frame::abi_off_entry;
use super::*;

impl Gen<'_, '_, '_> {
    pub(super) fn expr(&mut self, e: &Expr) -> Value {
        match &e.kind {
            ExprKind::Long(n) => self.iconst(*n),
            ExprKind::String(s) => {
                let off = self.sh.layout.string(s);
                self.const_addr(off)
            }
            ExprKind::Local(l) => match self.locals[l.0 as usize] {
                LocalStore::Long(v) => self.b.use_var(v),
                LocalStore::Str(ss) => self.b.ins().stack_addr(I64, ss, 0),
            },
            ExprKind::Global(g) => self.load_global(*g),
            ExprKind::Index { array, keys } => {
                let p = self.element_for_read(*array, keys);
                match e.ty {
                    Ty::Stat => p,
                    Ty::String => {
                        let zero = self.const_addr(self.sh.layout.zero_off);
                        let absent = self.b.ins().icmp_imm_s(IntCC::Equal, p, 0);
                        let p = self.b.ins().select(absent, zero, p);
                        let t = self.temp();
                        let cap = self.cap_val();
                        self.rt(Rt::GstrLoad, &[t, p, cap]);
                        t
                    }
                    _ => {
                        let zero = self.const_addr(self.sh.layout.zero_off);
                        let absent = self.b.ins().icmp_imm_s(IntCC::Equal, p, 0);
                        let p = self.b.ins().select(absent, zero, p);
                        self.load(p, 0)
                    }
                }
            }
            ExprKind::Target(Target::Register(r)) => {
                let idx = self.iconst(i64::from(*r));
                self.rt(Rt::Register, &[self.ctx, idx])
            }
            ExprKind::Target(t) => {
                let n = match t {
                    Target::Arg(n) => i64::from(*n),
                    _ => 0,
                };
                if n == 0 {
                    let idx = self.iconst(0);
                    self.rt(Rt::Register, &[self.ctx, idx])
                } else {
                    let nv = self.iconst(n);
                    self.rt(Rt::Arg, &[self.region, self.ctx, nv])
                }
            }
            ExprKind::Call { func, args } => self.call(*func, args, e.ty),
            ExprKind::Builtin { func, args } => self.builtin(*func, args, e),
            ExprKind::Unary { op, operand } => {
                let v = self.expr(operand);
                match op {
                    UnOp::Neg => self.b.ins().ineg(v),
                    UnOp::Plus => v,
                    UnOp::Not => {
                        let c = self.b.ins().icmp_imm_s(IntCC::Equal, v, 0);
                        self.bool_to_long(c)
                    }
                    UnOp::BitNot => self.b.ins().bnot(v),
                }
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, e.span),
            ExprKind::Assign { op, target, value } => self.assign(*op, target, value, e.span),
            ExprKind::IncDec { op, prefix, target } => {
                let one = Expr { kind: ExprKind::Long(1), ty: Ty::Long, span: e.span };
                let aop = if *op == IncDec::Inc { AssignOp::Add } else { AssignOp::Sub };
                let new = self.assign(aop, target, &one, e.span);
                if *prefix {
                    new
                } else if *op == IncDec::Inc {
                    self.b.ins().iadd_imm_s(new, -1)
                } else {
                    self.b.ins().iadd_imm_s(new, 1)
                }
            }
            ExprKind::Ternary { cond, then, els } => {
                let c = self.expr(cond);
                let tb = self.b.create_block();
                let eb = self.b.create_block();
                let done = self.b.create_block();
                self.b.append_block_param(done, I64);
                // A string result is copied into one temporary both arms share.
                let shared = (e.ty == Ty::String).then(|| self.temp());
                self.b.ins().brif(c, tb, &[], eb, &[]);
                self.b.switch_to_block(tb);
                self.b.seal_block(tb);
                for (arm, block) in [(then, tb), (els, eb)] {
                    if block == eb {
                        self.b.switch_to_block(eb);
                        self.b.seal_block(eb);
                    }
                    let mut v = self.expr(arm);
                    if let Some(t) = shared {
                        let cap = self.cap_val();
                        self.rt(Rt::Strcpy, &[t, v, cap]);
                        v = t;
                    }
                    self.b.ins().jump(done, &[v.into()]);
                }
                self.b.switch_to_block(done);
                self.b.seal_block(done);
                self.b.block_params(done)[0]
            }
            ExprKind::In { array, keys } => {
                let p = self.element_for_read(*array, keys);
                let c = self.b.ins().icmp_imm_s(IntCC::NotEqual, p, 0);
                self.bool_to_long(c)
            }
            ExprKind::Entry(inner) if self.at_entry => self.expr(inner),
            ExprKind::Entry(inner) => {
                // In the return handler: the value the entry handler saved.
                let k = self.entry_next as usize;
                self.entry_next += 1;
                let off: u32 = self.entry_sizes.iter().take(k).sum();
                let base = self.load(self.ctx, abi_off_entry());
                let none = self.b.ins().icmp_imm_s(IntCC::Equal, base, 0);
                let zero = self.const_addr(self.sh.layout.zero_off);
                let p = self.b.ins().iadd_imm_s(base, i64::from(off));
                let p = self.b.ins().select(none, zero, p);
                if inner.ty == Ty::String {
                    let t = self.temp();
                    let cap = self.cap_val();
                    self.rt(Rt::Strcpy, &[t, p, cap]);
                    t
                } else {
                    self.load(p, 0)
                }
            }
            ExprKind::Aggregate { op, stat, shift } => {
                let p = self.expr(stat);
                // @variance: 5 for a scalar statistic, 6 for an array's
                // element (SystemTap combines those differently), the bit
                // shift above.
                let opn = match op {
                    AggOp::Count => 0,
                    AggOp::Sum => 1,
                    AggOp::Min => 2,
                    AggOp::Max => 3,
                    AggOp::Avg => 4,
                    AggOp::Variance => {
                        let element = matches!(stat.kind, ExprKind::Index { .. });
                        (if element { 6 } else { 5 }) | (i64::from(*shift) << 8)
                    }
                };
                let opv = self.iconst(opn);
                let loc = self.sh.loc(e.span);
                let locv = self.iconst(i64::from(loc));
                let v = self.rt(Rt::StatGet, &[self.ctx, p, opv, locv]);
                if opn >= 2 {
                    self.check_error();
                }
                v
            }
            ExprKind::HistBucket { hist, index } => self.hist_bucket(hist, index, e.span),
            ExprKind::HistLog { .. } | ExprKind::HistLinear { .. } => {
                // Only printable; `print` handles it. Anywhere else it has no value.
                self.iconst(0)
            }
        }
    }

    pub(super) fn call(&mut self, func: FuncId, args: &[Expr], ty: Ty) -> Value {
        let f = &self.sh.program.functions[func.0 as usize];
        let returns_string = f.ret == Ty::String;
        self.calls_functions = true;
        self.ctx_escapes = true;
        self.may_error = true;
        // The callee charges the MAXACTION budget: this handler sets it up
        // (an `@entry` handler has no statement of its own that would).
        if !self.static_actions {
            self.uses_actions = true;
        }
        let mut vals = vec![self.region, self.ctx];
        for a in args {
            let v = self.expr(a);
            vals.push(v);
        }
        let buf = if returns_string {
            let t = self.temp();
            vals.push(t);
            Some(t)
        } else {
            None
        };
        let r = match self.fn_refs.get(&func.0) {
            Some(&r) => r,
            None => {
                let sig = self.sh.func_signature(f);
                let sref = self.b.import_signature(sig);
                let name = self.b.func.declare_imported_user_function(UserExternalName::new(NS_FUNC, func.0));
                let r = self.b.import_function(ir::ExtFuncData {
                    name: ir::ExternalName::user(name),
                    signature: sref,
                    colocated: true,
                    patchable: false,
                });
                self.fn_refs.insert(func.0, r);
                r
            }
        };
        let call = self.b.ins().call(r, &vals);
        let result = self.b.inst_results(call)[0];
        self.check_error();
        match (ty, buf) {
            (Ty::String, Some(t)) => t,
            _ => result,
        }
    }

    pub(super) fn divide(&mut self, op: BinOp, l: Value, r: Value, span: Span) -> Value {
        let zero = self.b.ins().icmp_imm_s(IntCC::Equal, r, 0);
        self.raise_if(zero, abi::ERR_DIV0, span);
        // MIN / -1 = MIN and MIN % -1 = 0, as SystemTap; idiv would trap.
        let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, r, -1);
        let one = self.iconst(1);
        let d = self.b.ins().select(m1, one, r);
        if op == BinOp::Div {
            let q = self.b.ins().sdiv(l, d);
            let neg = self.b.ins().ineg(l);
            self.b.ins().select(m1, neg, q)
        } else {
            let q = self.b.ins().srem(l, d);
            let z = self.iconst(0);
            self.b.ins().select(m1, z, q)
        }
    }

    pub(super) fn arith(&mut self, op: BinOp, l: Value, r: Value, span: Span) -> Value {
        match op {
            BinOp::Add => self.b.ins().iadd(l, r),
            BinOp::Sub => self.b.ins().isub(l, r),
            BinOp::Mul => self.b.ins().imul(l, r),
            BinOp::Div | BinOp::Mod => self.divide(op, l, r, span),
            BinOp::Shl => self.b.ins().ishl(l, r),
            BinOp::Shr => self.b.ins().sshr(l, r),
            BinOp::UShr => self.b.ins().ushr(l, r),
            BinOp::BitAnd => self.b.ins().band(l, r),
            BinOp::BitOr => self.b.ins().bor(l, r),
            BinOp::BitXor => self.b.ins().bxor(l, r),
            _ => l,
        }
    }

    pub(super) fn binary(&mut self, op: BinOp, lhs: &Expr, rhs: &Expr, span: Span) -> Value {
        match op {
            BinOp::And | BinOp::Or => {
                let l = self.expr(lhs);
                let rb = self.b.create_block();
                let done = self.b.create_block();
                self.b.append_block_param(done, I64);
                let lc = self.b.ins().icmp_imm_s(IntCC::NotEqual, l, 0);
                let lv = self.bool_to_long(lc);
                if op == BinOp::And {
                    self.b.ins().brif(lc, rb, &[], done, &[lv.into()]);
                } else {
                    self.b.ins().brif(lc, done, &[lv.into()], rb, &[]);
                }
                self.b.switch_to_block(rb);
                self.b.seal_block(rb);
                let r = self.expr(rhs);
                let rc = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
                let rv = self.bool_to_long(rc);
                self.b.ins().jump(done, &[rv.into()]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
                self.b.block_params(done)[0]
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                let cc = match op {
                    BinOp::Lt => IntCC::SignedLessThan,
                    BinOp::Le => IntCC::SignedLessThanOrEqual,
                    BinOp::Gt => IntCC::SignedGreaterThan,
                    BinOp::Ge => IntCC::SignedGreaterThanOrEqual,
                    BinOp::Eq => IntCC::Equal,
                    _ => IntCC::NotEqual,
                };
                let c = if lhs.ty == Ty::String {
                    let d = self.rt(Rt::Strcmp, &[l, r]);
                    self.b.ins().icmp_imm_s(cc, d, 0)
                } else {
                    self.b.ins().icmp(cc, l, r)
                };
                self.bool_to_long(c)
            }
            BinOp::Concat => {
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Concat, &[t, l, r, cap]);
                t
            }
            _ => {
                let l = self.expr(lhs);
                let r = self.expr(rhs);
                self.arith(op, l, r, span)
            }
        }
    }
}
