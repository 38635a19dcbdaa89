//! Trust domains (invariant 6): the processes sharing a region have the
//! credentials of the session's first process. A process of other
//! credentials (a worker that dropped its privileges, a `-p` process or a
//! program exec'd as another user) works in a region of its own domain,
//! mapped at the same address and run by the same compiled code; the
//! consumer drains every domain's ring, the counters are summed, and at
//! the end the domains' globals are folded into the session's
//! (`crate::merge`).

use super::*;

/// At most this many trust domains besides the session's own; a process
/// of one more is cut off (its probes off) with a warning.
pub(super) const MAX_DOMAINS: usize = 16;

/// The region of one of the session's other trust domains.
pub(super) struct DomainRegion {
    pub(super) creds: crate::os::creds::Credentials,
    pub(super) region: std::sync::Arc<crate::region::Region>,
    /// Its memfd's inode (a process that maps it is of this domain).
    pub(super) ino: u64,
    /// The holder of its memfd for an unprivileged domain (`os::holder`).
    pub(super) holder: Option<crate::os::holder::Holder>,
    /// Its globals as they started (`merge::seed`).
    pub(super) start: crate::merge::Snapshot,
    /// How messages name it ("uid 33 (www-data)").
    pub(super) name: String,
}

impl Armed {
    /// Processes of the session (forked, or exec'd and followed) whose
    /// credentials are no longer those of the region they map (a worker
    /// that dropped its privileges), every 50 ms at most, once two looks
    /// agree on them: moved to the
    /// region of their own trust domain (`move_to_domain`), or, where that
    /// cannot be (a session with `.itrace` probes, more domains than
    /// `MAX_DOMAINS`, a failure), cut off: their region replaced by
    /// private zeroed memory at the same address, so the handlers their
    /// patched code still reaches find the session disabled. Until then
    /// they could forge data in the region, never move a write (the
    /// mirror: invariant 6). Cleaned at the end like other forked children
    /// (`restore`).
    pub(super) fn check_domains(&mut self) {
        let now = std::time::Instant::now();
        if self.domain.creds.is_none()
            || self.domain.checked.is_some_and(|t| now - t < std::time::Duration::from_millis(50))
        {
            return;
        }
        self.domain.checked = Some(now);
        let followed: Vec<i32> =
            self.follow.as_ref().map(|f| f.children.iter().map(|c| c.pid).collect()).unwrap_or_default();
        // Every descendant of the first process and of each process armed
        // after it (a master found by path, a program exec'd), the
        // orphans the tracer adopted, and the followed ones themselves
        // (cheap: no maps are read but those of one whose credentials
        // differ).
        let me = std::process::id() as i32;
        let mut pids = self.descendants();
        for root in followed.iter().copied().chain([me]) {
            let more: Vec<i32> = std::iter::once(root)
                .filter(|&r| r != me)
                .chain(self.descendants_of(root))
                .filter(|p| !pids.contains(p))
                .collect();
            pids.extend(more);
        }
        // Never the tracer's own processes (its probes' sandbox maps the
        // region, a holder runs as a domain's user): children of the
        // tracer that run its executable.
        let own_exe = crate::os::proc::exe_id(me);
        let own: Vec<i32> =
            crate::os::proc::children(me).into_iter().filter(|&c| crate::os::proc::exe_id(c) == own_exe).collect();
        pids.retain(|p| !own.contains(p));
        let settling = std::mem::take(&mut self.domain.settling);
        for pid in pids {
            if self.domain.cut_off.iter().any(|&(p, _)| p == pid) {
                continue;
            }
            // Gone (or a zombie): nothing of it runs any more.
            let Some(creds) = crate::os::creds::Credentials::of(pid) else { continue };
            // Of the domain whose region it maps? Cheap first: a process of
            // the first domain's credentials that maps no other region.
            let first = self.domain.creds.clone();
            let home = match self.region_mapped(pid) {
                Some(i) => i,
                // Not the session's (exec'd unprobed, cut off), or it maps
                // none any more.
                None => continue,
            };
            let home_creds = match home {
                0 => first,
                i => self.domain.others.get(i - 1).map(|d| d.creds.clone()),
            };
            let Some(why) = home_creds.filter(|h| !h.same_domain(&creds)).map(|h| creds.difference(&h)) else {
                continue;
            };
            // A vfork child sharing its parent's memory: the parent's.
            if crate::os::process::same_vm(pid, self.target.pid) {
                continue;
            }
            // Settled: the same credentials at the last check.
            if !settling.iter().any(|(p, c)| *p == pid && *c == creds) {
                self.domain.settling.push((pid, creds));
                continue;
            }
            let what = format!("pid {pid} ({})", crate::os::proc::comm(pid).trim());
            let fork = !followed.contains(&pid);
            let moved = match self.follow.is_some() {
                true => self.move_to_domain(pid, fork, &creds),
                false => Err("a session with .itrace probes traces one process".into()),
            };
            let note = match moved {
                Ok(d) => {
                    format!(
                        "{what} changed its credentials ({why}): processes of different privileges never share a \
                         session's memory, so its probes go on in memory of their own ({})",
                        self.domain.others[d].name
                    )
                }
                Err(e) => {
                    let cut = self.cut(pid, fork);
                    self.domain.cut_off.push((pid, fork));
                    match cut {
                        Ok(()) => format!(
                            "{what} changed its credentials ({why}): processes of different privileges never share \
                             a session's memory, and {e}, so its probes are off from now on"
                        ),
                        // It ended meanwhile (perhaps right after it was cut off).
                        Err(_) if crate::os::creds::Credentials::of(pid).is_none() => {
                            format!("{what} changed its credentials ({why}), then ended")
                        }
                        Err(c) => format!("{what} changed its credentials ({why}) and could not be cut off: {c}"),
                    }
                }
            };
            self.warn(note);
        }
    }

