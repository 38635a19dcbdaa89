//! Putting a compiled artifact into a stopped target: the shared region and
//! the code.
//!
//! * The region is a memfd created *in the target* (injected `memfd_create`,
//!   `ftruncate`, `mmap(MAP_SHARED)`); the tracer opens `/proc/PID/fd/N`
//!   (ptrace rights suffice) and maps the same pages, then the target closes
//!   its descriptor. This direction works whatever the target's
//!   credentials.
//! * Code goes into an executable mapping within ±2 GiB of the module it
//!   probes (so a `jmp rel32` reaches it), written through `/proc/PID/mem`.
//!   It starts with a few `int3` bytes (the return trap of remote calls),
//!   then a copy of the blob, then room for trampolines.
//! * The thread slots and their shadow stacks go into a private anonymous
//!   mapping ([`threads`]): a forked child gets a copy, consistent with its
//!   copy of the stacks. A program a followed process execs gets the
//!   region and the slots at the addresses the trampolines already know
//!   ([`map_region_at`], [`threads_at`]).

pub use crate::error::InjectError;
use crate::os::ptrace::Stopped;
use crate::os::sys::SharedMemory;
use crate::region::Region;
use std::os::fd::OwnedFd;
use telco_abi::artifact::Artifact;

/// The bytes at the start of every code region: `int3`, the trap remote
/// calls return to.
pub const TRAP_BYTES: usize = 64;

/// One executable mapping in the target.
#[derive(Clone, Debug)]
pub struct CodeRegion {
    pub remote: u64,
    pub size: u64,
    /// Where the blob starts.
    pub blob: u64,
    /// The next free byte (for trampolines).
    pub next: u64,
}

impl CodeRegion {
    pub fn trap(&self) -> u64 {
        self.remote
    }

    /// Address of a blob offset (a handler, `rt_format`, ...).
    pub fn at(&self, offset: u32) -> u64 {
        self.blob + u64::from(offset)
    }

    /// Reserve `len` bytes (16-aligned) for a trampoline.
    pub fn alloc(&mut self, len: usize) -> Option<u64> {
        let at = self.next.next_multiple_of(16);
        if at + len as u64 > self.remote + self.size {
            return None;
        }
        self.next = at + len as u64;
        Some(at)
    }
}

/// What injection made in the target.
pub struct Injected {
    pub region: Region,
    pub region_remote: u64,
    /// The region's and the mirror's descriptors in the target, kept open
    /// (`region(.., keep)`): processes of its user open them through
    /// `/proc/PID/fd/N` ([`map_region_at`]), which the tracer's own
    /// descriptors are not to them (another user's `/proc` entries).
    pub target_fds: Option<(i32, i32)>,
}

/// `MAP_FIXED_NOREPLACE` (Linux 4.17): at this address or fail, never over
/// another mapping.
const MAP_FIXED_NOREPLACE: u64 = 0x100000;

fn check(call: &'static str, pid: i32, r: i64) -> Result<i64, InjectError> {
    if (-4095..0).contains(&r) {
        return Err(InjectError::Remote { call, pid, err: std::io::Error::from_raw_os_error(-r as i32) });
    }
    Ok(r)
}

