//! One module's probes: a code region mapped near it, the trampolines of
//! its functions and statements, hops through nearby functions.

use super::*;

impl Hooker {
    /// Map a code region near `module`, write the trampolines of its
    /// functions, and return the patches to apply (and the refusals).
    pub(crate) fn module(
        &self,
        s: &mut dyn Memory,
        maps: &[Mapping],
        module: &Path,
        functions: &BTreeMap<u64, Vec<usize>>,
        refused: &mut Vec<String>,
    ) -> Result<(Vec<CodeRegion>, Vec<Plan>), TargetError> {
        let a = &self.artifact;
        let pid = s.pid();
        let first = *functions.keys().next().unwrap_or(&0);
        let base = runtime_addr(maps, module, first)
            .ok_or_else(|| TargetError::NotMapped { module: module.display().to_string(), pid })?;
        self.placed_in.borrow_mut().insert(module.to_path_buf());
        // Per function: its entry trampoline (at most 1 KiB) and, for lean
        // return probes, a return trampoline of its own (under 1 KiB); a
        // Go function's return probes, a return trampoline per epilogue
        // (under 1 KiB, and a call or two more per probe).
        let go_returns: u64 = functions
            .values()
            .map(|probes| {
                let rets = probes.iter().find_map(|&i| match &a.probes[i].attach {
                    Attach::Function { go: Some(g), ret: true, .. } => Some(g.rets.len() as u64),
                    _ => None,
                });
                rets.unwrap_or(0) * (1024 + 64 * probes.len() as u64)
            })
            .sum();
        let size = 8192 + 2048 * functions.len() as u64 + 8 * a.probes.len() as u64 + go_returns;
        let mut code = s.code_near(a, base, size)?;
        self.own_blob(pid as u32, &code);
        // The handler table (by probe index) and the return trampoline.
        let table: Vec<u8> = a.probes.iter().flat_map(|p| code.at(p.handler).to_le_bytes()).collect();
        let small = || {
            TargetError::Unsupported(format!(
                "the code region near {} has no room for the probe table and return trampoline (an internal sizing \
                 error: please report it)",
                module.display()
            ))
        };
        let table_at = code.alloc(table.len()).ok_or_else(small)?;
        s.write(table_at, &table)?;
        let ret_tramp = code.alloc(512).ok_or_else(small)?;
        let rt_bytes = trampoline::return_trampoline(
            ret_tramp,
            self.region,
            a.ctx_size,
            code.at(self.ret_pop),
            &trampoline::Returns::Table(table_at),
            None,
            &self.shadow(),
            None,
        )
        .map_err(|e| TargetError::Unsupported(format!("assembling the return trampoline: {e}")))?;
        if rt_bytes.len() > 512 {
            return Err(TargetError::Unsupported("the return trampoline is larger than its room".into()));
        }
        s.write(ret_tramp, &rt_bytes)?;
        self.own_trampoline(pid as u32, ret_tramp, &rt_bytes, crate::owncode::Kind::Return);
        let mut plans: Vec<Plan> = Vec::new();
        let mut clobbers = clobber::Clobbers::new(&a.code, &a.symbols);
        // Functions too short for the jump (`Hop`): those whose 5-byte plan
        // fails take their hop, and their hosts displace enough for it.
        let mut hopping: BTreeMap<u64, telco_abi::artifact::Hop> = BTreeMap::new();
        let mut hosts: BTreeMap<u64, u32> = BTreeMap::new();
        for (&file_offset, probes) in functions {
            let Some((size, hop)) = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Function { size, hop: Some(h), .. } => Some((*size, *h)),
                _ => None,
            }) else {
                continue;
            };
            let Some(addr) = runtime_addr(maps, module, file_offset) else { continue };
            let bytes = s.read(addr, size as usize + 16)?;
            if (hop.required || patch::plan(&bytes, addr, size).is_err())
                && runtime_addr(maps, module, hop.host_file_offset).is_some()
            {
                hopping.insert(file_offset, hop);
                let d = hosts.entry(hop.host_file_offset).or_insert(0);
                *d = (*d).max(hop.host_displaced);
            }
        }
        // Sites another probe's site follows closer than a jump is long
        // (markers one after the other): traps, so each fires.
        // (Not a function that takes a hop: its 2-byte jump is planned
        // with its neighbours in mind.)
        let sites: Vec<(u64, u64, bool)> = functions
            .iter()
            .map(|(&off, probes)| {
                let displaced = probes.iter().find_map(|&i| match &a.probes[i].attach {
                    Attach::Statement { displaced, .. } => Some(u64::from(*displaced)),
                    _ => None,
                });
                // Nor a hop's host (its jump makes room for the hop's).
                let hop = hopping.contains_key(&off)
                    || hosts.range(off..off + 16).next().is_some()
                    || probes.iter().any(|&i| matches!(a.probes[i].attach, Attach::Function { hop: Some(_), .. }));
                (off, displaced.unwrap_or(0).max(patch::JUMP_LEN as u64), !hop)
            })
            .collect();
        let crowded: std::collections::BTreeSet<u64> = sites
            .iter()
            .filter(|&&(off, len, may)| may && sites.iter().any(|&(other, _, _)| other > off && other < off + len))
            .map(|&(off, _, _)| off)
            .collect();
        // Hops to write: slot, trampoline, and the hopping function's patch.
        let mut slots: Vec<(u64, u64, u64)> = Vec::new();
        for (&file_offset, probes) in functions {
            let p0 = &a.probes[probes[0]];
            // A function's entry (statements there run with its entry
            // probes), or an instruction inside one.
            let size = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Function { size, .. } => Some(*size),
                _ => None,
            });
            let site = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Statement { displaced, .. } => Some(*displaced as usize),
                _ => None,
            });
            // A statement whose jump goes on the instructions before it
            // (a call probed at its return: `true`).
            let lead = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Statement { lead, lead_call, .. } if *lead > 0 => Some((u64::from(*lead), *lead_call)),
                _ => None,
            });
            let (lead, lead_call) = (lead.map(|l| l.0), lead.is_some_and(|l| l.1));
            // A statement reached by a short jump to the padding after its
            // function, where the jump to the trampoline goes.
            let pad = probes.iter().find_map(|&i| match &a.probes[i].attach {
                Attach::Statement { pad, .. } if *pad > 0 => Some(u64::from(*pad)),
                _ => None,
            });
            let fname = match (&p0.attach, size) {
                (Attach::Statement { addr, .. }, None) => format!("{} ({addr:#x})", p0.name),
                _ => p0.function.clone(),
            };
            let Some(addr) = runtime_addr(maps, module, file_offset) else {
                refused.push(format!("{fname}: not mapped"));
                continue;
            };
            let mut handlers = Vec::new();
            let mut returns = Vec::new();
            // A lean trampoline when no handler needs the whole context and
            // what they change is known.
            let mut lean = Some(0);
            let mut calls = Vec::new();
            let mut itrace = None;
            let mut span = None;
            let mut ra_saved = None;
            for &i in probes {
                let p = &a.probes[i];
                if let Attach::Function { ret: true, ra_saved: Some(at), .. } = p.attach {
                    ra_saved = Some(at);
                }
                if p.full_ctx {
                    lean = None;
                }
                if matches!(p.attach, Attach::Function { itrace: true, .. }) {
                    itrace = Some(fname.clone());
                }
                match p.attach {
                    // `--chrome`'s call timing, done by the trampolines
                    // themselves when they are lean (their handlers run
                    // otherwise, to the same effect).
                    Attach::Function { ret: true, .. } if p.span && self.span_flush.is_some() && span.is_none() => {
                        returns.push((i as u32, p.entry_handler.map(|h| code.at(h))));
                        calls.push(self.ret_push);
                        // Called after all if the return side cannot be
                        // inline (below).
                        calls.extend(p.entry_handler);
                        span = Some(i as u32);
                    }
                    Attach::Function { ret: true, .. } => {
                        returns.push((i as u32, p.entry_handler.map(|h| code.at(h))));
                        calls.push(self.ret_push);
                        calls.extend(p.entry_handler);
                    }
                    // An entry probe whose body does nothing is not called.
                    _ if p.empty => {}
                    _ => {
                        handlers.push((code.at(p.handler), i as u32));
                        calls.push(p.handler);
                    }
                }
            }
            if handlers.is_empty() && returns.is_empty() && itrace.is_none() {
                // Nothing to run here: the function is left as it is.
                continue;
            }
            // A Go function's trampolines are full, and time their calls
            // by the handlers (`--chrome`'s too).
            if probes.iter().any(|&i| matches!(a.probes[i].attach, Attach::Function { go: Some(_), .. })) {
                lean = None;
            }
            // A function the runtime hooks itself: this trampoline is that
            // hook too.
            if let Some(&(f, whole)) = self.entry_hooks.borrow().get(&addr).filter(|_| size.is_some()) {
                handlers.push((code.at(f), 0));
                calls.push(f);
                if whole {
                    lean = None;
                }
            }
            // The hooks that keep SIGTRAP unblocked, on a function the
            // script probes too.
            let always = self
                .always_hooks
                .borrow()
                .get(&addr)
                .filter(|_| size.is_some())
                .map(|&f| (code.at(f), self.traps_at()));
            if always.is_some() {
                lean = None;
            }
            for f in calls {
                lean = lean.zip(clobbers.of(f)).map(|(m, c)| m | c);
            }
            // Lean return probes get a return trampoline of their own, as
            // lean, calling their handlers directly.
            let mut own_ret = None;
            // The span probe recorded inline (lean only): its index and
            // `rt_span_flush`'s offset.
            let inline = span.zip(self.span_flush).filter(|_| lean.is_some());
            let span_inline = inline.map(|(probe, flush)| trampoline::SpanInline {
                probe,
                flush: code.at(flush),
                spans_off: a.spans_off,
                stride: a.span_stride,
                batch: a.span_batch,
            });
            // Only a return probe that times calls here (`--chrome`'s, or a
            // duration into a statistic): trampolines that only time calls.
            let only = returns
                .first()
                .filter(|_| lean.is_some() && itrace.is_none() && handlers.is_empty() && returns.len() == 1);
            let clock_only = only.and_then(|&(probe, _)| {
                let (work, flush) = match (span_inline, inline) {
                    (Some(inl), Some((_, flush))) => (trampoline::Timed::Span(inl), Some(flush)),
                    _ => (trampoline::Timed::Stat(stat_inline(a.probes[probe as usize].latency.as_ref()?)?), None),
                };
                let handler = a.probes[probe as usize].handler;
                let pop = [self.ret_pop, handler]
                    .into_iter()
                    .chain(flush)
                    .try_fold(0, |m, f| clobbers.of(f).map(|c| m | c))?;
                Some(trampoline::ClockOnly {
                    probe,
                    work,
                    handler: code.at(handler),
                    enter_clobbers: clobbers.of(self.enter)?,
                    push_clobbers: clobbers.of(self.ret_push)?,
                    pop_clobbers: pop,
                })
            });
            if let Some(so) = &clock_only {
                self.timed.borrow_mut().push(fname.clone());
                let ret_pop = code.at(self.ret_pop);
                own_ret = Some(place(self, s, &mut code, |at| {
                    trampoline::clock_return_trampoline(at, self.region, a.ctx_size, ret_pop, &self.shadow(), so)
                })?);
            } else if lean.is_some() && !returns.is_empty() {
                // The span probe's return side calls rt_span_flush, not
                // its handler.
                let called = |i: u32, h: u32| match inline {
                    Some((probe, flush)) if probe == i => flush,
                    _ => h,
                };
                let rets: Vec<(u32, u32)> = returns.iter().map(|&(i, _)| (i, a.probes[i as usize].handler)).collect();
                let m = std::iter::once(self.ret_pop)
                    .chain(rets.iter().map(|&(i, h)| called(i, h)))
                    .try_fold(0, |m, f| clobbers.of(f).map(|c| m | c));
                if let Some(m) = m {
                    let direct: Vec<(u32, u64)> = rets.iter().map(|&(i, h)| (i, code.at(h))).collect();
                    own_ret = Some(self.direct_return(s, &mut code, direct, Some(m), span_inline.as_ref())?);
                }
            }
            // The entry side inline only with the return side (a lean
            // trampoline whose return trampoline is the shared one is
            // still timed, by the handlers).
            let span = span.filter(|_| own_ret.is_some() && span_inline.is_some());
            // A statement or marker: inside a function (`Entry::inside`).
            let inside = size.is_none();
            // Pass 2 found no jump: a trap.
            let trap = probes.iter().any(|&i| {
                matches!(a.probes[i].attach, Attach::Function { trap: true, .. } | Attach::Statement { trap: true, .. })
            });
            // A Go function: its own trampoline, every register saved (its
            // return probes' site names its returns).
            let go = probes
                .iter()
                .filter_map(|&i| match &a.probes[i].attach {
                    Attach::Function { go, .. } => go.as_ref(),
                    _ => None,
                })
                .max_by_key(|g| g.rets.len())
                .cloned();
            let go_check = go.as_ref().map(|g| usize::from(g.check));
            // A Go function without returns to patch (one that never
            // returns): no frame is pushed that nothing would pop.
            if go.as_ref().is_some_and(|g| g.rets.is_empty()) {
                returns.clear();
            }
            let tramp = Tramp {
                handlers,
                returns,
                ret_tramp: own_ret.unwrap_or(ret_tramp),
                lean: if go_check.is_some() { None } else { lean },
                itrace,
                span,
                clock_only,
                inside,
                ra_saved,
                script: true,
                trap,
                always,
                crowded: crowded.contains(&file_offset),
                go,
            };
            // Two patches never share a byte (a statement right after
            // another, or inside a function's entry jump).
            let (from, reach) = match lead {
                Some(n) => (addr - n, n),
                None => (addr, site.unwrap_or(16) as u64),
            };
            if let Some(at) = overlapping(&plans, from, from + reach) {
                refused.push(format!("{fname}: its jump would overlap the probe patched at {at:#x}"));
                continue;
            }
            let hop = hopping.get(&file_offset).copied();
            // A function's jump goes after its `endbr64`, as pass 2 planned
            // hops and hosts.
            let skip = match size {
                Some(_) => s.read(addr, patch::LANDING_PAD_LEN).map_or(0, |b| patch::landing_pad_len(&b) as u64),
                None => 0,
            };
            let host = hosts.remove(&(file_offset + skip));
            let placed = match (size, site, hop, host) {
                // A Go function's jump displaces its stack-bound check.
                _ if go_check.is_some() => self.function(s, &mut code, addr, 0, go_check, tramp)?,
                (None, Some(_), _, None) if lead_call => self.call_site(s, &mut code, addr, tramp)?,
                (None, Some(_), _, None) if lead.is_some() => {
                    self.lead_in(s, &mut code, addr, lead.unwrap_or(0) as usize, tramp)?
                }
                // A hop's host: its jump, then the hop's, in what it displaces.
                (_, _, _, Some(displaced)) => {
                    self.function(s, &mut code, addr + skip, 0, Some(displaced as usize), tramp)?
                }
                (Some(_), _, Some(hop), None) => match runtime_addr(maps, module, hop.host_file_offset) {
                    Some(host) => {
                        let slot = host + u64::from(hop.slot);
                        self.function(s, &mut code, addr + skip, 0, Some(hop.displaced as usize), tramp)?.and_then(
                            |mut p| {
                                // A short jump to the slot in the host; the
                                // slot's jump goes to the trampoline.
                                let (at, orig, patch) = &mut p.plan;
                                let Some(short) = patch::short_jump(*at, slot) else {
                                    return Err("the slot of its hop is out of a short jump's reach".to_string());
                                };
                                slots.push((slot, p.tramp, *at));
                                *patch = short;
                                patch.resize(orig.len(), arch::TRAP);
                                Ok(p)
                            },
                        )
                    }
                    None => Err("the host of its hop is not mapped".into()),
                },
                (Some(size), _, None, None) => self.function(s, &mut code, addr, size, None, tramp)?,
                (None, Some(displaced), _, None) => match pad {
                    Some(pad) => self.padded(s, &mut code, addr, displaced, addr + pad, tramp)?,
                    None => self.function(s, &mut code, addr, 0, Some(displaced), tramp)?,
                },
                (None, None, _, None) => continue,
            };
            // Its other patches (a loop's retargeted branches, a short
            // jump's slot in the padding) must not touch another probe's
            // either; then the overlap checks of what comes next see them.
            let clash = placed.as_ref().ok().and_then(|p| {
                p.retargets
                    .iter()
                    .find_map(|(at, orig, _)| overlapping(&plans, *at, at + orig.len() as u64).map(|_| *at))
            });
            match (placed, clash) {
                (Ok(_), Some(at)) => {
                    refused.push(format!("{fname}: its patch at {at:#x} would overlap another probe's"))
                }
                (Ok(p), None) => {
                    if let Some(why) = &p.trap {
                        self.trapped.borrow_mut().push(Trapped {
                            pid,
                            site: p.plan.0,
                            tramp: p.tramp,
                            name: fname.clone(),
                            why: why.clone(),
                        });
                    }
                    plans.extend(p.into_plans())
                }
                (Err(why), _) => refused.push(format!("{fname}: {why}")),
            }
        }
        // Hosts with no probe of their own: a trampoline that only runs
        // their displaced instructions.
        for (file_offset, displaced) in hosts {
            let Some(addr) = runtime_addr(maps, module, file_offset) else { continue };
            let end = addr + u64::from(displaced);
            let clash = overlapping(&plans, addr, end).is_some();
            let placed = if clash {
                Err("another probe's jump is there".to_string())
            } else {
                self.function(s, &mut code, addr, 0, Some(displaced as usize), Tramp::pass_through())?
            };
            match placed {
                Ok(p) => plans.extend(p.into_plans()),
                Err(why) => {
                    // The functions hopping through it are not hooked.
                    let gone: Vec<u64> = slots.iter().filter(|s| s.0 >= addr && s.0 < end).map(|s| s.2).collect();
                    plans.retain(|(at, _, _)| !gone.contains(at));
                    slots.retain(|(slot, _, _)| *slot < addr || *slot >= end);
                    refused.push(format!("the functions hopping through {addr:#x}: {why}"));
                }
            }
        }
        // The hops' jumps, in their hosts' patches.
        const JMP: u64 = patch::JUMP_LEN as u64;
        for (slot, to, from) in slots {
            let host = plans.iter().position(|(at, orig, _)| slot >= *at && slot + JMP <= at + orig.len() as u64);
            match (patch::jump(slot, to), host) {
                (Some(jmp), Some(i)) => {
                    let (at, _, patch) = &mut plans[i];
                    let o = (slot - *at) as usize;
                    // Only into the host's own dead bytes (int3 fill).
                    if patch.get(o..o + jmp.len()).is_some_and(|b| b.iter().all(|&x| x == arch::TRAP)) {
                        patch[o..o + jmp.len()].copy_from_slice(&jmp);
                        continue;
                    }
                    plans.retain(|(at, _, _)| *at != from);
                    refused.push(format!("the function at {from:#x}: its hop's slot at {slot:#x} is taken"));
                }
                _ => {
                    plans.retain(|(at, _, _)| *at != from);
                    refused.push(format!("the function at {from:#x}: the host of its hop could not be hooked"));
                }
            }
        }
        // Its veneer pages after it.
        let mut codes = vec![code];
        codes.append(&mut self.veneers.borrow_mut());
        Ok((codes, plans))
    }
}