    /// Which of the session's regions process `pid` maps: 0 the session's
    /// own, `i` its other domain `i - 1`; None for none.
    pub(super) fn region_mapped(&self, pid: i32) -> Option<usize> {
        let inos = self.session_inos();
        let maps = crate::os::proc::maps(pid).ok()?;
        maps.iter()
            .filter(|m| m.path.to_string_lossy().starts_with("/memfd:telco-stap"))
            .find_map(|m| inos.iter().position(|&i| i == m.inode))
    }

    /// The inodes of the session's regions: its own, then its other
    /// domains'.
    pub(super) fn session_inos(&self) -> Vec<u64> {
        std::iter::once(self.region.ino).chain(self.domain.others.iter().map(|d| d.ino)).collect()
    }

    /// Whether process `pid` maps one of the session's regions.
    pub(super) fn maps_session(&self, pid: i32) -> bool {
        crate::os::proc::maps_any(pid, "/memfd:telco-stap", &self.session_inos())
    }

    /// The trust domain process `pid` is armed in: None for the session's
    /// own (its first process's credentials), `Some(i)` for
    /// `domain.others[i]` (made now if it is the first of its
    /// credentials); Err: why it cannot be armed (a setuid exec, its
    /// credentials unreadable, too many domains).
    pub(super) fn domain_for(&mut self, pid: i32) -> Result<Option<usize>, String> {
        let Some(first) = self.domain.creds.clone() else { return Ok(None) };
        let creds = crate::os::creds::Credentials::of(pid).ok_or("its credentials cannot be read")?;
        if creds.same_domain(&first) && !crate::os::creds::secure_exec(pid) {
            return Ok(None);
        }
        if crate::os::creds::secure_exec(pid) {
            return Err("it runs with other credentials than the session's first process (a setuid, setgid or \
                        capability exec): processes of different privileges never share a session's memory, so it \
                        runs without probes"
                .into());
        }
        if self.follow.is_none() {
            return Err(format!(
                "it runs with other credentials than the session's first process ({}): a session with .itrace \
                 probes traces one trust domain, so it runs without probes",
                creds.difference(&first)
            ));
        }
        self.domain_index(&creds, pid).map(Some)
    }