/// Bytes for the remote-operation stub that the program never uses: past
/// the end of a code segment, in that segment's last page (mapped
/// executable with it, beyond every section): the main executable's, else
/// the dynamic loader's, else the vDSO's. Found from the program headers
/// the auxiliary vector points at (`AT_PHDR`, `AT_BASE`,
/// `AT_SYSINFO_EHDR`; read from the target's memory: untrusted, bounded);
/// None when there is no such room (the stub then gets a page of its
/// own).
pub fn slack(s: &Stopped) -> Option<u64> {
    let auxv = crate::os::proc::auxv(s.pid()).ok()?;
    let maps = crate::os::proc::maps(s.pid()).ok()?;
    // The program's own headers, then the dynamic loader's (its ELF
    // header is at AT_BASE, its program headers in the same page).
    if let (Some(phdr), Some(phnum)) =
        (crate::os::proc::aux_value(&auxv, libc::AT_PHDR), crate::os::proc::aux_value(&auxv, libc::AT_PHNUM))
    {
        if let Some(at) = slack_in(s, &maps, phdr, phnum as usize, None) {
            return Some(at);
        }
    }
    // Then the dynamic loader's and the vDSO's, from their ELF headers.
    for kind in [libc::AT_BASE, libc::AT_SYSINFO_EHDR] {
        let Some(base) = crate::os::proc::aux_value(&auxv, kind).filter(|&b| b != 0) else { continue };
        let Ok(eh) = s.read(base, 64) else { continue };
        if !eh.starts_with(b"\x7fELF") {
            continue;
        }
        let (Some(phoff), Some(phnum)) = (eh.get(0x20..0x28), eh.get(0x38..0x3a)) else { continue };
        let phoff = u64::from_le_bytes(phoff.try_into().unwrap_or([0; 8]));
        let phnum = u16::from_le_bytes(phnum.try_into().unwrap_or([0; 2]));
        if let Some(at) = base.checked_add(phoff).and_then(|ph| slack_in(s, &maps, ph, usize::from(phnum), Some(base)))
        {
            return Some(at);
        }
    }
    None
}

