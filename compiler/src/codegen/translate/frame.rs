//! A generated function's frame: its setup, the context and error
//! plumbing, MAXACTION charging, prologue and epilogue; the helpers every
//! other part of the translation uses.

use super::*;

impl Shared<'_> {
    /// The function, and whether it needs a full context (`TFunc::full_ctx`).
    pub(super) fn gen_function(&mut self, fctx: &mut FunctionBuilderContext, body: Body) -> (ir::Function, bool) {
        let (sig, name) = match &body {
            Body::Function(i, f) => (self.func_signature(f), UserFuncName::user(NS_FUNC, *i)),
            Body::Probe(i, _) => (self.signature(2, false), UserFuncName::user(2, *i)),
        };
        let mut func = ir::Function::with_name_signature(name, sig);
        let full_ctx;
        {
            let b = FunctionBuilder::new(&mut func, fctx);
            let mut g = Gen::new(self, b, &body);
            g.body(&body);
            full_ctx = g.ctx_escapes;
            let fc = g.sh.frontend;
            g.b.finalize(fc);
        }
        (func, full_ctx)
    }

    pub(super) fn gen_entry_handler(
        &mut self,
        fctx: &mut FunctionBuilderContext,
        i: u32,
        p: &Probe,
        entries: &[&Expr],
    ) -> (ir::Function, u32, bool) {
        let mut func = ir::Function::with_name_signature(UserFuncName::user(3, i), self.signature(2, false));
        let mut size = 0;
        let full_ctx;
        {
            let b = FunctionBuilder::new(&mut func, fctx);
            let body = Body::Probe(i, p);
            let mut g = Gen::new(self, b, &body);
            g.at_entry = true;
            g.prologue(&body);
            let base = g.load(g.ctx, abi_off_entry());
            let cap = i64::from(g.cap);
            for e in entries {
                let v = g.expr(e);
                match e.ty {
                    Ty::String => {
                        let dst = g.b.ins().iadd_imm_s(base, i64::from(size));
                        let c = cap_v(&mut g, cap);
                        g.rt(Rt::Strcpy, &[dst, v, c]);
                        size += g.cap;
                    }
                    _ => {
                        g.b.ins().store(flags(), v, base, size as i32);
                        size += 8;
                    }
                }
            }
            let exit = g.exit;
            g.b.ins().jump(exit, &[]);
            g.epilogue(&body);
            full_ctx = g.ctx_escapes;
            let fc = g.sh.frontend;
            g.b.finalize(fc);
        }
        (func, size, full_ctx)
    }
}

pub(super) fn cap_v(g: &mut Gen, cap: i64) -> Value {
    g.b.ins().iconst(I64, cap)
}

pub(super) fn abi_off_entry() -> i32 {
    core::mem::offset_of!(abi::Ctx, entry) as i32
}

impl<'s, 'a, 'b> Gen<'s, 'a, 'b> {
    pub(super) fn new(sh: &'s mut Shared<'a>, mut b: FunctionBuilder<'b>, body: &Body) -> Self {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.seal_block(entry);
        let params: Vec<Value> = b.block_params(entry).to_vec();
        let exit = b.create_block();
        let ret_var = b.declare_var(I64);
        let zero = b.ins().iconst(I64, 0);
        b.def_var(ret_var, zero);
        let cap = sh.layout.limits.maxstringlen;
        let (is_probe, interruptible, ret_buf) = match body {
            Body::Probe(_, p) => (true, p.points.iter().all(Point::interruptible), None),
            Body::Function(_, f) => (false, false, (f.ret == Ty::String).then(|| params[params.len() - 1])),
        };
        let entry_sizes = match body {
            Body::Probe(_, p) => collect_entries(p).iter().map(|e| if e.ty == Ty::String { cap } else { 8 }).collect(),
            _ => Vec::new(),
        };
        let static_actions = match body {
            Body::Probe(_, p) => {
                let limit =
                    if interruptible { sh.layout.limits.maxaction_interruptible } else { sh.layout.limits.maxaction };
                static_action_bound(p).is_some_and(|n| (n as i64) < limit)
            }
            Body::Function(..) => false,
        };
        Gen {
            region: params[0],
            ctx: params[1],
            sh,
            b,
            cap,
            locals: Vec::new(),
            loops: Vec::new(),
            error_target: exit,
            exit,
            ret_var,
            ret_buf,
            params,
            rt_refs: HashMap::new(),
            fn_refs: HashMap::new(),
            entry_next: 0,
            entry_sizes,
            is_probe,
            interruptible,
            at_entry: false,
            setup: None,
            static_actions,
            uses_actions: false,
            may_error: false,
            calls_functions: false,
            ctx_escapes: false,
        }
    }

