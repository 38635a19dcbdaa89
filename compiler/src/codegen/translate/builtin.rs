//! Built-in functions and the output statements (`printf` and friends).

use super::*;

impl Gen<'_, '_, '_> {
    pub(super) fn args(&mut self, args: &[Expr]) -> Vec<Value> {
        args.iter().map(|a| self.expr(a)).collect()
    }

    /// An argument array on the stack.
    pub(super) fn arg_array(&mut self, vals: &[Value]) -> Value {
        let buf = self.buffer(8 * vals.len() as u32);
        for (i, v) in vals.iter().enumerate() {
            self.b.ins().store(flags(), *v, buf, 8 * i as i32);
        }
        buf
    }

    pub(super) fn printf(&mut self, pieces: &[Piece], vals: &[Value]) {
        let (id, _) = self.sh.format(pieces);
        let kinds: Vec<u8> = fmt::argument_kinds(pieces).into_iter().map(u8::from).collect();
        let kinds_off = self.sh.layout.constant(&kinds);
        let arr = self.arg_array(vals);
        let idv = self.iconst(i64::from(id));
        let kp = self.const_addr(kinds_off);
        let n = self.iconst(vals.len() as i64);
        self.rt(Rt::Printf, &[self.region, self.ctx, idv, kp, arr, n]);
    }

    /// Format into a new string temporary, inside the handler.
    pub(super) fn sprintf(&mut self, pieces: &[Piece], vals: &[Value]) -> Value {
        let t = self.temp();
        let (_, off) = self.sh.format(pieces);
        let arr = self.arg_array(vals);
        let fp = self.const_addr(off);
        let cap = self.cap_val();
        let n = self.iconst(vals.len() as i64);
        self.rt(Rt::Format, &[t, cap, fp, arr, n]);
        t
    }

    pub(super) fn format_pieces(&mut self, fmt_expr: &Expr) -> Option<Vec<Piece>> {
        let ExprKind::String(s) = &fmt_expr.kind else {
            self.sh.diags.push(
                Diagnostic::error(Code::BadFormat, fmt_expr.span, "the format must be a string literal")
                    .with_label("not a literal"),
            );
            return None;
        };
        match crate::format::parse(s) {
            Ok(segs) => {
                let legacy = self.sh.program.legacy_pointer_format;
                Some(
                    segs.iter()
                        .map(piece_of)
                        .map(|p| match p {
                            Piece::Conv { kind: fmt::CONV_POINTER, flags, width, precision } if legacy => {
                                Piece::Conv { kind: fmt::CONV_POINTER_LEGACY, flags, width, precision }
                            }
                            p => p,
                        })
                        .collect(),
                )
            }
            Err(err) => {
                self.sh.diags.push(Diagnostic::error(Code::BadFormat, fmt_expr.span, err.message));
                None
            }
        }
    }

    /// `print`/`println` arguments as a format: `%d` or `%s` each, no separator.
    pub(super) fn print_pieces(args: &[Expr], newline: bool) -> Vec<Piece> {
        let mut p: Vec<Piece> = args
            .iter()
            .map(|a| Piece::Conv {
                kind: if a.ty == Ty::String { fmt::CONV_STRING } else { fmt::CONV_SIGNED },
                flags: 0,
                width: fmt::COUNT_NONE,
                precision: fmt::COUNT_NONE,
            })
            .collect();
        if newline {
            p.push(Piece::Text(b"\n".to_vec()));
        }
        p
    }

    /// `print(@hist_*(s))`, or with `into` (a string and its capacity)
    /// `sprint(@hist_*(s))`: the same text.
    pub(super) fn hist_print(&mut self, h: &Expr, at: Span) {
        self.hist_text(h, at, None)
    }

    /// A histogram's statistic (its address), its descriptor and which of
    /// its histograms it is, and how many buckets that one has; None where
    /// the layout has no such histogram (reported).
    pub(super) fn hist_operand(&mut self, h: &Expr) -> Option<(Value, Value, Value, u32)> {
        let (stat, key) = match &h.kind {
            ExprKind::HistLog { stat } => (stat, HistKey::Log),
            ExprKind::HistLinear { stat, lo, hi, step } => (stat, HistKey::Linear { lo: *lo, hi: *hi, step: *step }),
            _ => return None,
        };
        let (desc, hists) = match &stat.kind {
            ExprKind::Global(g) | ExprKind::Index { array: g, .. } => match self.sh.layout.storage(g.0).stat_desc() {
                Some((desc, hists)) => (desc, hists.to_vec()),
                None => return None,
            },
            _ => return None,
        };
        let which = hists.iter().position(|k| *k == key)?;
        if which >= abi::MAX_HISTS {
            self.sh.diags.push(Diagnostic::error(
                Code::Unsupported,
                h.span,
                format!("a statistic can collect at most {} different histograms", abi::MAX_HISTS),
            ));
            return None;
        }
        let buckets = match key {
            HistKey::Linear { lo, hi, step } => crate::program::linear_buckets(lo, hi, step),
            _ => abi::HIST_LOG_BUCKETS,
        };
        let p = self.expr(stat);
        let d = self.const_addr(desc);
        let w = self.iconst(which as i64);
        Some((p, d, w, buckets))
    }

    /// `@hist_*(s)[i]`.
    pub(super) fn hist_bucket(&mut self, h: &Expr, index: &Expr, at: Span) -> Value {
        let Some((p, d, w, _)) = self.hist_operand(h) else { return self.iconst(0) };
        let i = self.expr(index);
        let loc = self.sh.loc(at);
        let l = self.iconst(i64::from(loc));
        let v = self.rt(Rt::HistBucket, &[self.ctx, p, d, w, i, l]);
        self.check_error();
        v
    }

    fn hist_text(&mut self, h: &Expr, at: Span, into: Option<Value>) {
        let Some((p, d, w, _)) = self.hist_operand(h) else { return };
        let loc = self.sh.loc(at);
        let l = self.iconst(i64::from(loc));
        match into {
            Some(t) => {
                let cap = self.cap_val();
                self.rt(Rt::HistSprint, &[t, cap, self.ctx, p, d, w, l]);
            }
            None => {
                self.rt(Rt::HistPrint, &[self.region, self.ctx, p, d, w, l]);
            }
        }
        self.check_error();
    }

    pub(super) fn builtin(&mut self, f: Builtin, args: &[Expr], e: &Expr) -> Value {
        let span = e.span;
        let zero = self.iconst(0);
        match f {
            Builtin::Printf => {
                if let Some(pieces) = self.format_pieces(&args[0]) {
                    let vals = self.args(&args[1..]);
                    self.printf(&pieces, &vals);
                }
                zero
            }
            Builtin::Sprintf | Builtin::PrettyText => match self.format_pieces(&args[0]) {
                Some(pieces) => {
                    let vals = self.args(&args[1..]);
                    self.sprintf(&pieces, &vals)
                }
                None => self.temp(),
            },
            Builtin::Print | Builtin::Println => {
                let newline = f == Builtin::Println;
                if args.len() == 1 && matches!(args[0].kind, ExprKind::HistLog { .. } | ExprKind::HistLinear { .. }) {
                    self.hist_print(&args[0], span);
                    if newline {
                        self.printf(&[Piece::Text(b"\n".to_vec())], &[]);
                    }
                    return zero;
                }
                // print($v$), print($$vars$): printed as printf prints, not
                // through a string of MAXSTRINGLEN bytes (a structure's
                // text is often longer). A script's own sprintf is a
                // string, cut as SystemTap cuts it.
                if let [Expr { kind: ExprKind::Builtin { func: Builtin::PrettyText, args: inner }, .. }] = args {
                    if let Some(mut pieces) = self.format_pieces(&inner[0]) {
                        if newline {
                            pieces.push(Piece::Text(b"\n".to_vec()));
                        }
                        let vals = self.args(&inner[1..]);
                        self.printf(&pieces, &vals);
                        return zero;
                    }
                }
                let pieces = Self::print_pieces(args, newline);
                let vals = self.args(args);
                self.printf(&pieces, &vals);
                zero
            }
            Builtin::Printd | Builtin::Printdln => {
                let delim = match &args[0].kind {
                    ExprKind::String(d) => d.clone(),
                    _ => Vec::new(),
                };
                let mut pieces = Vec::new();
                for (i, p) in Self::print_pieces(&args[1..], false).into_iter().enumerate() {
                    if i > 0 && !delim.is_empty() {
                        pieces.push(Piece::Text(delim.clone()));
                    }
                    pieces.push(p);
                }
                if f == Builtin::Printdln {
                    pieces.push(Piece::Text(b"\n".to_vec()));
                }
                let vals = self.args(&args[1..]);
                self.printf(&pieces, &vals);
                zero
            }
            Builtin::PrintChar => {
                let piece =
                    Piece::Conv { kind: fmt::CONV_CHAR, flags: 0, width: fmt::COUNT_NONE, precision: fmt::COUNT_NONE };
                let vals = self.args(args);
                self.printf(&[piece], &vals);
                zero
            }
            Builtin::Sprint | Builtin::Sprintln
                if args.len() == 1
                    && matches!(args[0].kind, ExprKind::HistLog { .. } | ExprKind::HistLinear { .. }) =>
            {
                let t = self.temp();
                self.hist_text(&args[0], span, Some(t));
                if f == Builtin::Sprintln {
                    let pieces = [
                        Piece::Conv {
                            kind: fmt::CONV_STRING,
                            flags: 0,
                            width: fmt::COUNT_NONE,
                            precision: fmt::COUNT_NONE,
                        },
                        Piece::Text(b"\n".to_vec()),
                    ];
                    return self.sprintf(&pieces, &[t]);
                }
                t
            }
            Builtin::Sprint | Builtin::Sprintln => {
                let pieces = Self::print_pieces(args, f == Builtin::Sprintln);
                let vals = self.args(args);
                self.sprintf(&pieces, &vals)
            }
            // The process the region serves: the same in every thread.
            Builtin::Pid => {
                // A target thread's own process (its slot: a forked child's
                // differs from the region's), else the region's process.
                let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                let own = self.b.ins().iadd_imm_u(slot, core::mem::offset_of!(abi::ThreadSlot, pid) as i64);
                let shared = self.b.ins().iadd_imm_u(self.region, core::mem::offset_of!(abi::Header, pid) as i64);
                let at = self.b.ins().select(slot, own, shared);
                self.load32(at, 0)
            }
            Builtin::Tid => self.rt(Rt::Tid, &[self.ctx]),
            // The region's process's, or (a process it forked or exec'd
            // to) the kernel's.
            Builtin::Ppid => self.rt(Rt::Ppid, &[self.region, self.ctx]),
            // The process of -c or -p (0 without one), as SystemTap's.
            Builtin::Target => self.load(self.region, core::mem::offset_of!(abi::Header, target) as i32),
            Builtin::Uid => self.rt(Rt::Uid, &[self.region, self.ctx]),
            Builtin::Cpu => self.rt(Rt::Cpu, &[]),
            Builtin::Execname => {
                let t = self.temp();
                let cap = self.cap_val();
                // The thread's slot (0 in the tracer), not the context: a
                // lean trampoline fills the slot.
                let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                self.rt(Rt::Execname, &[self.region, slot, t, cap]);
                t
            }
            Builtin::Pp | Builtin::Ppfunc | Builtin::Probefunc => {
                // The probe table: per probe entry, its pp() and function strings.
                let probe = self.load32(self.ctx, core::mem::offset_of!(abi::Ctx, probe) as i32);
                const _: () = assert!(abi::PROBE_ROW_SIZE == 32);
                let row = self.b.ins().ishl_imm_u(probe, 5);
                let tab = self.const_addr(self.sh.layout.probes_off);
                let rowp = self.b.ins().iadd(tab, row);
                let field = if f == Builtin::Pp { 0 } else { 8 };
                let off = self.load(rowp, field);
                let strings = self.const_addr(0);
                self.b.ins().iadd(strings, off)
            }
            Builtin::Goid => {
                self.ctx_escapes = true;
                self.rt(Rt::Goid, &[self.region, self.ctx])
            }
            // Only in a `process.blocked` probe (lowering says so), whose
            // context's registers are a whole `Sample`.
            Builtin::WaitNs | Builtin::WaitName => {
                self.ctx_escapes = true;
                let regs = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, regs) as i32);
                match f {
                    Builtin::WaitNs => self.load(regs, core::mem::offset_of!(abi::Sample, wait_ns) as i32),
                    _ => self.b.ins().iadd_imm_u(regs, core::mem::offset_of!(abi::Sample, wait) as i64),
                }
            }
            Builtin::Uaddr => {
                self.ctx_escapes = true;
                self.load(self.ctx, core::mem::offset_of!(abi::Ctx, addr) as i32)
            }
            Builtin::Register => {
                let idx = match &args[0].kind {
                    ExprKind::String(s) => telco_abi::arch::native::register_index(&String::from_utf8_lossy(s)),
                    _ => None,
                };
                match idx {
                    Some(i) => {
                        let iv = self.iconst(i64::from(i));
                        self.rt(Rt::Register, &[self.ctx, iv])
                    }
                    None => {
                        self.sh.diags.push(
                            Diagnostic::error(Code::BadValue, args[0].span, "unknown register name").with_help(
                                format!(
                                    "the registers: {}",
                                    telco_abi::arch::native::REGISTERS.map(|r| r.name).join(" ")
                                ),
                            ),
                        );
                        zero
                    }
                }
            }
            Builtin::IntArg
            | Builtin::UintArg
            | Builtin::LongArg
            | Builtin::UlongArg
            | Builtin::LonglongArg
            | Builtin::UlonglongArg
            | Builtin::S32Arg
            | Builtin::U32Arg
            | Builtin::S64Arg
            | Builtin::U64Arg
            | Builtin::PointerArg => {
                self.ctx_escapes = true;
                let n = self.expr(&args[0]);
                let v = self.rt(Rt::Arg, &[self.region, self.ctx, n]);
                match f {
                    Builtin::IntArg | Builtin::S32Arg => self.low_bits(v, types::I32, true),
                    Builtin::UintArg | Builtin::U32Arg => self.low_bits(v, types::I32, false),
                    _ => v,
                }
            }
            Builtin::Returnval => {
                self.ctx_escapes = true;
                let idx = self.iconst(0);
                self.rt(Rt::Register, &[self.ctx, idx])
            }
            Builtin::Int32 | Builtin::Uint32 | Builtin::Short | Builtin::Ushort => {
                let v = self.expr(&args[0]);
                match f {
                    Builtin::Int32 => self.low_bits(v, types::I32, true),
                    Builtin::Uint32 => self.low_bits(v, types::I32, false),
                    Builtin::Short => self.low_bits(v, types::I16, true),
                    _ => self.low_bits(v, types::I16, false),
                }
            }
            Builtin::GettimeofdayNs | Builtin::GettimeofdayUs | Builtin::GettimeofdayMs | Builtin::GettimeofdayS => {
                let ns = self.rt(Rt::NowNs, &[self.region]);
                let div = match f {
                    Builtin::GettimeofdayNs => 1,
                    Builtin::GettimeofdayUs => 1_000,
                    Builtin::GettimeofdayMs => 1_000_000,
                    _ => 1_000_000_000,
                };
                if div == 1 {
                    ns
                } else {
                    let d = self.iconst(div);
                    self.b.ins().sdiv(ns, d)
                }
            }
            Builtin::UserString | Builtin::UserStringN => {
                let vals = self.args(args);
                let t = self.temp();
                let (n, err) = if f == Builtin::UserString {
                    (self.iconst(-1), vals.get(1).copied())
                } else {
                    (vals[1], vals.get(2).copied())
                };
                let err = err.unwrap_or(zero);
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                self.rt(Rt::UserString, &[self.region, self.ctx, t, vals[0], n, err, l, cap]);
                self.check_error();
                t
            }
            Builtin::Fp => {
                let vals = self.args(args);
                self.rt(Rt::Fp, &vals)
            }
            Builtin::FpToString => {
                let vals = self.args(args);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::FpToString, &[t, vals[0], vals[1], cap]);
                t
            }
            Builtin::StringToFp => {
                let vals = self.args(args);
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                let v = self.rt(Rt::StringToFp, &[self.ctx, vals[0], l, cap]);
                self.check_error();
                v
            }
            Builtin::ProbeLink => {
                let probe = self.load32(self.ctx, core::mem::offset_of!(abi::Ctx, probe) as i32);
                let row = self.b.ins().ishl_imm_u(probe, 5);
                let tab = self.const_addr(self.sh.layout.probes_off);
                let rowp = self.b.ins().iadd(tab, row);
                self.load(rowp, 16)
            }
            Builtin::ModuleBias => {
                let vals = self.args(args);
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                let v = self.rt(Rt::ModuleBias, &[self.region, self.ctx, vals[0], l, cap]);
                self.check_error();
                v
            }
            Builtin::UserStringUtf16 | Builtin::UserStringUtf32 => {
                let vals = self.args(args);
                let t = self.temp();
                let width = self.iconst(if f == Builtin::UserStringUtf16 { 2 } else { 4 });
                let err = vals.get(1).copied().unwrap_or(zero);
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                self.rt(Rt::UserStringUtf, &[self.region, self.ctx, t, vals[0], width, err, l, cap]);
                self.check_error();
                t
            }
            Builtin::UserChar
            | Builtin::UserShort
            | Builtin::UserInt
            | Builtin::UserLong
            | Builtin::UserInt8
            | Builtin::UserInt16
            | Builtin::UserInt32
            | Builtin::UserInt64
            | Builtin::UserUint8
            | Builtin::UserUint16
            | Builtin::UserUint32
            | Builtin::UserUint64 => {
                let (size, signed) = match f {
                    Builtin::UserChar | Builtin::UserInt8 => (1, 1),
                    Builtin::UserShort | Builtin::UserInt16 => (2, 1),
                    Builtin::UserInt | Builtin::UserInt32 => (4, 1),
                    Builtin::UserUint8 => (1, 0),
                    Builtin::UserUint16 => (2, 0),
                    Builtin::UserUint32 => (4, 0),
                    _ => (8, 1),
                };
                let a = self.expr(&args[0]);
                let s = self.iconst(size);
                let sg = self.iconst(signed);
                self.rt(Rt::UserInt, &[self.region, a, s, sg])
            }
            Builtin::UserCharError
            | Builtin::UserShortError
            | Builtin::UserIntError
            | Builtin::UserLongError
            | Builtin::UserInt8Error
            | Builtin::UserInt16Error
            | Builtin::UserInt32Error
            | Builtin::UserInt64Error
            | Builtin::UserUint8Error
            | Builtin::UserUint16Error
            | Builtin::UserUint32Error
            | Builtin::UserUint64Error => {
                let (size, signed) = f.user_read_error().unwrap_or((8, true));
                let a = self.expr(&args[0]);
                let s = self.iconst(size);
                let sg = self.iconst(i64::from(signed));
                let l = self.sh.loc(span);
                let l = self.iconst(i64::from(l));
                let cap = self.cap_val();
                let v = self.rt(Rt::UserIntError, &[self.region, self.ctx, a, s, sg, l, cap]);
                self.check_error();
                v
            }
            Builtin::SetUserChar
            | Builtin::SetUserShort
            | Builtin::SetUserInt
            | Builtin::SetUserLong
            | Builtin::SetUserInt8
            | Builtin::SetUserInt16
            | Builtin::SetUserInt32
            | Builtin::SetUserInt64
            | Builtin::SetUserPointer => {
                let size = f.user_write().unwrap_or(8);
                let a = self.expr(&args[0]);
                let v = self.expr(&args[1]);
                let s = self.iconst(size);
                let l = self.sh.loc(span);
                let l = self.iconst(i64::from(l));
                let cap = self.cap_val();
                self.rt(Rt::SetUserInt, &[self.region, self.ctx, a, s, v, l, cap]);
                self.check_error();
                zero
            }
            Builtin::Ubacktrace => {
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Ubacktrace, &[self.region, self.ctx, tab, t, cap]);
                t
            }
            Builtin::SprintUbacktrace => {
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::SprintUbacktrace, &[self.region, self.ctx, tab, t, cap]);
                t
            }
            Builtin::PrintUbacktrace => {
                // One printf per frame, as SystemTap prints them: address,
                // symbol+offset/size, module (each within MAXSTRINGLEN).
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let (idv, kp) = self.frame_format();
                self.rt(Rt::PrintUbacktrace, &[self.region, self.ctx, tab, idv, kp]);
                zero
            }
            Builtin::Usymname => {
                // The function's name from the probed modules' symbols, or
                // the address in hex (as SystemTap for unknown addresses).
                let a = self.expr(&args[0]);
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Usymname, &[tab, a, t, cap]);
                t
            }
            Builtin::Umodname => {
                let a = self.expr(&args[0]);
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let t = self.temp();
                let loc = self.sh.loc(span);
                let l = self.iconst(i64::from(loc));
                let cap = self.cap_val();
                self.rt(Rt::Umodname, &[self.ctx, tab, a, t, l, cap]);
                self.check_error();
                t
            }
            Builtin::Ucallers => {
                let n = self.expr(&args[0]);
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Ucallers, &[self.region, self.ctx, tab, n, t, cap]);
                t
            }
            Builtin::SprintUsyms => {
                let callers = self.expr(&args[0]);
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::SprintUsyms, &[tab, callers, t, cap]);
                t
            }
            Builtin::PrintUsyms => {
                // As print_ubacktrace prints its frames.
                let callers = self.expr(&args[0]);
                let off = self.sh.symtab();
                let tab = self.const_addr(off);
                let (idv, kp) = self.frame_format();
                self.rt(Rt::PrintUsyms, &[self.region, self.ctx, tab, callers, idv, kp]);
                zero
            }
            Builtin::CmdlineStr => {
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::CmdlineStr, &[self.region, self.ctx, t, cap]);
                t
            }
            Builtin::ErrnoStr => {
                let e = self.expr(&args[0]);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::ErrnoStr, &[e, t, cap]);
                t
            }
            Builtin::Strlen => {
                let s = self.expr(&args[0]);
                self.rt(Rt::Strlen, &[s])
            }
            Builtin::Substr => {
                let v = self.args(args);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Substr, &[t, v[0], v[1], v[2], cap]);
                t
            }
            Builtin::Isinstr => {
                let v = self.args(args);
                let p = self.rt(Rt::Strpos, &[v[0], v[1]]);
                let c = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, p, 0);
                self.bool_to_long(c)
            }
            Builtin::Strpos => {
                let v = self.args(args);
                self.rt(Rt::Strpos, &[v[0], v[1]])
            }
            Builtin::StrReplace => {
                let v = self.args(args);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::StrReplace, &[t, v[0], v[1], v[2], cap]);
                t
            }
            Builtin::Strtol => {
                let v = self.args(args);
                self.rt(Rt::Strtol, &[v[0], v[1]])
            }
            Builtin::Tokenize => {
                let v = self.args(args);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::Tokenize, &[t, v[0], v[1], self.ctx, cap]);
                t
            }
            Builtin::TextStr | Builtin::TextStrn => {
                let v = self.args(args);
                let (len, quoted) = if f == Builtin::TextStrn { (v[1], v[2]) } else { (zero, zero) };
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::TextStrn, &[t, v[0], len, quoted, cap]);
                t
            }
            Builtin::Stringat => {
                // The byte at pos (signed, as C's char here), or an error.
                let v = self.args(args);
                let len = self.rt(Rt::Strlen, &[v[0]]);
                let outside = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, v[1], len);
                self.user_error_if(outside, b"Position out of bounds", span);
                let at = self.b.ins().iadd(v[0], v[1]);
                self.b.ins().sload8(I64, flags(), at, 0)
            }
            Builtin::Randint => {
                let n = self.expr(&args[0]);
                let r = self.rt(Rt::Randint, &[n, self.ctx]);
                let wide = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
                self.user_error_if(wide, b"range too wide", span);
                r
            }
            Builtin::Exit => {
                self.rt(Rt::Exit, &[self.region, self.ctx]);
                zero
            }
            Builtin::FlightDump => {
                self.rt(Rt::FlightDump, &[self.region]);
                zero
            }
            Builtin::Error | Builtin::ErrorValue => {
                let m = self.expr(&args[0]);
                self.user_error(m, span);
                self.fresh_block();
                zero
            }
            Builtin::Warn => {
                let m = self.expr(&args[0]);
                self.rt(Rt::Warn, &[self.region, self.ctx, m]);
                zero
            }
            Builtin::Assert => {
                let c = self.expr(&args[0]);
                let fail = self.b.create_block();
                let ok = self.b.create_block();
                self.b.ins().brif(c, ok, &[], fail, &[]);
                self.b.switch_to_block(fail);
                self.b.seal_block(fail);
                let m = match args.get(1) {
                    Some(a) => self.expr(a),
                    None => {
                        let off = self.sh.layout.string(b"Assertion failed");
                        self.const_addr(off)
                    }
                };
                self.user_error(m, span);
                self.b.switch_to_block(ok);
                self.b.seal_block(ok);
                zero
            }
            Builtin::ThreadIndent => {
                let d = self.expr(&args[0]);
                let t = self.temp();
                let cap = self.cap_val();
                self.rt(Rt::ThreadIndent, &[self.region, self.ctx, t, d, cap]);
                t
            }
            Builtin::TraceInstant => {
                let m = self.expr(&args[0]);
                self.rt(Rt::Instant, &[self.region, self.ctx, m]);
                zero
            }
            Builtin::TraceSpanNamed => {
                let v = self.args(args);
                self.rt(Rt::NamedSpan, &[self.region, self.ctx, v[0], v[1]]);
                zero
            }
            Builtin::TraceCounter => {
                let v = self.args(args);
                self.rt(Rt::Counter, &[self.region, self.ctx, v[0], v[1]]);
                zero
            }
            Builtin::TraceSpan => {
                // Reads only the context fields a lean trampoline sets.
                let v = self.args(args);
                let slot = self.load(self.ctx, core::mem::offset_of!(abi::Ctx, slot) as i32);
                let probe = self.load32(self.ctx, core::mem::offset_of!(abi::Ctx, probe) as i32);
                self.rt(Rt::Span, &[self.region, slot, probe, v[0]]);
                zero
            }
            Builtin::TraceTicks => self.rt(Rt::Ticks, &[]),
            Builtin::TicksNs => {
                // ticks × Header::tsc_mult >> TSC_SHIFT, in 128 bits.
                let d = self.args(args)[0];
                let mult = self.load(self.region, core::mem::offset_of!(abi::Header, tsc_mult) as i32);
                let lo = self.b.ins().imul(d, mult);
                let hi = self.b.ins().smulhi(d, mult);
                let lo = self.b.ins().ushr_imm_u(lo, i64::from(abi::TSC_SHIFT));
                let hi = self.b.ins().ishl_imm_u(hi, i64::from(64 - abi::TSC_SHIFT));
                self.b.ins().bor(hi, lo)
            }
        }
    }
}