    /// The index of the domain of credentials `creds` in `domain.others`,
    /// its region made now (for process `pid`) if it has none yet.
    fn domain_index(&mut self, creds: &crate::os::creds::Credentials, pid: i32) -> Result<usize, String> {
        if let Some(i) = self.domain.others.iter().position(|d| d.creds.same_domain(creds)) {
            return Ok(i);
        }
        if self.domain.others.len() >= MAX_DOMAINS {
            return Err(format!("the session has {MAX_DOMAINS} trust domains already"));
        }
        let a = &self.hooker.artifact;
        if self.region.header.is_null() {
            return Err("the session's region is gone".into());
        }
        let comm = crate::os::proc::comm(pid);
        let region = crate::region::Region::for_domain(a, pid as u64, comm.trim())
            .map_err(|e| format!("no memory for its trust domain: {e}"))?;
        let size = a.region_size as usize;
        // SAFETY: both regions are mapped region_size bytes in the tracer
        // for the session (the main one in `InTarget::header`).
        let (main, dom) = unsafe {
            (crate::merge::Mem::new(self.region.header as *mut u8, size), crate::merge::Mem::new(region.base(), size))
        };
        let start = crate::merge::seed(&main, &dom, a);
        let ino = crate::os::proc::fd_inode(region.fd());
        let name = creds.describe();
        self.domain.others.push(DomainRegion {
            creds: creds.clone(),
            region: std::sync::Arc::new(region),
            ino,
            holder: None,
            start,
            name,
        });
        Ok(self.domain.others.len() - 1)
    }

    /// The process whose descriptors a process of domain `i` opens its
    /// region through (the tracer for a domain with root among its ids,
    /// else the domain's holder, started now), and the region's and the
    /// session's mirror's descriptor numbers there.
    pub(super) fn domain_access(&mut self, i: usize) -> Result<(i32, i32, i32), String> {
        let me = std::process::id() as i32;
        let mirror_fd = self.follow.as_ref().map_or(-1, |f| f.mirror_fd);
        let d = self.domain.others.get_mut(i).ok_or("no such domain")?;
        let fd = d.region.fd();
        let Some(ids) = d.creds.ids().filter(|i| i.unprivileged()) else { return Ok((me, fd, mirror_fd)) };
        if d.holder.is_none() {
            let h = crate::os::holder::Holder::spawn(&ids, [fd, mirror_fd])
                .map_err(|e| format!("no holder of its trust domain's memory: {e}"))?;
            d.holder = Some(h);
        }
        Ok((d.holder.as_ref().map_or(me, |h| h.pid()), fd, mirror_fd))
    }

    /// Move process `pid` (`fork`: it runs the first process's image),
    /// whose credentials `creds` are no longer those of the region it
    /// maps, to the region of its own domain: no thread of it inside our
    /// code, the domain's region mapped over the old one at the same
    /// address, and its threads' slots made to take rows anew there (their
    /// shadow stacks kept). Returns the domain's index.
    pub(super) fn move_to_domain(
        &mut self,
        pid: i32,
        fork: bool,
        creds: &crate::os::creds::Credentials,
    ) -> Result<usize, String> {
        let back_home = self.domain.creds.as_ref().is_some_and(|c| c.same_domain(creds));
        if back_home {
            return Err("a process never goes back to the session's own memory".into());
        }
        let i = self.domain_index(creds, pid)?;
        let (holder, fd, _) = self.domain_access(i)?;
        let (remote, size, threads_at) = match &self.follow {
            Some(f) => (f.region_remote, f.region_size, f.threads_at),
            None => return Err("the session follows no process".into()),
        };
        let code = self.our_code();
        let stub = self.stub_of(pid);
        let mut s = Stopped::attach(pid).map_err(|e| e.to_string())?;
        if fork {
            s.use_stub(stub.as_ref());
        }
        let moved = (|| -> Result<(), String> {
            let inside = |pc: u64| code.iter().any(|&(at, n)| pc >= at && pc < at + n);
            let stuck = s.run_out(&inside, 200).map_err(|e| e.to_string())?;
            if let Some(tid) = stuck.first() {
                return Err(format!("its thread {tid} stayed inside a probe for 200 ms"));
            }
            inject::remap_region_at(&mut s, holder, fd, remote, size).map_err(|e| e.to_string())?;
            // Its slots: the next hit of each thread takes a row in the new
            // region (the old one's row numbers mean other threads there).
            if threads_at != 0 {
                let n = self.hooker.artifact.nthreads as usize;
                let size = core::mem::size_of::<telco_abi::region::ThreadSlot>();
                let mut slots = s.read(threads_at, size * n).map_err(|e| e.to_string())?;
                let (tid_at, busy_at, pid_at) = (
                    core::mem::offset_of!(telco_abi::region::ThreadSlot, tid),
                    core::mem::offset_of!(telco_abi::region::ThreadSlot, busy),
                    core::mem::offset_of!(telco_abi::region::ThreadSlot, pid),
                );
                for slot in slots.chunks_mut(size) {
                    if slot[..8] != [0; 8] {
                        for at in [tid_at, busy_at, pid_at] {
                            slot[at..at + 4].fill(0);
                        }
                    }
                }
                s.write(threads_at, &slots).map_err(|e| e.to_string())?;
            }
            Ok(())
        })();
        let _ = s.detach();
        moved.map(|()| i)
    }

