//! The kinds of site: a function's entry, an instruction inside one, a
//! statement reached by a short jump to padding, the return point of a call,
//! a statement whose jump goes on the instructions before it; veneers for
//! trampolines out of a jump's reach.

use super::*;

impl Hooker {
    /// A statement at `addr` with room for a 2-byte jump only
    /// (`Attach::Statement::pad`): its trampoline as any statement's, and
    /// a `jmp rel8` at `addr` to `slot`, dead padding after the function,
    /// where a `jmp rel32` to the trampoline goes (both put back at
    /// detach, as every patch).
    pub(crate) fn padded(
        &self,
        s: &mut dyn Memory,
        code: &mut CodeRegion,
        addr: u64,
        displaced: usize,
        slot: u64,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let mut placed = match self.function(s, code, addr, 0, Some(displaced), t)? {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        let original = s.read(slot, patch::JUMP_LEN)?;
        let (Some(far), Some(mut short)) = (patch::jump(slot, placed.tramp), patch::short_jump(addr, slot)) else {
            return Ok(Err("the padding or the trampoline is out of reach".into()));
        };
        short.resize(displaced, arch::TRAP);
        placed.plan.2 = short;
        placed.retargets.push((slot, original, far.to_vec()));
        Ok(Ok(placed))
    }

    /// A statement at `addr`, the return point of the `call rel32` just
    /// before it (`Attach::Statement::lead_call`): the call goes to a
    /// trampoline that pushes a shadow frame for it as a return probe's
    /// entry does and jumps to the callee, whose return comes through a
    /// return trampoline of its own that runs the statement's handlers
    /// with the registers as at `addr` (rip there, rsp after the return)
    /// and returns to `addr`. Every register saved (the full kinds).
    pub(crate) fn call_site(
        &self,
        s: &mut dyn Memory,
        code: &mut CodeRegion,
        addr: u64,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let from = addr - patch::DIRECT_CALL_LEN as u64;
        let bytes = s.read(from, patch::DIRECT_CALL_LEN)?;
        let Some(callee) = patch::direct_call_target(&bytes, from) else {
            return Ok(Err("the instruction before it is not the call pass 2 found".into()));
        };
        let direct: Vec<(u32, u64)> = t.handlers.iter().map(|&(h, i)| (i, h)).collect();
        let ret_tramp = self.direct_return(s, code, direct, None, None)?;
        let Some(at) = code.alloc(1024) else { return Ok(Err("no room for its trampoline".into())) };
        let entry = trampoline::Entry {
            returns: t.handlers.iter().map(|&(_, i)| (i, None)).collect(),
            ret_tramp,
            ..self.entry(code, at, callee)
        };
        let prefix = trampoline::entry_prefix(&entry)
            .map_err(|e| TargetError::Unsupported(format!("assembling a trampoline: {e}")))?;
        let reloc = at + prefix.len() as u64;
        let (Some(go), Some(call)) = (patch::jump(reloc, callee), patch::direct_call(from, at)) else {
            return Ok(Err("trampoline out of jump range".into()));
        };
        let mut tramp = prefix.clone();
        tramp.extend_from_slice(&go);
        s.write(at, &tramp)?;
        let pid = s.pid() as u32;
        self.own_trampoline(pid, at, &prefix, crate::owncode::Kind::Entry { site: callee });
        self.own_add(
            pid,
            reloc,
            reloc + go.len() as u64,
            crate::owncode::Kind::Relocated { map: vec![(reloc, callee)], calling: None },
        );
        // A call of the trampoline in place of the call.
        let patch = call.to_vec();
        Ok(Ok(Placed { plan: (from, bytes, patch), tramp: at, retargets: Vec::new(), trap: None }))
    }

    /// The trampoline of a statement at `addr` whose jump goes on the
    /// `lead` bytes of instructions before it (`Attach::Statement::lead`):
    /// those instructions relocated (a call among them returns here), the
    /// probe's prefix with the registers as at `addr`, and a jump to
    /// `addr`, whose bytes stay as they are.
    pub(crate) fn lead_in(
        &self,
        s: &mut dyn Memory,
        code: &mut CodeRegion,
        addr: u64,
        lead: usize,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let from = addr - lead as u64;
        let bytes = s.read(from, lead)?;
        let Some(at) = code.alloc(1024) else { return Ok(Err("no room for its trampoline".into())) };
        let (relocated, copy) = match patch::relocate_with_map(&bytes, from, lead, at) {
            Ok(r) => r,
            Err(why) => return Ok(Err(why.to_string())),
        };
        // Without the copy's own jump back (to `addr`): the probe comes
        // first.
        let mut map = copy.map;
        let Some((jump_back, _)) = map.pop() else { return Ok(Err("nothing to relocate".into())) };
        let body = (jump_back - at) as usize;
        let prefix_at = jump_back;
        let entry = trampoline::Entry {
            handlers: t.handlers,
            ret_tramp: t.ret_tramp,
            lean: t.lean,
            inside: true,
            ..self.entry(code, prefix_at, addr)
        };
        let prefix = trampoline::entry_prefix(&entry)
            .map_err(|e| TargetError::Unsupported(format!("assembling a trampoline: {e}")))?;
        let end = prefix_at + prefix.len() as u64;
        let (Some(back), Some(jmp)) = (patch::jump(end, addr), patch::jump(from, at)) else {
            return Ok(Err("trampoline out of jump range".into()));
        };
        let mut tramp = relocated[..body].to_vec();
        tramp.extend_from_slice(&prefix);
        tramp.extend_from_slice(&back);
        if tramp.len() > 1024 {
            return Ok(Err("trampoline too large".into()));
        }
        s.write(at, &tramp)?;
        self.relocs.borrow_mut().push((at, body as u32, from, lead as u32));
        let pid = s.pid() as u32;
        self.own_add(pid, at, prefix_at, crate::owncode::Kind::Relocated { map, calling: None });
        self.own_add(
            pid,
            end,
            end + back.len() as u64,
            crate::owncode::Kind::Relocated { map: vec![(end, addr)], calling: None },
        );
        self.own_trampoline(pid, prefix_at, &prefix, crate::owncode::Kind::Entry { site: addr });
        let mut patch = jmp.to_vec();
        patch.resize(lead, arch::TRAP);
        Ok(Ok(Placed { plan: (from, bytes, patch), tramp: at, retargets: Vec::new(), trap: None }))
    }

    /// A veneer to `target` within a patch jump's reach of `site`, in a
    /// veneer page of this module's (one mapped near `site` when none is
    /// in reach): its address, or why there is none.
    pub(crate) fn veneer(
        &self,
        s: &mut dyn Memory,
        site: u64,
        target: u64,
    ) -> Result<Result<u64, String>, TargetError> {
        let Some(bytes) = patch::far_jump(target) else {
            return Ok(Err("trampoline out of jump range".into()));
        };
        let mut pages = self.veneers.borrow_mut();
        let reaches = |p: &CodeRegion| {
            let at = p.next.next_multiple_of(16);
            at + bytes.len() as u64 <= p.remote + p.size && patch::jump(site, at).is_some()
        };
        let i = match pages.iter().position(reaches) {
            Some(i) => i,
            None => match s.veneer_page(site) {
                Ok(p) => {
                    pages.push(p);
                    pages.len() - 1
                }
                Err(e) => return Ok(Err(format!("trampoline out of jump range, and no room for a veneer: {e}"))),
            },
        };
        let Some(at) = pages[i].alloc(bytes.len()) else {
            return Ok(Err("trampoline out of jump range, and no room for a veneer".into()));
        };
        s.write(at, &bytes)?;
        // A sample there is at the site still: nothing has run but the
        // veneer's load of x16.
        let kind = crate::owncode::Kind::Relocated { map: vec![(at, site)], calling: None };
        self.own_add(s.pid() as u32, at, at + bytes.len() as u64, kind);
        Ok(Ok(at))
    }

    /// The trampoline of one function (or of an instruction inside one
    /// whose jump displaces `site` bytes, as pass 2 planned it); the patch
    /// to apply, or why not.
    pub(crate) fn function(
        &self,
        s: &mut dyn Memory,
        code: &mut CodeRegion,
        addr: u64,
        size: u64,
        site: Option<usize>,
        t: Tramp,
    ) -> Result<Result<Placed, String>, TargetError> {
        let bytes = s.read(addr, site.unwrap_or((size as usize).clamp(1, 1 << 20)) + 16)?;
        // A trap where no jump fits (or where `-D TRAP_PROBES` asks for
        // one): why no jump.
        let forced = t.script && (self.artifact.limits.trap_probes || t.crowded);
        let forced_why = if t.crowded { "another probe's site is inside the jump's bytes" } else { "-D TRAP_PROBES" };
        let mut trap: Option<String> = None;
        let (hook, retargets) = match site {
            // Pass 2 found no jump here: the trap covers the instruction.
            Some(displaced) if t.trap => {
                trap = Some("no jump fits at the site, nor before it".into());
                (patch::Hook { patch_at: addr, displaced }, Vec::new())
            }
            // Forced: the trap covers the first of the displaced instructions.
            Some(displaced) if forced => {
                let starts = arch::instruction_starts(&bytes[..displaced], addr);
                let first = starts.get(1).map_or(displaced, |&next| (next - addr) as usize);
                trap = Some(forced_why.into());
                (patch::Hook { patch_at: addr, displaced: first }, Vec::new())
            }
            Some(displaced) => (patch::Hook { patch_at: addr, displaced }, Vec::new()),
            None => match patch::plan_loop(&bytes, addr, size) {
                Ok(h) if !forced && !t.trap => h,
                Ok(_) => match patch::plan_trap(&bytes, addr, size) {
                    Ok(h) => {
                        trap = Some(if t.trap { "control arrives inside the jump's bytes" } else { forced_why }.into());
                        (h, Vec::new())
                    }
                    Err(why) => return Ok(Err(format!("no jump fits, nor a trap: {why}"))),
                },
                Err(why) if t.script && (t.trap || patch::trap_may_fit(&why)) => {
                    match patch::plan_trap(&bytes, addr, size) {
                        Ok(h) => {
                            trap = Some(why.to_string());
                            (h, Vec::new())
                        }
                        Err(no) => return Ok(Err(format!("{why}; nor does a trap fit: {no}"))),
                    }
                }
                Err(why) => return Ok(Err(why.to_string())),
            },
        };
        // A Go function: what its trampoline runs first and reads.
        let go = match &t.go {
            Some(site) => {
                let check = &bytes[..usize::from(site.check)];
                if let Err(why) = patch::go_check(check) {
                    return Ok(Err(why));
                }
                let (Some(enter), Some(push)) = (self.enter_go, self.go_push) else {
                    return Ok(Err("the runtime library lacks rt_enter_go".into()));
                };
                Some((check.to_vec(), site.layout, enter, push))
            }
            None => None,
        };
        // Its returns, with return probes: each epilogue's jump and
        // trampoline, patched with the entry's.
        let go_exits = match &t.go {
            Some(site) if !t.returns.is_empty() => match self.go_returns(s, code, addr, site, &t.returns)? {
                Ok(exits) => exits,
                Err(why) => return Ok(Err(why)),
            },
            _ => Vec::new(),
        };
        let Some(at) = code.alloc(1024) else { return Ok(Err("no room for its trampoline".into())) };
        let itrace = match (&t.itrace, self.itrace_wait) {
            (Some(_), Some(w)) => Some((code.at(w), self.itraced.borrow().len() as u32)),
            (Some(_), None) => return Ok(Err("the runtime library lacks rt_itrace_wait".into())),
            _ => None,
        };
        let entry = trampoline::Entry {
            handlers: t.handlers,
            returns: t.returns,
            ret_tramp: t.ret_tramp,
            lean: t.lean,
            itrace,
            span: t.span,
            inside: t.inside,
            ra_saved: t.ra_saved,
            // The landing pad before the site, when it signs x30.
            ra_signed: (hook.patch_at - addr)
                .checked_sub(4)
                .and_then(|o| bytes.get(o as usize..o as usize + 4))
                .map_or(0, |w| patch::signs_return(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))),
            always: t.always,
            go: go.map(|(check, layout, enter, push)| trampoline::GoEntry {
                check,
                back: hook.patch_at + hook.displaced as u64,
                layout,
                enter: code.at(enter),
                push: code.at(push),
            }),
            ..self.entry(code, at, addr)
        };
        let nothing =
            entry.handlers.is_empty() && entry.returns.is_empty() && entry.itrace.is_none() && entry.always.is_none();
        let prefix = match &t.clock_only {
            Some(so) => trampoline::clock_entry_prefix(&entry, so),
            None if nothing => Ok(Vec::new()),
            None => trampoline::entry_prefix(&entry),
        }
        .map_err(|e| TargetError::Unsupported(format!("assembling a trampoline: {e}")))?;
        let start = (hook.patch_at - addr) as usize;
        let displaced = &bytes[start..start + hook.displaced];
        // A trampoline out of the jump's reach (a module larger than it):
        // at a function's entry, through a veneer within reach, and back
        // by a far jump (aarch64: x16 is free there).
        let far = patch::jump(hook.patch_at, at).is_none();
        if far && (site.is_some() || !retargets.is_empty()) {
            return Ok(Err(
                "trampoline out of jump range (a far trampoline is only reached at a function's entry)".into()
            ));
        }
        let reloc_at = at + prefix.len() as u64;
        let relocate = if far { patch::relocate_at_entry } else { patch::relocate_with_map };
        let (relocated, map) = match relocate(displaced, hook.patch_at, hook.displaced, reloc_at) {
            Ok(r) => r,
            Err(why) => return Ok(Err(why.to_string())),
        };
        // A trap's trampoline is reached through rt_trap's table.
        let to = if far && trap.is_none() {
            match self.veneer(s, hook.patch_at, at)? {
                Ok(v) => v,
                Err(why) => return Ok(Err(why)),
            }
        } else {
            at
        };
        let jmp = match (&trap, patch::jump(hook.patch_at, to)) {
            (Some(_), _) => arch::TRAP_PROBE.to_vec(),
            (None, Some(j)) => j.to_vec(),
            (None, None) => return Ok(Err("trampoline out of jump range".into())),
        };
        if let Some(name) = t.itrace {
            let resume = at + prefix.len() as u64;
            let mut traced = crate::itrace::Traced::new(name, hook.patch_at, displaced.to_vec(), resume, &relocated);
            traced.extra = retargets.iter().map(|r| (r.at, r.original.clone())).collect();
            traced.loop_entry = (!retargets.is_empty()).then_some(hook.patch_at + patch::JUMP_LEN as u64);
            self.itraced.borrow_mut().push(traced);
        }
        self.relocs.borrow_mut().push((
            at + prefix.len() as u64,
            relocated.len() as u32,
            hook.patch_at,
            hook.displaced as u32,
        ));
        let prefix_len = prefix.len();
        let mut tramp = prefix;
        tramp.extend_from_slice(&relocated);
        if tramp.len() > 1024 {
            return Ok(Err("trampoline too large".into()));
        }
        s.write(at, &tramp)?;
        let pid = s.pid() as u32;
        self.own_trampoline(pid, at, &tramp[..prefix_len], crate::owncode::Kind::Entry { site: hook.patch_at });
        let back = hook.patch_at + hook.displaced as u64;
        let calling = map.calling.map(|(lo, hi)| (lo, hi, back));
        let end = at + tramp.len() as u64;
        self.own_add(pid, at + prefix_len as u64, end, crate::owncode::Kind::Relocated { map: map.map, calling });
        let mut patch = jmp;
        if !retargets.is_empty() {
            // The loops' way in: a second jump, past the probe, to the
            // relocated first instructions.
            let slot = hook.patch_at + patch::JUMP_LEN as u64;
            let Some(second) = patch::jump(slot, at + prefix_len as u64) else {
                return Ok(Err("trampoline out of jump range".into()));
            };
            patch.extend_from_slice(&second);
        }
        // A trap changes its own bytes only: the rest of the instruction
        // stays (never run while the trap is there, intact when it goes).
        let orig = match trap {
            Some(_) => displaced[..patch.len()].to_vec(),
            None => {
                patch.resize(hook.displaced, arch::TRAP);
                displaced.to_vec()
            }
        };
        Ok(Ok(Placed {
            plan: (hook.patch_at, orig, patch),
            tramp: at,
            retargets: retargets.into_iter().map(|r| (r.at, r.original, r.patched)).chain(go_exits).collect(),
            trap,
        }))
    }