/// [`slack`] in one module: its program headers at `phdr` (`phnum` of
/// them), its load bias (None: from its PT_PHDR).
fn slack_in(s: &Stopped, maps: &[crate::os::proc::Mapping], phdr: u64, phnum: usize, bias: Option<u64>) -> Option<u64> {
    const PT_LOAD: u32 = 1;
    const PT_PHDR: u32 = 6;
    const PF_X: u32 = 1;
    let bytes = s.read(phdr, 56 * phnum.min(64)).ok()?;
    let u32_at = |b: &[u8], o: usize| b.get(o..o + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    let u64_at = |b: &[u8], o: usize| b.get(o..o + 8).and_then(|w| w.try_into().ok()).map(u64::from_le_bytes);
    let headers: Vec<&[u8]> = bytes.chunks_exact(56).collect();
    // The load bias: given, or where PT_PHDR's address really is.
    let bias = match bias {
        Some(b) => b,
        None => headers
            .iter()
            .find(|h| u32_at(h, 0) == Some(PT_PHDR))
            .and_then(|h| Some(phdr.wrapping_sub(u64_at(h, 16)?)))?,
    };
    let size = crate::arch::native::stub::SIZE;
    for h in headers {
        let (Some(PT_LOAD), Some(flags)) = (u32_at(h, 0), u32_at(h, 4)) else { continue };
        let (Some(vaddr), Some(filesz), Some(memsz)) = (u64_at(h, 16), u64_at(h, 32), u64_at(h, 40)) else { continue };
        if flags & PF_X == 0 || filesz != memsz {
            continue;
        }
        let end = bias.wrapping_add(vaddr).checked_add(filesz)?;
        let start = end.checked_next_multiple_of(16)?;
        let page_end = end.checked_next_multiple_of(4096)?;
        // Inside one mapping that covers the whole page.
        let mapped = maps.iter().any(|m| m.start <= start && page_end <= m.end);
        if page_end.saturating_sub(start) >= size && mapped {
            return Some(start);
        }
    }
    None
}

/// Create the shared region and its trusted mirror in the target and map
/// them here too: the mirror `MIRROR_GAP` below the region, in the target
/// read-only, and sealed against writing before the target maps it
/// (`telco_abi::region::MIRROR_GAP`, `SharedMemory::mirrored`).
pub fn region(s: &mut Stopped, a: &Artifact, execname: &str, keep: bool) -> Result<Injected, InjectError> {
    let pid = s.pid();
    let tid = s.main_thread();
    let size = a.region_size;
    let [(fd, file), (mfd, mfile)] = memfd_pair(s, b"telco-stap\0", b"telco-mirror\0", size)?;
    let result = (|| {
        // Here first: the mirror is sealed against writing before the
        // target maps it, so its mapping there can never be made writable.
        let (mem, trusted) = SharedMemory::mirrored(OwnedFd::from(file), OwnedFd::from(mfile), size as usize)
            .map_err(InjectError::MapRegion)?;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        for _ in 0..8 {
            let remote = check(
                "mmap (shared memory)",
                pid,
                s.syscall(tid, libc::SYS_mmap, [far_hint(), size, rw, libc::MAP_SHARED as u64, fd as u64, 0])?,
            )? as u64;
            let below = remote.wrapping_sub(telco_abi::region::MIRROR_GAP);
            let r = s.syscall(
                tid,
                libc::SYS_mmap,
                [below, size, libc::PROT_READ as u64, libc::MAP_SHARED as u64 | MAP_FIXED_NOREPLACE, mfd as u64, 0],
            )?;
            if r as u64 == below {
                let region = Region::init(mem, trusted, a, pid as u64, execname)?;
                let target_fds = keep.then_some((fd as i32, mfd as i32));
                return Ok(Injected { region, region_remote: remote, target_fds });
            }
            // Taken (or an old kernel's other place): try elsewhere.
            let failed = (-4095..0).contains(&r);
            if !failed {
                let _ = s.syscall(tid, libc::SYS_munmap, [r as u64, size, 0, 0, 0, 0]);
            }
            let _ = s.syscall(tid, libc::SYS_munmap, [remote, size, 0, 0, 0, 0]);
            if failed && r != -i64::from(libc::EEXIST) {
                check("mmap (the region's mirror)", pid, r)?;
            }
        }
        Err(InjectError::Remote {
            call: "mmap (the region's mirror)",
            pid,
            err: std::io::Error::from_raw_os_error(libc::EEXIST),
        })
    })();
    // The target needs no descriptor (the mappings keep the memory), but
    // for the other processes of its user (`keep`; closed by the caller).
    if !(keep && result.is_ok()) {
        close_in(s, &[fd, mfd]);
    }
    result
}

/// Two memfds made in the target ([`memfd_in`]): the first sealed against
/// resizing, the second left for `os::sys::seal_mirror`.
fn memfd_pair(
    s: &mut Stopped,
    first: &[u8],
    second: &[u8],
    size: u64,
) -> Result<[(i64, std::fs::File); 2], InjectError> {
    let a = memfd_in(s, first, size, true)?;
    match memfd_in(s, second, size, false) {
        Ok(b) => Ok([a, b]),
        Err(e) => {
            close_in(s, &[a.0]);
            Err(e)
        }
    }
}

/// Close the target's descriptors `fds`.
pub(crate) fn close_in(s: &mut Stopped, fds: &[i64]) {
    let tid = s.main_thread();
    for &fd in fds {
        let _ = s.syscall(tid, libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    }
}

/// A memfd named `name` (NUL-terminated) of `size` bytes made in the
/// target (its descriptor there) and opened here; `sealed`: against
/// resizing (the mirror gets its seals from `SharedMemory::mirrored`).
fn memfd_in(s: &mut Stopped, name: &[u8], size: u64, sealed: bool) -> Result<(i64, std::fs::File), InjectError> {
    let pid = s.pid();
    let tid = s.main_thread();
    // The name for memfd_create goes just below the red zone of the thread.
    let sp = crate::arch::native::sp(&s.regs(tid)?);
    let name_at = sp.wrapping_sub(512) & !15;
    s.write(name_at, name)?;
    let fd = check(
        "memfd_create",
        pid,
        s.syscall(
            tid,
            libc::SYS_memfd_create,
            [name_at, (libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) as u64, 0, 0, 0, 0],
        )?,
    )?;
    let opened = (|| {
        check("ftruncate", pid, s.syscall(tid, libc::SYS_ftruncate, [fd as u64, size, 0, 0, 0, 0])?)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(crate::os::proc::fd_path(pid, fd))
            .map_err(|err| InjectError::OpenRegion { pid, fd, err })?;
        if sealed {
            crate::os::sys::seal_size(&file).map_err(InjectError::MapRegion)?;
        }
        // Still the size it was given: the file opened is the one made
        // above, or one that can do the tracer's mapping no harm.
        if file.metadata().map_err(InjectError::MapRegion)?.len() < size {
            return Err(InjectError::MapRegion(std::io::Error::other(format!(
                "descriptor {fd} of process {pid} is no longer the memory it created"
            ))));
        }
        Ok(file)
    })();
    match opened {
        Ok(file) => Ok((fd, file)),
        Err(e) => {
            let _ = s.syscall(tid, libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
            Err(e)
        }
    }
}

/// The block tracer's pool (`blocktrace.rs`): `size` bytes made in the
/// target and mapped there and here at the same layout. Its data (every
/// range but `code`, offsets and lengths) is one memfd, read and write on
/// both sides; its code ranges another, which the tracer writes through
/// its own mapping and seals against writing before the target maps them
/// read and execute only (`os::sys::seal_mirror`): a process that shares
/// the pool (a forked child) can never make them writable and put code
/// there that another runs (invariant 6). Returns the tracer's mapping
/// and the target's address.
pub fn itrace_pool(s: &mut Stopped, size: u64, code: &[(u64, u64)]) -> Result<(SharedMemory, u64), InjectError> {
    let pid = s.pid();
    let tid = s.main_thread();
    let [(fd, file), (cfd, cfile)] = memfd_pair(s, b"telco-itrace\0", b"telco-itrace-code\0", size)?;
    let result = (|| {
        let mem = SharedMemory::from_fd(OwnedFd::from(file), size as usize).map_err(InjectError::MapRegion)?;
        // Here first, writable (over the data memfd's pages at the same
        // places); then sealed, before the target maps them.
        for &(off, len) in code {
            crate::os::sys::map_fixed_shared(&cfile, mem.as_ptr() as usize + off as usize, len as usize, off, true)
                .map_err(InjectError::MapRegion)?;
        }
        crate::os::sys::seal_mirror(&cfile).map_err(InjectError::MapRegion)?;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let remote = check(
            "mmap (shared memory)",
            pid,
            s.syscall(tid, libc::SYS_mmap, [far_hint(), size, rw, libc::MAP_SHARED as u64, fd as u64, 0])?,
        )? as u64;
        for &(off, len) in code {
            let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
            let flags = (libc::MAP_SHARED | libc::MAP_FIXED) as u64;
            let r = s.syscall(tid, libc::SYS_mmap, [remote + off, len, rx, flags, cfd as u64, off])?;
            if r as u64 != remote + off {
                let _ = s.syscall(tid, libc::SYS_munmap, [remote, size, 0, 0, 0, 0]);
                check("mmap (code)", pid, r)?;
                return Err(InjectError::Remote {
                    call: "mmap (code)",
                    pid,
                    err: std::io::Error::from_raw_os_error(libc::EEXIST),
                });
            }
        }
        Ok((mem, remote))
    })();
    // The target needs no descriptor: the mappings keep the memory.
    close_in(s, &[fd, cfd]);
    result
}

/// Where to ask for the region and the thread slots (a hint: the kernel
/// picks another place if that one is taken): a random page between 16
/// and 48 TiB, far from where the kernel puts programs, heaps and shared
/// libraries (near 0x55.., 0x7f..). A program the target execs gets them
/// at the same addresses (`map_region_at`, `threads_at`), and its own
/// randomised libraries would otherwise land on them now and then (the
/// thread slots reserve hundreds of MB), leaving that program unarmed.
fn far_hint() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::os::sys::monotonic_ns());
    let pages = (32u64 << 40) >> 12;
    (16u64 << 40) + (h.finish() % pages << 12)
}

/// Map the thread slots and their shadow stacks privately in the target
/// (`Header::threads_at`: a forked child gets a copy, as of its stacks) and
/// give every slot its shadow stack (its row comes when it is claimed).
/// Returns the address.
pub fn threads(s: &mut Stopped, a: &Artifact) -> Result<u64, InjectError> {
    threads_mapped(s, a, None)
}

/// [`threads`] at a given address (a process that exec'd: where the
/// region's header says they are).
pub fn threads_at(s: &mut Stopped, a: &Artifact, at: u64) -> Result<u64, InjectError> {
    threads_mapped(s, a, Some(at))
}

/// Bytes of the thread slots' mapping (slots, then their shadow stacks,
/// the slots' stacks for Go probes, the calls of return probes on Go
/// functions by goroutine, then the trap area:
/// `telco_abi::region::TrapArea`): `crate::region` lays it out.
pub fn threads_size(a: &Artifact) -> u64 {
    crate::region::threads_size(a)
}

fn threads_mapped(s: &mut Stopped, a: &Artifact, fixed: Option<u64>) -> Result<u64, InjectError> {
    use telco_abi::region::ThreadSlot;
    let pid = s.pid();
    let tid = s.main_thread();
    let slot = core::mem::size_of::<ThreadSlot>() as u64;
    let n = u64::from(a.nthreads);
    let stack = u64::from(a.shadow_depth) * u64::from(a.frame_size);
    let size = threads_size(a);
    let at = check(
        "mmap (thread slots and return-probe stacks: a smaller -D MAXRETURNDEPTH needs less)",
        pid,
        s.syscall(
            tid,
            libc::SYS_mmap,
            [
                fixed.unwrap_or_else(far_hint),
                size,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                // Reserved, not committed: the shadow stacks are touched
                // only as deep as calls nest.
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE) as u64
                    | fixed.map_or(0, |_| MAP_FIXED_NOREPLACE),
                u64::MAX,
                0,
            ],
        )?,
    )? as u64;
    if fixed.is_some_and(|f| f != at) {
        let _ = s.syscall(tid, libc::SYS_munmap, [at, size, 0, 0, 0, 0]);
        return Err(InjectError::Remote {
            call: "mmap (thread slots)",
            pid,
            err: std::io::Error::from_raw_os_error(libc::EEXIST),
        });
    }
    let mut table = vec![0u8; (n * slot) as usize];
    let go_stacks = at + (n * slot + n * stack).next_multiple_of(4096).max(4096);
    for i in 0..n {
        let s = (i * slot) as usize;
        let frames = at + n * slot + i * stack;
        table[s + core::mem::offset_of!(ThreadSlot, frames)..][..8].copy_from_slice(&frames.to_le_bytes());
        if crate::region::go_stack(a) > 0 {
            let top = go_stacks + (i + 1) * crate::region::go_stack(a);
            table[s + core::mem::offset_of!(ThreadSlot, go_stack)..][..8].copy_from_slice(&top.to_le_bytes());
        }
    }
    s.write(at, &table)?;
    Ok(at)
}