    /// The session stopped (no handler runs in any of its processes):
    /// every other domain's globals folded into the session's region, in
    /// the order the domains appeared; (warnings, errors) to say.
    pub(super) fn fold_domains(&mut self) -> (Vec<String>, Vec<String>) {
        let (mut warnings, mut errors) = (Vec::new(), Vec::new());
        let a = &self.hooker.artifact;
        if self.region.header.is_null() {
            return (warnings, errors);
        }
        let size = a.region_size as usize;
        for d in &self.domain.others {
            if let Some(damage) = d.region.damage(a) {
                errors.push(format!("processes of {}: {damage}; their share is not counted", d.name));
                continue;
            }
            // SAFETY: both regions are mapped region_size bytes in the
            // tracer for the session; no handler runs in them any more.
            let (main, dom) = unsafe {
                (
                    crate::merge::Mem::new(self.region.header as *mut u8, size),
                    crate::merge::Mem::new(d.region.base(), size),
                )
            };
            let (w, e) = crate::merge::fold(&main, &dom, &d.start, a, &d.name);
            warnings.extend(w);
            errors.extend(e);
        }
        (warnings, errors)
    }

    /// The remote-operation stub process `pid` holds: that of the armed
    /// process whose image it runs (the first process, or a `Child`: a
    /// program exec'd, a `-p` worker), copied into its forks.
    fn stub_of(&self, pid: i32) -> Option<crate::os::ptrace::StubPlace> {
        let children = self.follow.as_ref().map(|f| f.children.as_slice()).unwrap_or_default();
        match self.owner_of(pid) {
            Some(o) if children.iter().any(|c| c.pid == o) => children.iter().find(|c| c.pid == o)?.stub.clone(),
            Some(o) if o == self.target.pid => self.undo.stub.clone(),
            _ => None,
        }
    }

