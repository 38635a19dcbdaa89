//! Module files: the ELF files a traced process maps, opened as the
//! process maps them, held memory-mapped, once per file for the session.
//!
//! The tracer runs as root and a target's `/proc/PID/maps` is the target's
//! to choose (invariant 6): the path it shows may name, in the tracer's
//! mount namespace, another file than the one mapped (a target in its own
//! user and mount namespace, a file deleted or renamed over since, a name
//! with a newline, which maps print `\012`), perhaps one only root may
//! read, whose symbol names would then reach memory the target reads. So
//! no module file is opened by that path:
//!
//! * a mapped file is opened through its mapping,
//!   `/proc/PID/map_files/START-END`, which yields exactly the file mapped
//!   there, renamed, deleted or in another mount namespace; where the
//!   kernel refuses that (it takes `CAP_SYS_ADMIN` or
//!   `CAP_CHECKPOINT_RESTORE`: a tracer that is not root), by its path
//!   inside the process's root (`/proc/PID/root`, `openat2` with
//!   `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`: no symbolic link leads out
//!   of it), never a deleted one;
//! * the executable through `/proc/PID/exe`.
//!
//! Each is opened `O_PATH` first (a device node or a FIFO is never really
//! opened: no driver's `open` runs, nothing blocks), checked with `fstat`
//! to be a regular file and, for a mapping, to be the file maps name by
//! device and inode (a mismatch: the mapping changed since maps were
//! read, and the file is skipped with a warning), then reopened for
//! reading through that descriptor (`/proc/self/fd/N`: the same file) with
//! `O_NONBLOCK`.
//!
//! An opened file is mapped read-only and private, not copied, and kept
//! by device and inode as `fstat` gives them ([`Image`]; maps' may name
//! two files: a btrfs file system prints one device for all its
//! subvolumes, whose inode numbers repeat, so a mapping is opened each
//! time it is asked for, and found by what it opens): one mapping per file per session
//! however many hard links, names or processes map it, and parsers take
//! slices of it (a section header claiming a gigabyte of a sparse file
//! costs no gigabyte). A session holds at most [`MAX_BYTES`] of module
//! files and [`MAX_FILES`] files; past that (after dropping files nobody
//! uses any more), a file is skipped with one warning naming it.
//!
//! A regular file can shrink under its mapping (the target may truncate a
//! file it owns, or an NFS server may), and a read of a page past the new
//! end is SIGBUS. The tracer must not die of it: a SIGBUS inside a module
//! file's mapping maps a page of zeros there and the read goes on (the
//! parsers read untrusted bytes anyway); any other SIGBUS goes to the
//! disposition that was there before. (A file on a FUSE file system the
//! target serves can still make a read wait as long as the server wants,
//! as any read of it would.)

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

use super::proc::Mapping;

/// The most bytes of module files a session holds mapped.
pub const MAX_BYTES: u64 = 4 << 30;
/// The most module files a session holds.
pub const MAX_FILES: usize = 4096;

/// A module file, mapped read-only and private; unmapped when the last
/// [`Image`] of it goes.
pub struct ModuleFile {
    ptr: NonZeroUsize,
    len: usize,
    /// The file's device and inode (`fstat`).
    pub dev: u64,
    pub ino: u64,
    /// Its slot in the SIGBUS handler's table.
    slot: usize,
}

/// A module file shared by everything that reads it.
pub type Image = Arc<ModuleFile>;

// SAFETY: the mapping is read-only and lives as long as the value.
unsafe impl Send for ModuleFile {}
unsafe impl Sync for ModuleFile {}

impl std::ops::Deref for ModuleFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes mapped at `ptr` until drop; a page
        // the file no longer has reads as zeros (`on_sigbus`).
        unsafe { std::slice::from_raw_parts(self.ptr.get() as *const u8, self.len) }
    }
}

impl AsRef<[u8]> for ModuleFile {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for ModuleFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModuleFile({}:{}, {} bytes)", self.dev, self.ino, self.len)
    }
}