    /// The returns of the Go function at `addr` (`GoSite::rets`), for its
    /// return probes `returns`: each epilogue's trampoline
    /// (`trampoline::go_return_trampoline`) written, and the patch that
    /// jumps to it (at, original, patched); or why not.
    fn go_returns(
        &self,
        s: &mut dyn Memory,
        code: &mut CodeRegion,
        addr: u64,
        site: &telco_abi::artifact::GoSite,
        returns: &[(u32, Option<u64>)],
    ) -> Result<Result<Vec<(u64, Vec<u8>, Vec<u8>)>, String>, TargetError> {
        let (Some(enter), Some(pop)) = (self.enter_go, self.go_pop) else {
            return Ok(Err("the runtime library lacks rt_go_pop".into()));
        };
        let handlers: Vec<(u32, u64)> =
            returns.iter().map(|&(i, _)| (i, code.at(self.artifact.probes[i as usize].handler))).collect();
        let mut out = Vec::new();
        for r in &site.rets {
            let at = addr + u64::from(r.offset);
            let original = s.read(at, usize::from(r.len))?;
            let epilogue = match patch::go_epilogue(&original) {
                Ok(e) => e,
                Err(why) => return Ok(Err(format!("its return at {at:#x}: {why}"))),
            };
            let tramp = code.next.next_multiple_of(16);
            let x = trampoline::GoExit {
                at: tramp,
                region: self.region,
                addr,
                ctx_size: self.artifact.ctx_size,
                epilogue,
                returns: handlers.clone(),
                pop: code.at(pop),
                enter: code.at(enter),
                layout: site.layout,
                shadow: self.shadow(),
            };
            let bytes = match trampoline::go_return_trampoline(&x) {
                Ok(b) => b,
                Err(e) => return Err(TargetError::Unsupported(format!("assembling a trampoline: {e}"))),
            };
            let Some(jmp) = patch::jump(at, tramp) else {
                return Ok(Err("trampoline out of jump range".into()));
            };
            if code.alloc(bytes.len()) != Some(tramp) {
                return Ok(Err("no room for its return trampolines".into()));
            }
            s.write(tramp, &bytes)?;
            self.own_trampoline(s.pid() as u32, tramp, &bytes, crate::owncode::Kind::Entry { site: at });
            let mut patch = jmp.to_vec();
            patch.resize(original.len(), arch::TRAP);
            out.push((at, original, patch));
        }
        Ok(Ok(out))
    }
}