/// Map the region (the memfd `fd` of process `holder`, through
/// `/proc/HOLDER/fd/N`: the tracer's, or the first process's for the
/// processes of its user) into a process that exec'd or is armed after
/// the first, at `at`: the address the trampolines and handlers of the
/// process it came from use.
pub fn map_region_at(
    s: &mut Stopped,
    holder: i32,
    fd: i32,
    mirror_fd: i32,
    at: u64,
    size: u64,
) -> Result<(), InjectError> {
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    map_fd(s, "region", holder, fd, libc::O_RDWR, rw, at, size, MAP_FIXED_NOREPLACE)?;
    // The trusted mirror, read-only (its memfd is sealed against writing).
    let below = at.wrapping_sub(telco_abi::region::MIRROR_GAP);
    if let Err(e) = map_fd(
        s,
        "the region's mirror",
        holder,
        mirror_fd,
        libc::O_RDONLY,
        libc::PROT_READ as u64,
        below,
        size,
        MAP_FIXED_NOREPLACE,
    ) {
        let tid = s.main_thread();
        let _ = s.syscall(tid, libc::SYS_munmap, [at, size, 0, 0, 0, 0]);
        return Err(e);
    }
    Ok(())
}

/// Map the region of another trust domain (the memfd `fd` of process
/// `holder`) over the region a process maps at `at` (`MAP_FIXED`: it
/// replaces the old mapping at once; the mirror below stays).
pub fn remap_region_at(s: &mut Stopped, holder: i32, fd: i32, at: u64, size: u64) -> Result<(), InjectError> {
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    map_fd(s, "region", holder, fd, libc::O_RDWR, rw, at, size, libc::MAP_FIXED as u64)
}

