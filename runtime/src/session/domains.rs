//! The trust domain: a child whose credentials change is cut off from the
//! region (invariant 6).

use super::*;

impl Armed {
    /// Why process `pid` is not of the session's trust domain (other
    /// credentials than its first process had, or a secure exec), or None.
    pub(super) fn other_domain(&self, pid: i32) -> Option<String> {
        use crate::os::creds::{secure_exec, Credentials};
        let first = self.domain.creds.as_ref()?;
        match Credentials::of(pid) {
            None => Some("its credentials cannot be read".into()),
            Some(c) if !c.same_domain(first) => Some(c.difference(first)),
            Some(_) if secure_exec(pid) => Some("a setuid, setgid or capability exec".into()),
            Some(_) => None,
        }
    }

    /// Children of the session (forked, or exec'd and followed) whose
    /// credentials are no longer the first process's (a worker that
    /// dropped its privileges): cut off from the region, every 50 ms at
    /// most. Their region is replaced by private zeroed memory at the same
    /// address, so the handlers their patched code still reaches find the
    /// session disabled and whatever they write stays in their own
    /// memory; the read-only mirror gives their code no address from a
    /// process of another domain. Until then they could forge data in the
    /// region, never move a write (the mirror: invariant 6). Cleaned at
    /// the end like other forked children (`restore`).
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
        // Every descendant (cheap: no maps are read but those of one whose
        // credentials differ), and the followed ones.
        let mut pids = self.descendants();
        pids.extend(followed.iter().copied().filter(|p| !pids.contains(p)).collect::<Vec<_>>());
        for pid in pids {
            if self.domain.cut_off.iter().any(|&(p, _)| p == pid) {
                continue;
            }
            // Gone (or a zombie): nothing of it runs any more.
            let Some(creds) = crate::os::creds::Credentials::of(pid) else { continue };
            let Some(why) = self
                .domain
                .creds
                .as_ref()
                .filter(|first| !first.same_domain(&creds))
                .map(|first| creds.difference(first))
            else {
                continue;
            };
            // Not the session's (it maps no region of ours: exec'd unprobed,
            // a vfork child sharing its parent's memory, one cut off).
            let ours = crate::os::proc::maps_file(pid, "/memfd:telco-stap", self.region.ino);
            if !ours || crate::os::process::same_vm(pid, self.target.pid) {
                continue;
            }
            let what = format!("pid {pid} ({})", crate::os::proc::comm(pid).trim());
            let fork = !followed.contains(&pid);
            let note = match self.cut(pid, fork) {
                Ok(()) => format!(
                    "{what} changed its credentials ({why}): processes of different privileges never share a \
                     session's memory, so its probes are off from now on"
                ),
                // It ended meanwhile (perhaps right after it was cut off).
                Err(_) if crate::os::creds::Credentials::of(pid).is_none() => {
                    format!("{what} changed its credentials ({why}), then ended")
                }
                Err(e) => format!("{what} changed its credentials ({why}) and could not be cut off: {e}"),
            };
            self.domain.cut_off.push((pid, fork));
            self.warn(note);
        }
    }

    /// Replace the region in process `pid` by zeroed private memory
    /// (`check_domains`); `fork`: it runs the first process's image (its
    /// remote-operation stub is there too).
    pub(super) fn cut(&mut self, pid: i32, fork: bool) -> Result<(), String> {
        let mut s = Stopped::attach(pid).map_err(|e| e.to_string())?;
        if fork {
            s.use_stub(self.undo.stub.as_ref());
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
                    && crate::os::proc::maps_file(c, "/memfd:telco-stap", self.region.ino)
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