    /// Replace the region in process `pid` by zeroed private memory
    /// (`check_domains`); `fork`: it runs the first process's image (its
    /// remote-operation stub is there too).
    pub(super) fn cut(&mut self, pid: i32, fork: bool) -> Result<(), String> {
        let stub = self.stub_of(pid);
        let mut s = Stopped::attach(pid).map_err(|e| e.to_string())?;
        if fork {
            s.use_stub(stub.as_ref());
        }
        let size = self.hooker.artifact.region_size.next_multiple_of(4096);
        let tid = s.main_thread();
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED) as u64;
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let r = s.syscall(tid, libc::SYS_mmap, [self.region.remote, size, prot, flags, u64::MAX, 0]);
        let r = r.map_err(|e| e.to_string())?;
        // Cut off once the mapping is replaced, whatever the detach says
        // (a process that ends meanwhile cannot be detached from).
        let _ = s.detach();
        if r as u64 != self.region.remote {
            return Err(format!("mmap in pid {pid} returned {r}"));
        }
        Ok(())
    }

    /// The descendants of the traced process (a few levels, a bounded
    /// number) that still run its image: they map the session's region
    /// (its memfd's inode), do not share its memory (a vfork child) and are
    /// not programs it exec'd (followed apart).
    pub(super) fn forked_children(&self) -> Vec<i32> {
        self.forked_from(self.target.pid)
    }

    /// The processes forked by `armed` (the first process, or a `Child`)
    /// or by its forks, that still run the image it was armed in: they
    /// map the session's region (its memfd's inode), do not share its
    /// memory (a vfork child), and their nearest armed ancestor is
    /// `armed` (a program one of them exec'd is followed apart, and so
    /// are its forks).
    pub(super) fn forked_from(&self, armed: i32) -> Vec<i32> {
        // Its descendants, and the orphans the tracer adopted (daemons:
        // `os::process::become_subreaper`).
        let me = std::process::id() as i32;
        let mut candidates = self.descendants_of(armed);
        candidates.extend(self.descendants_of(me).into_iter().filter(|p| !candidates.contains(p)).collect::<Vec<_>>());
        candidates
            .into_iter()
            .filter(|&c| {
                c != armed
                    && self.maps_session(c)
                    && !crate::os::process::same_vm(c, armed)
                    && self.owner_of(c) == Some(armed)
            })
            .take(256)
            .collect()
    }

    /// The armed process (the first, or a `Child`) whose image process
    /// `pid` runs: its nearest armed ancestor; for an orphan the tracer
    /// adopted (its line broken by a parent that exited), the armed
    /// process whose patches it holds.
    pub(super) fn owner_of(&self, pid: i32) -> Option<i32> {
        if let Some(a) = self.armed_ancestor(pid) {
            return Some(a);
        }
        let mem = crate::os::proc::mem(pid, false).ok()?;
        let holds = |patches: &[Patch]| {
            patches.first().is_some_and(|p| {
                let mut b = vec![0u8; p.patched.len()];
                std::os::unix::fs::FileExt::read_exact_at(&mem, &mut b, p.at).is_ok() && b == p.patched
            })
        };
        let children = self.follow.as_ref().map(|f| f.children.as_slice()).unwrap_or_default();
        let first_exec_d = children.iter().any(|c| c.pid == self.target.pid);
        if !first_exec_d && holds(&self.undo.patches) {
            return Some(self.target.pid);
        }
        children.iter().find(|c| holds(&c.patches)).map(|c| c.pid)
    }

    /// The nearest process of `pid`'s line (itself included) that the
    /// session armed: a `Child` (armed after an exec, or at the start),
    /// else the first process (unless it exec'd: then its `Child` entry).
    pub(super) fn armed_ancestor(&self, pid: i32) -> Option<i32> {
        let children: Vec<i32> =
            self.follow.as_ref().map(|f| f.children.iter().map(|c| c.pid).collect()).unwrap_or_default();
        let mut p = pid;
        for _ in 0..64 {
            if children.contains(&p) || p == self.target.pid {
                return Some(p);
            }
            let (_, ppid) = crate::os::proc::uid_and_parent(p as u32)?;
            if ppid <= 1 || ppid as i32 == std::process::id() as i32 {
                return None;
            }
            p = ppid as i32;
        }
        None
    }

    /// The descendants of the traced process: a few levels, at most 1024.
    pub(super) fn descendants(&self) -> Vec<i32> {
        self.descendants_of(self.target.pid)
    }

    /// The descendants of process `pid`: a few levels, at most 1024.
    pub(super) fn descendants_of(&self, pid: i32) -> Vec<i32> {
        let mut out = Vec::new();
        let mut work = vec![pid];
        while let Some(p) = work.pop() {
            for c in crate::os::proc::children(p) {
                if out.len() < 1024 && !out.contains(&c) && c != pid {
                    out.push(c);
                    work.push(c);
                }
            }
        }
        out
    }
}