/// Map descriptor `fd` of process `holder` (`/proc/HOLDER/fd/N`, opened
/// with `flags`) into the stopped process at exactly `at`, `prot`,
/// shared; `fixed`: `MAP_FIXED_NOREPLACE` (never over another mapping),
/// or `MAP_FIXED` (over the one there).
#[allow(clippy::too_many_arguments)]
fn map_fd(
    s: &mut Stopped,
    what: &'static str,
    holder: i32,
    fd: i32,
    flags: i32,
    prot: u64,
    at: u64,
    size: u64,
    fixed: u64,
) -> Result<(), InjectError> {
    let pid = s.pid();
    let tid = s.main_thread();
    let sp = crate::arch::native::sp(&s.regs(tid)?);
    let path_at = sp.wrapping_sub(1024) & !15;
    let path = format!("{}\0", crate::os::proc::fd_path(holder, i64::from(fd)));
    s.write(path_at, path.as_bytes())?;
    let rfd =
        check(what, pid, s.syscall(tid, libc::SYS_openat, [libc::AT_FDCWD as u64, path_at, flags as u64, 0, 0, 0])?)?;
    let r = s.syscall(tid, libc::SYS_mmap, [at, size, prot, libc::MAP_SHARED as u64 | fixed, rfd as u64, 0]);
    let _ = s.syscall(tid, libc::SYS_close, [rfd as u64, 0, 0, 0, 0, 0]);
    let got = check(what, pid, r?)? as u64;
    if got != at {
        let _ = s.syscall(tid, libc::SYS_munmap, [got, size, 0, 0, 0, 0]);
        return Err(InjectError::Remote { call: what, pid, err: std::io::Error::from_raw_os_error(libc::EEXIST) });
    }
    Ok(())
}