/// One file is one file: by device and inode.
impl PartialEq for ModuleFile {
    fn eq(&self, other: &ModuleFile) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

impl Eq for ModuleFile {}

impl Drop for ModuleFile {
    fn drop(&mut self) {
        unregister(self.slot);
        // SAFETY: the mapping this value made, read by nobody now.
        let _ = unsafe { nix::sys::mman::munmap(std::ptr::NonNull::new_unchecked(self.ptr.get() as *mut _), self.len) };
    }
}

/// The file mapped at `m` (a mapping of process `m.pid`, as its maps
/// said), or None: gone, not a regular file, empty, not the file maps
/// name there (warned), or past the session's limits (warned).
pub fn mapped(m: &Mapping) -> Option<Image> {
    // Always opened, and found by `fstat`'s identity: maps' may name two
    // files (a btrfs file system prints one device for all its
    // subvolumes, whose inode numbers repeat).
    let (pid, key) = (m.pid, (m.dev, m.inode));
    let name = || format!("{} (process {pid})", m.path.display());
    let path = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
    let fd = match nix::fcntl::open(path.as_str(), OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::EPERM | nix::errno::Errno::EACCES) if !m.deleted => in_root(pid, &m.path).ok()?,
        Err(_) => return None,
    };
    let st = nix::sys::stat::fstat(&fd).ok()?;
    if !regular(&st) {
        return None;
    }
    if st.st_ino != m.inode || (st.st_dev != m.dev && superblock(&fd, pid) != Some(m.dev)) {
        warn(key, &format!("{} is not the file mapped there any more: skipped", name()));
        return None;
    }
    open_image(fd, &st, &name)
}

/// The executable of process `pid` (`/proc/PID/exe`), or None (see
/// [`mapped`]).
pub fn executable(pid: i32) -> Option<Image> {
    let fd =
        nix::fcntl::open(format!("/proc/{pid}/exe").as_str(), OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
    let st = nix::sys::stat::fstat(&fd).ok()?;
    if !regular(&st) {
        return None;
    }
    let name = || format!("{} (process {pid})", super::proc::executable(pid as u32).unwrap_or_default().display());
    open_image(fd, &st, &name)
}

/// Don't print the warnings (`-w`): files are skipped as quietly.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

static QUIET: AtomicBool = AtomicBool::new(false);

fn regular(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG
}

/// `path` inside process `pid`'s root, never out of it (`O_PATH`).
fn in_root(pid: i32, path: &Path) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OpenHow, ResolveFlag};
    let root = nix::fcntl::open(
        format!("/proc/{pid}/root").as_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(&root, path, how)
}

/// The device of the superblock of the mount `fd` is on (what maps print
/// where `st_dev` differs: a btrfs subvolume's files, whose `st_dev` is
/// the subvolume's), from its mount id (`/proc/self/fdinfo/FD`) and the
/// mount tables of the tracer and of process `pid`.
fn superblock(fd: &OwnedFd, pid: i32) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    let mnt = info.lines().find_map(|l| l.strip_prefix("mnt_id:"))?.trim().to_string();
    for table in ["/proc/self/mountinfo".to_string(), format!("/proc/{pid}/mountinfo")] {
        let Ok(text) = std::fs::read(&table) else { continue };
        if let Some(dev) = text.split(|&b| b == b'\n').find_map(|l| mount_dev(l, &mnt)) {
            return Some(dev);
        }
    }
    None
}

/// The device (`major:minor`, third field) of mountinfo line `line` if it
/// is mount `id`'s.
fn mount_dev(line: &[u8], id: &str) -> Option<u64> {
    let mut f = line.split(|&b| b == b' ').map(|w| std::str::from_utf8(w).unwrap_or(""));
    if f.next()? != id {
        return None;
    }
    let (major, minor) = f.nth(1)?.split_once(':')?;
    Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?))
}