fn piece_of(s: &crate::format::Segment) -> Piece {
    use crate::format::{ConvKind, Count, Segment};
    match s {
        Segment::Text(t) => Piece::Text(t.clone()),
        Segment::Conversion(c) => {
            let count = |n: Count| match n {
                Count::None => fmt::COUNT_NONE,
                Count::Fixed(v) => v as i32,
                Count::FromArg => fmt::COUNT_ARG,
            };
            let mut flags = 0;
            for (on, f) in [
                (c.left, fmt::FLAG_LEFT),
                (c.plus, fmt::FLAG_PLUS),
                (c.space, fmt::FLAG_SPACE),
                (c.zero, fmt::FLAG_ZERO),
                (c.alt, fmt::FLAG_ALT),
            ] {
                if on {
                    flags |= f;
                }
            }
            Piece::Conv {
                kind: match c.kind {
                    ConvKind::Signed => fmt::CONV_SIGNED,
                    ConvKind::Unsigned => fmt::CONV_UNSIGNED,
                    ConvKind::HexLower => fmt::CONV_HEX,
                    ConvKind::HexUpper => fmt::CONV_HEX_UPPER,
                    ConvKind::Octal => fmt::CONV_OCTAL,
                    ConvKind::Char => fmt::CONV_CHAR,
                    ConvKind::Pointer => fmt::CONV_POINTER,
                    ConvKind::String => fmt::CONV_STRING,
                },
                flags,
                width: count(c.width),
                precision: count(c.precision),
            }
        }
    }
}

impl Gen<'_, '_, '_> {
    /// The format of one frame line as `print_ubacktrace` prints it
    /// (`"%s%s%s\n"`: address, symbol+offset/size, module) and its
    /// argument kinds, as the runtime's printf takes them: (format id,
    /// kinds' address).
    fn frame_format(&mut self) -> (Value, Value) {
        let s = Piece::Conv { kind: fmt::CONV_STRING, flags: 0, width: fmt::COUNT_NONE, precision: fmt::COUNT_NONE };
        let pieces = [s.clone(), s.clone(), s, Piece::Text(b"\n".to_vec())];
        let (id, _) = self.sh.format(&pieces);
        let kinds: Vec<u8> = fmt::argument_kinds(&pieces).into_iter().map(u8::from).collect();
        let kinds_off = self.sh.layout.constant(&kinds);
        let idv = self.iconst(i64::from(id));
        let kp = self.const_addr(kinds_off);
        (idv, kp)
    }
}