/// Map `size` bytes of executable memory within a patch jump's reach of
/// `near` (`patch::REACH`: ±1.5 GiB on x86_64, ±112 MiB on aarch64) and
/// put the trap bytes and the blob in it.
pub fn code(s: &mut Stopped, a: &Artifact, near: u64, size: u64) -> Result<CodeRegion, InjectError> {
    let size = (size + TRAP_BYTES as u64 + a.code.len() as u64).next_multiple_of(4096);
    let remote = map_near(s, near, size)?;
    let mut head = crate::arch::native::trap_fill(TRAP_BYTES);
    head.extend_from_slice(&a.code);
    s.write(remote, &head)?;
    let blob = remote + TRAP_BYTES as u64;
    Ok(CodeRegion { remote, size, blob, next: blob + a.code.len() as u64 })
}

/// A page for veneers (`patch::far_jump`) within a patch jump's reach of
/// `near`: for a function its module's code region is out of reach of (a
/// module larger than the reach). No blob, no traps: only jumps.
pub fn veneer_page(s: &mut Stopped, near: u64) -> Result<CodeRegion, InjectError> {
    let remote = map_near(s, near, 4096)?;
    Ok(CodeRegion { remote, size: 4096, blob: remote, next: remote })
}

/// Map `size` bytes (a multiple of the page size) of executable memory
/// within a patch jump's reach of `near`, never over another mapping.
fn map_near(s: &mut Stopped, near: u64, size: u64) -> Result<u64, InjectError> {
    let pid = s.pid();
    let tid = s.main_thread();
    let reach = crate::arch::native::patch::REACH;
    let step = (reach / 48) & !0xfff;
    let base = near & !0xfff;
    // Below the module first (programs sit low, the heap grows above them),
    // then above, never further than the reach.
    let candidates = (1..48u64).map(|i| base.wrapping_sub(i * step)).chain((1..48u64).map(|i| base + i * step));
    for addr in candidates {
        if addr < 0x10000 || addr > crate::arch::native::USER_TOP - size {
            continue;
        }
        let r = s.syscall(
            tid,
            libc::SYS_mmap,
            [
                addr,
                size,
                (libc::PROT_READ | libc::PROT_EXEC) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64 | MAP_FIXED_NOREPLACE,
                u64::MAX,
                0,
            ],
        )?;
        if (-4095..0).contains(&r) {
            continue;
        }
        let remote = r as u64;
        if remote != addr {
            // An old kernel ignored MAP_FIXED_NOREPLACE: accept it only if it
            // is still in reach.
            if remote.abs_diff(near) > reach - size {
                let _ = s.syscall(tid, libc::SYS_munmap, [remote, size, 0, 0, 0, 0]);
                continue;
            }
        }
        return Ok(remote);
    }
    Err(InjectError::NoCodeRange { pid, near })
}