/// Map the file `fd` (`O_PATH`, checked: regular, `st`) opens, or the
/// session's mapping of it.
fn open_image(fd: OwnedFd, st: &FileStat, name: &dyn Fn() -> String) -> Option<Image> {
    let own = (st.st_dev, st.st_ino);
    let mut c = cache().lock().ok()?;
    if let Some(image) = c.files.get(&own) {
        return Some(image.clone());
    }
    if c.skipped.contains(&own) {
        return None;
    }
    let size = st.st_size.max(0) as u64;
    if size == 0 {
        return None;
    }
    if size > MAX_BYTES {
        c.skip(own, &format!("{}: {size} bytes is larger than any module file this tracer reads: skipped", name()));
        return None;
    }
    if !c.room(size) {
        let why = format!(
            "{}: the session holds {} module files of {} MiB already (at most {MAX_FILES} files, {} MiB): skipped",
            name(),
            c.files.len(),
            c.bytes >> 20,
            MAX_BYTES >> 20
        );
        c.skip(own, &why);
        return None;
    }
    // Reopened for reading through the checked descriptor: the same file.
    let file = nix::fcntl::open(
        format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let now = nix::sys::stat::fstat(&file).ok()?;
    let size = now.st_size.clamp(0, size as i64) as u64;
    if (now.st_dev, now.st_ino) != own || !regular(&now) || size == 0 {
        return None;
    }
    let image = Arc::new(map(&file, size as usize, st)?);
    c.bytes += size;
    c.files.insert(own, image.clone());
    Some(image)
}

/// `len` bytes of `file`, mapped read-only and private.
fn map(file: &impl AsFd, len: usize, st: &FileStat) -> Option<ModuleFile> {
    use nix::sys::mman::{MapFlags, ProtFlags};
    install_sigbus();
    let slot = register_slot()?;
    // SAFETY: a fresh read-only private mapping of a file, owned by the
    // value made here.
    let p = unsafe {
        nix::sys::mman::mmap(None, NonZeroUsize::new(len)?, ProtFlags::PROT_READ, MapFlags::MAP_PRIVATE, file, 0)
    };
    let Ok(p) = p else {
        unregister(slot);
        return None;
    };
    let ptr = NonZeroUsize::new(p.as_ptr() as usize)?;
    set_slot(slot, ptr.get(), len);
    Some(ModuleFile { ptr, len, dev: st.st_dev, ino: st.st_ino, slot })
}

/// The session's module files.
#[derive(Default)]
struct Cache {
    /// By device and inode (`fstat`'s).
    files: HashMap<(u64, u64), Image>,
    /// Bytes mapped.
    bytes: u64,
    /// Files skipped and warned of (bounded).
    skipped: HashSet<(u64, u64)>,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

impl Cache {
    /// Whether `size` more bytes fit, after letting go of the files
    /// nobody else holds any more.
    fn room(&mut self, size: u64) -> bool {
        let fits = |c: &Cache| c.bytes + size <= MAX_BYTES && c.files.len() < MAX_FILES;
        if fits(self) {
            return true;
        }
        let mut freed = 0;
        self.files.retain(|_, f| {
            let unused = Arc::strong_count(f) == 1;
            if unused {
                freed += f.len as u64;
            }
            !unused
        });
        self.bytes -= freed;
        fits(self)
    }

    fn skip(&mut self, key: (u64, u64), why: &str) {
        warn_in(&mut self.skipped, key, why);
    }
}

fn warn(key: (u64, u64), why: &str) {
    if let Ok(mut c) = cache().lock() {
        c.skip(key, why);
    }
}

/// One warning per file, for the first 4096 files.
fn warn_in(skipped: &mut HashSet<(u64, u64)>, key: (u64, u64), why: &str) {
    if skipped.len() < 4096 && skipped.insert(key) && !QUIET.load(Ordering::Relaxed) {
        eprintln!("WARNING: module file {why}");
    }
}

// The SIGBUS handler's table of mappings: (start, length) by slot, a
// slot's start 0 when free. Written under the cache's lock (slots taken
// and given back) and read by the handler, lock-free.
const SLOTS: usize = MAX_FILES + 64;
static STARTS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static LENS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static TAKEN: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];

fn register_slot() -> Option<usize> {
    (0..SLOTS).find(|&i| TAKEN[i].compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())
}

fn set_slot(slot: usize, start: usize, len: usize) {
    LENS[slot].store(len, Ordering::Relaxed);
    // Release: the handler that sees the start sees the length.
    STARTS[slot].store(start, Ordering::Release);
}

fn unregister(slot: usize) {
    STARTS[slot].store(0, Ordering::Release);
    TAKEN[slot].store(false, Ordering::Release);
}

static PREVIOUS: OnceLock<nix::sys::signal::SigAction> = OnceLock::new();

/// Install the SIGBUS handler once (the previous disposition kept for
/// faults that are not in a module file).
fn install_sigbus() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let action = SigAction::new(
            SigHandler::SigAction(on_sigbus),
            SaFlags::SA_SIGINFO | SaFlags::SA_ONSTACK,
            SigSet::empty(),
        );
        // SAFETY: the handler makes only async-signal-safe calls (mmap,
        // sigaction) and atomic loads.
        if let Ok(old) = unsafe { sigaction(Signal::SIGBUS, &action) } {
            let _ = PREVIOUS.set(old);
        }
    });
}