    // ---- small helpers ----

    pub(super) fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(I64, v)
    }

    pub(super) fn load(&mut self, base: Value, off: i32) -> Value {
        self.b.ins().load(I64, flags(), base, off)
    }

    pub(super) fn load32(&mut self, base: Value, off: i32) -> Value {
        let v = self.b.ins().load(types::I32, flags(), base, off);
        self.b.ins().uextend(I64, v)
    }

    pub(super) fn store32(&mut self, v: i64, base: Value, off: i32) {
        let c = self.b.ins().iconst(types::I32, v);
        self.b.ins().store(flags(), c, base, off);
    }

    pub(super) fn region_addr(&mut self, off: u64) -> Value {
        self.b.ins().iadd_imm_s(self.region, off as i64)
    }

    /// The address of a constant of the region (a string literal, a
    /// format, argument kinds, a statistic's descriptor, the probe and
    /// symbol tables, the zeroes of an absent element) in its trusted
    /// mirror (`telco_abi::region::MIRROR_GAP`), which no process of the
    /// session can write: its bytes, offsets and bounds are the tracer's.
    pub(super) fn const_addr(&mut self, off: u64) -> Value {
        self.b.ins().iadd_imm_s(self.region, off as i64 - telco_abi::region::MIRROR_GAP as i64)
    }

    /// The low bits of `v` as a C integer of type `ty`, back to a long:
    /// sign-extended (`signed`) or zero-extended.
    pub(super) fn low_bits(&mut self, v: Value, ty: types::Type, signed: bool) -> Value {
        let low = self.b.ins().ireduce(ty, v);
        if signed {
            self.b.ins().sextend(types::I64, low)
        } else {
            self.b.ins().uextend(types::I64, low)
        }
    }

    pub(super) fn bool_to_long(&mut self, c: Value) -> Value {
        self.b.ins().uextend(I64, c)
    }

    pub(super) fn temp(&mut self) -> Value {
        let ss = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, self.cap, 3));
        let p = self.b.ins().stack_addr(I64, ss, 0);
        let z = self.b.ins().iconst(types::I8, 0);
        self.b.ins().store(flags(), z, p, 0);
        p
    }

    pub(super) fn buffer(&mut self, bytes: u32) -> Value {
        let ss = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes.max(8), 3));
        self.b.ins().stack_addr(I64, ss, 0)
    }

    pub(super) fn rt_ref(&mut self, f: Rt) -> FuncRef {
        if let Some(&r) = self.rt_refs.get(&f) {
            return r;
        }
        let (n, ret) = f.signature();
        let sig = self.sh.signature(n, ret);
        let sref = self.b.import_signature(sig);
        let name = self.b.func.declare_imported_user_function(UserExternalName::new(NS_RT, f as u32));
        let r = self.b.import_function(ir::ExtFuncData {
            name: ir::ExternalName::user(name),
            signature: sref,
            colocated: true,
            patchable: false,
        });
        self.rt_refs.insert(f, r);
        r
    }

    /// Call a runtime function; its result (0 when it has none).
    pub(super) fn rt(&mut self, f: Rt, args: &[Value]) -> Value {
        if args.contains(&self.ctx) {
            // It may read any context field, and report an error there.
            self.ctx_escapes = true;
            self.may_error = true;
        }
        let r = self.rt_ref(f);
        let call = self.b.ins().call(r, args);
        match self.b.inst_results(call).first() {
            Some(&v) => v,
            None => self.b.ins().iconst(I64, 0),
        }
    }

    pub(super) fn cap_val(&mut self) -> Value {
        self.iconst(i64::from(self.cap))
    }

    /// Continue in a new block after an unconditional jump (any code the
    /// source has after a `break` is unreachable but must still be built).
    pub(super) fn fresh_block(&mut self) {
        let b = self.b.create_block();
        self.b.switch_to_block(b);
        self.b.seal_block(b);
    }

    pub(super) fn set_error(&mut self, code: u32, span: Span) {
        self.may_error = true;
        let loc = self.sh.loc(span);
        self.store32(i64::from(code), self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
        self.store32(i64::from(loc), self.ctx, core::mem::offset_of!(abi::Ctx, error_loc) as i32);
    }

    /// If `cond` (an i8 truth value) holds: raise `code` at `span`.
    pub(super) fn raise_if(&mut self, cond: Value, code: u32, span: Span) {
        let err = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(err);
        self.b.ins().brif(cond, err, &[], cont, &[]);
        self.b.switch_to_block(err);
        self.b.seal_block(err);
        self.set_error(code, span);
        let target = if code == abi::ERR_MAXACTION { self.exit } else { self.error_target };
        self.b.ins().jump(target, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
    }

    /// Raise a user error with message `m` (a string) at `span`: stored in
    /// the context by the runtime library, then to the innermost `catch` or
    /// the exit. The current block ends here.
    pub(super) fn user_error(&mut self, m: Value, span: Span) {
        let loc = self.sh.loc(span);
        let l = self.iconst(i64::from(loc));
        let cap = self.cap_val();
        self.rt(Rt::UserError, &[self.ctx, m, l, cap]);
        let target = self.error_target;
        self.b.ins().jump(target, &[]);
    }

    /// Raise a user error with the constant message `m` at `span` when
    /// `cond` holds; go on after it otherwise.
    pub(super) fn user_error_if(&mut self, cond: Value, m: &[u8], span: Span) {
        let ok = self.b.create_block();
        let bad = self.b.create_block();
        self.b.ins().brif(cond, bad, &[], ok, &[]);
        self.b.switch_to_block(bad);
        self.b.seal_block(bad);
        let off = self.sh.layout.string(m);
        let msg = self.const_addr(off);
        self.user_error(msg, span);
        self.b.switch_to_block(ok);
        self.b.seal_block(ok);
    }

    /// After a call that can fail: leave if the context holds an error.
    pub(super) fn check_error(&mut self) {
        self.may_error = true;
        let e = self.b.ins().load(types::I32, flags(), self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
        let cont = self.b.create_block();
        let target = self.error_target;
        self.b.ins().brif(e, target, &[], cont, &[]);
        self.b.switch_to_block(cont);
        self.b.seal_block(cont);
    }

    /// One action of the MAXACTION budget.
    pub(super) fn charge(&mut self, span: Span) {
        if self.static_actions {
            return;
        }
        self.uses_actions = true;
        let off = core::mem::offset_of!(abi::Ctx, actions) as i32;
        let a = self.load(self.ctx, off);
        let a = self.b.ins().iadd_imm_s(a, -1);
        self.b.ins().store(flags(), a, self.ctx, off);
        let c = self.b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, a, 0);
        self.raise_if(c, abi::ERR_MAXACTION, span);
    }

    // ---- function structure ----

    pub(super) fn prologue(&mut self, body: &Body) {
        let (locals, span) = match body {
            Body::Function(_, f) => (&f.locals, f.span),
            Body::Probe(_, p) => (&p.locals, p.span),
        };
        if self.is_probe {
            // A disabled session runs no handler.
            let en =
                self.b.ins().load(types::I32, flags(), self.region, core::mem::offset_of!(abi::Header, enabled) as i32);
            let run = self.b.create_block();
            let leave = self.b.create_block();
            self.b.ins().brif(en, run, &[], leave, &[]);
            self.b.switch_to_block(leave);
            self.b.seal_block(leave);
            self.b.ins().return_(&[]);
            self.b.switch_to_block(run);
            self.b.seal_block(run);
            // `run` stays empty until the body is built (`finish_setup`).
            let start = self.b.create_block();
            self.setup = Some((run, start));
            self.b.switch_to_block(start);
        } else {
            // MAXNESTING: checked on entry to every script function.
            let off = core::mem::offset_of!(abi::Ctx, nesting) as i32;
            let n = self.load32(self.ctx, off);
            let max = i64::from(self.sh.layout.limits.maxnesting);
            let too_deep = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, n, max);
            let err = self.b.create_block();
            let ok = self.b.create_block();
            self.b.set_cold_block(err);
            self.b.ins().brif(too_deep, err, &[], ok, &[]);
            self.b.switch_to_block(err);
            self.b.seal_block(err);
            self.set_error(abi::ERR_NESTING, span);
            let z = self.iconst(0);
            self.b.ins().return_(&[z]);
            self.b.switch_to_block(ok);
            self.b.seal_block(ok);
            let n1 = self.b.ins().iadd_imm_s(n, 1);
            let n1 = self.b.ins().ireduce(types::I32, n1);
            self.b.ins().store(flags(), n1, self.ctx, off);
        }
        for (i, l) in locals.iter().enumerate() {
            let store = match l.ty {
                Ty::String => {
                    let ss =
                        self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, self.cap, 3));
                    let p = self.b.ins().stack_addr(I64, ss, 0);
                    if let (Body::Function(_, f), true) = (body, (i as u32) < self.param_count(body)) {
                        let _ = f;
                        let src = self.params[2 + i];
                        let cap = self.cap_val();
                        self.rt(Rt::Strcpy, &[p, src, cap]);
                    } else {
                        let z = self.b.ins().iconst(types::I8, 0);
                        self.b.ins().store(flags(), z, p, 0);
                    }
                    LocalStore::Str(ss)
                }
                _ => {
                    let v = self.b.declare_var(I64);
                    let init = if (i as u32) < self.param_count(body) { self.params[2 + i] } else { self.iconst(0) };
                    self.b.def_var(v, init);
                    LocalStore::Long(v)
                }
            };
            self.locals.push(store);
        }
    }

    pub(super) fn param_count(&self, body: &Body) -> u32 {
        match body {
            Body::Function(_, f) => f.params,
            Body::Probe(..) => 0,
        }
    }

    /// Fill a probe handler's setup block: the context fields the body
    /// uses (MAXACTION budget, pending error, nesting), no more.
    pub(super) fn finish_setup(&mut self) {
        let Some((run, start)) = self.setup.take() else { return };
        self.b.switch_to_block(run);
        if self.uses_actions {
            let limit = if self.interruptible {
                self.sh.layout.limits.maxaction_interruptible
            } else {
                self.sh.layout.limits.maxaction
            };
            let l = self.iconst(limit);
            self.b.ins().store(flags(), l, self.ctx, core::mem::offset_of!(abi::Ctx, actions) as i32);
        }
        if self.may_error {
            self.store32(0, self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
        }
        if self.calls_functions {
            self.store32(0, self.ctx, core::mem::offset_of!(abi::Ctx, nesting) as i32);
        }
        self.b.ins().jump(start, &[]);
        self.b.seal_block(start);
    }

    pub(super) fn epilogue(&mut self, body: &Body) {
        let exit = self.exit;
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        match body {
            Body::Probe(..) if !self.may_error => {
                self.b.ins().return_(&[]);
                self.finish_setup();
            }
            Body::Probe(..) => {
                let e = self.b.ins().load(types::I32, flags(), self.ctx, core::mem::offset_of!(abi::Ctx, error) as i32);
                let report = self.b.create_block();
                let done = self.b.create_block();
                self.b.set_cold_block(report);
                self.b.ins().brif(e, report, &[], done, &[]);
                self.b.switch_to_block(report);
                self.b.seal_block(report);
                self.rt(Rt::Report, &[self.region, self.ctx]);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                self.b.seal_block(done);
                self.b.ins().return_(&[]);
                self.finish_setup();
            }
            Body::Function(..) => {
                let off = core::mem::offset_of!(abi::Ctx, nesting) as i32;
                let n = self.b.ins().load(types::I32, flags(), self.ctx, off);
                let n = self.b.ins().iadd_imm_s(n, -1);
                self.b.ins().store(flags(), n, self.ctx, off);
                let r = self.b.use_var(self.ret_var);
                self.b.ins().return_(&[r]);
            }
        }
    }

    pub(super) fn body(&mut self, body: &Body) {
        self.prologue(body);
        match body {
            Body::Probe(_, p) => {
                if let Some(c) = &p.condition {
                    let v = self.expr(c);
                    let run = self.b.create_block();
                    let exit = self.exit;
                    self.b.ins().brif(v, run, &[], exit, &[]);
                    self.b.switch_to_block(run);
                    self.b.seal_block(run);
                }
                for s in &p.body {
                    self.stmt(s);
                }
            }
            Body::Function(_, f) => {
                for s in &f.body {
                    self.stmt(s);
                }
            }
        }
        let exit = self.exit;
        self.b.ins().jump(exit, &[]);
        self.epilogue(body);
    }
}