/// A fault in a module file's mapping (a page the file lost to a
/// truncation): zeros mapped over that page, and the read goes on.
/// Anywhere else: the previous disposition back, and the fault again
/// reaches it.
extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for this SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: sysconf is async-signal-safe.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    for i in 0..SLOTS {
        let start = STARTS[i].load(Ordering::Acquire);
        if start != 0 && addr >= start && addr - start < LENS[i].load(Ordering::Relaxed) {
            // SAFETY: a page of our own read-only module mapping, replaced
            // by zeros (raw libc: nix's mmap is not documented
            // async-signal-safe; the system call is).
            let p = unsafe {
                libc::mmap(
                    (addr & !(page - 1)) as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return;
            }
        }
    }
    if let Some(old) = PREVIOUS.get() {
        // SAFETY: the disposition that was there before ours.
        let _ = unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGBUS, old) };
    } else {
        // SAFETY: the default action.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// This process's mapping of `path` (mapped here, whole, private).
    fn map_here(path: &Path) -> (Mapping, usize, usize) {
        let f = std::fs::File::open(path).unwrap();
        let len = (f.metadata().unwrap().len() as usize).max(8192);
        // SAFETY: a fresh private mapping, unmapped by the caller.
        let p = unsafe {
            nix::sys::mman::mmap(
                None,
                NonZeroUsize::new(len).unwrap(),
                nix::sys::mman::ProtFlags::PROT_READ,
                nix::sys::mman::MapFlags::MAP_PRIVATE,
                &f,
                0,
            )
        }
        .unwrap();
        let at = p.as_ptr() as usize;
        (mapping_at(at), at, len)
    }

    /// This process's mapping at `at`, as its maps say now.
    fn mapping_at(at: usize) -> Mapping {
        let me = std::process::id() as i32;
        super::super::proc::maps(me).unwrap().into_iter().find(|m| m.start == at as u64).expect("the mapping")
    }

    fn unmap(at: usize, len: usize) {
        // SAFETY: the mapping `map_here` made.
        unsafe { nix::sys::mman::munmap(std::ptr::NonNull::new(at as *mut _).unwrap(), len) }.unwrap();
    }

    /// A scratch directory, removed when dropped (a failed test's too).
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("telco-modfile-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    /// A mapped file is read through its mapping: deleted, with another
    /// file at its path, it is still the file mapped; the same file by
    /// another mapping is the same image; one truncated under the image
    /// reads as zeros past its new end, and the tracer lives.
    #[test]
    fn files_are_read_as_mapped_and_survive_truncation() {
        let d = scratch("mapped");
        let path = d.0.join("lib.so");
        let page = 4096;
        let mut bytes = vec![7u8; 4 * page];
        bytes[..4].copy_from_slice(b"\x7fELF");
        std::fs::write(&path, &bytes).unwrap();
        let (_, at, len) = map_here(&path);
        let (_, at2, len2) = map_here(&path);
        let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"another file").unwrap();
        let (m, m2) = (mapping_at(at), mapping_at(at2));
        assert!(m.deleted && m.path == path, "{m:?}");
        let image = mapped(&m).expect("the mapped file");
        assert_eq!(&image[..], &bytes[..]);
        let again = mapped(&m2).expect("the mapped file");
        assert!(Arc::ptr_eq(&image, &again), "one image per file");
        writer.set_len(page as u64).unwrap();
        assert_eq!(image[page - 1], 7);
        assert!(image[page..].iter().all(|&b| b == 0), "pages past the end read as zeros");
        unmap(at, len);
        unmap(at2, len2);
    }

    /// A mapping whose maps line names another inode than the file there
    /// is skipped; a device node is never opened.
    #[test]
    fn other_files_are_skipped() {
        let d = scratch("other");
        let path = d.0.join("f");
        std::fs::write(&path, vec![1u8; 8192]).unwrap();
        let (mut m, at, len) = map_here(&path);
        m.inode += 1;
        set_quiet(true);
        assert!(mapped(&m).is_none());
        unmap(at, len);
        let (m, at, len) = map_here(Path::new("/dev/zero"));
        assert!(mapped(&m).is_none());
        unmap(at, len);
    }

    #[test]
    fn mountinfo_lines() {
        let l = b"36 35 0:26 /@home /home rw,relatime shared:1 - btrfs /dev/sda2 rw";
        assert_eq!(mount_dev(l, "36"), Some(libc::makedev(0, 26)));
        assert_eq!(mount_dev(l, "35"), None);
        assert_eq!(mount_dev(b"garbage", "36"), None);
    }

    /// The executable is this test binary.
    #[test]
    fn the_executable() {
        let me = executable(std::process::id() as i32).expect("own executable");
        assert!(me.starts_with(b"\x7fELF"));
    }
}
