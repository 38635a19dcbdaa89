//! Read-only facts about running processes from `/proc`.

use std::path::{Path, PathBuf};

/// The executable's path of process `pid` (`/proc/PID/exe`), for display
/// as [`Mapping::path`] is (` (deleted)` taken off): what opens the file
/// is [`super::modfile::executable`].
pub fn executable(pid: u32) -> Result<PathBuf, String> {
    use std::os::unix::ffi::OsStrExt;
    let link = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("no process with pid {pid}"),
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot read /proc/{pid}/exe: permission denied (run as the process owner or as root)")
        }
        _ => format!("cannot read /proc/{pid}/exe: {e}"),
    })?;
    let bytes = link.as_os_str().as_bytes();
    Ok(match bytes.strip_suffix(b" (deleted)") {
        Some(p) => PathBuf::from(std::ffi::OsStr::from_bytes(p)),
        None => link,
    })
}

/// The fields `names` (`"PPid:"`) of `/proc/PID/status`, in order.
fn status_fields<const N: usize>(pid: i64, names: [&str; N]) -> Option<[String; N]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string());
    let mut out: [String; N] = std::array::from_fn(|_| String::new());
    for (o, n) in out.iter_mut().zip(names) {
        *o = field(n)?;
    }
    Some(out)
}

/// The real user id and the parent of process `pid` (`/proc/PID/status`).
pub fn uid_and_parent(pid: u32) -> Option<(u32, u64)> {
    let [uid, ppid] = status_fields(i64::from(pid), ["Uid:", "PPid:"])?;
    Some((uid.split_whitespace().next()?.parse().ok()?, ppid.parse().ok()?))
}

/// The files mapped into process `pid`, each once (by device, inode and
/// name: hard links are names of their own), in the order of their first
/// mapping (`/proc/PID/maps`), deleted ones included: one mapping of each,
/// which opens it ([`super::modfile`]). Anonymous and special mappings
/// (`[heap]`, `[vdso]`) are left out.
pub fn mapped_files(pid: u32) -> Result<Vec<Mapping>, String> {
    let maps = maps(pid as i32).map_err(|e| format!("cannot read /proc/{pid}/maps: {e}"))?;
    Ok(files_of(maps))
}

/// One mapping of each file of `maps` (by device, inode and name), in
/// order.
pub fn files_of(maps: Vec<Mapping>) -> Vec<Mapping> {
    let mut seen = std::collections::HashSet::new();
    maps.into_iter().filter(|m| m.is_file() && seen.insert((m.dev, m.inode, m.path.clone()))).collect()
}

/// A mapping (`/proc/PID/maps`): its range, file offset, the file's
/// device and inode, and its path (empty for anonymous memory, `[stack]`
/// and the like for special ones).
///
/// The path is what the process shows, for display only: it names the
/// file in the process's mount namespace as it was called when mapped
/// (renamed since, it follows; deleted, the kernel says so), and the
/// process chooses it. What identifies the file is (`dev`, `inode`), and
/// what opens it is the mapping itself (`/proc/PID/map_files/START-END`:
/// [`super::modfile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The process whose mapping it is (0 when parsed from a line alone).
    pub pid: i32,
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    /// The file's device (maps' `major:minor`, encoded as `st_dev` is).
    pub dev: u64,
    pub inode: u64,
    /// The file's name as the kernel prints it: a newline (which maps
    /// escape as `\012`) given back, ` (deleted)` taken off.
    pub path: PathBuf,
    /// The file was deleted (or another renamed over it) since it was
    /// mapped: its path names another file, or none.
    pub deleted: bool,
    /// The permissions say `w`.
    pub writable: bool,
    /// The permissions say `x`.
    pub executable: bool,
}

impl Mapping {
    /// A mapping of a file (not anonymous memory, a special mapping or a
    /// memory file such as the tracer's region).
    pub fn is_file(&self) -> bool {
        let p = self.path.as_os_str().as_encoded_bytes();
        self.inode != 0 && p.starts_with(b"/") && !p.starts_with(b"/memfd:")
    }
}

/// One line of `/proc/PID/maps`: `start-end perms offset dev inode path`
/// (the path may contain spaces; a newline in it is printed `\012`, and a
/// deleted file's gets ` (deleted)`).
pub fn parse_mapping(line: &[u8]) -> Option<Mapping> {
    use std::os::unix::ffi::OsStrExt;
    let mut fields = [&b""[..]; 5];
    let mut rest = line;
    for f in &mut fields {
        rest = rest.trim_ascii_start();
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let [range, perms, off, dev, inode] = fields.map(|f| std::str::from_utf8(f).unwrap_or(""));
    let (a, b) = range.split_once('-')?;
    let (start, end) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
    let offset = u64::from_str_radix(off, 16).ok()?;
    let (major, minor) = dev.split_once(':')?;
    let dev = libc::makedev(u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?);
    let inode = inode.parse().ok()?;
    let writable = perms.as_bytes().get(1) == Some(&b'w');
    let executable = perms.as_bytes().get(2) == Some(&b'x');
    let mut name = rest.trim_ascii();
    let deleted = inode != 0 && name.ends_with(b" (deleted)");
    if deleted {
        name = &name[..name.len() - b" (deleted)".len()];
    }
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape_newlines(name)));
    Some(Mapping { pid: 0, start, end, offset, dev, inode, path, deleted, writable, executable })
}

/// A maps path with its `\012`s made newlines again (the one character
/// the kernel escapes there; a name holding the four characters `\012`
/// reads the same: paths are for display).
fn unescape_newlines(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i..].starts_with(b"\\012") {
            out.push(b'\n');
            i += 4;
        } else {
            out.push(name[i]);
            i += 1;
        }
    }
    out
}

/// Every mapping of process `pid` (read as bytes: a file name need not
/// be UTF-8).
pub fn maps(pid: i32) -> std::io::Result<Vec<Mapping>> {
    let text = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(text.split(|&b| b == b'\n').filter_map(parse_mapping).map(|m| Mapping { pid, ..m }).collect())
}

/// Whether process `pid` maps a file whose path starts with `prefix`
/// (and, when `inode` is not 0, with that inode).
pub fn maps_file(pid: i32, prefix: &str, inode: u64) -> bool {
    maps(pid).is_ok_and(|ms| {
        ms.iter().any(|m| (inode == 0 || m.inode == inode) && m.path.to_string_lossy().starts_with(prefix))
    })
}

/// Where process `pid` keeps its command line: `arg_start` and `arg_end`
/// (fields 48 and 49 of /proc/PID/stat).
pub fn arg_area(pid: i32) -> Option<(u64, u64)> {
    let (a, e) = (stat_field(pid, 45)?, stat_field(pid, 46)?);
    (a != 0 && e > a).then_some((a, e))
}

/// [`maps_file`] for any of `inodes`.
pub fn maps_any(pid: i32, prefix: &str, inodes: &[u64]) -> bool {
    maps(pid)
        .is_ok_and(|ms| ms.iter().any(|m| inodes.contains(&m.inode) && m.path.to_string_lossy().starts_with(prefix)))
}

/// The name of user `uid` in /etc/passwd, if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// The executable's path (`/proc/PID/exe`), empty when it cannot be read.
pub fn exe_path(pid: i32) -> PathBuf {
    executable(pid as u32).unwrap_or_default()
}

/// The first `n` bytes of the process's executable.
pub fn exe_head(pid: i32, n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(n);
    std::fs::File::open(format!("/proc/{pid}/exe"))?.take(n as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The process's command name (`/proc/PID/comm`, without the newline),
/// empty when it cannot be read.
pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim_end_matches('\n').to_string()
}

/// A thread's command name, by its process or (a thread of another
/// process since) on its own.
pub fn thread_comm(pid: i32, tid: i32) -> Option<Vec<u8>> {
    let comm = std::fs::read(format!("/proc/{pid}/task/{tid}/comm"))
        .or_else(|_| std::fs::read(format!("/proc/{tid}/comm")))
        .ok()?;
    Some(comm.strip_suffix(b"\n").unwrap_or(&comm).to_vec())
}

/// What trace files call a thread: its `comm`; for a thread already gone,
/// the process's name (`process`) if it was the main thread, else
/// `thread TID`.
pub fn thread_label(pid: u32, tid: u32, process: &[u8]) -> Vec<u8> {
    thread_comm(pid as i32, tid as i32).unwrap_or_else(|| {
        if tid == pid {
            process.to_vec()
        } else {
            format!("thread {tid}").into_bytes()
        }
    })
}

/// Whether a process `pid` exists (a zombie too).
pub fn exists(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Field `n` of `/proc/PID/stat` counted from the state (0) that follows
/// the name, which may hold spaces and parentheses.
fn stat_field(pid: i32, n: usize) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    rest.split_whitespace().nth(n)?.parse().ok()
}

/// Whether process `pid` is a kernel thread (`PF_KTHREAD` in the flags
/// of `/proc/PID/stat`): it has no user space.
pub fn kernel_thread(pid: i32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    // After the state: ppid, pgrp, session, tty_nr, tpgid, flags.
    stat_field(pid, 6).is_some_and(|f| f & PF_KTHREAD != 0)
}

/// Thread `tid`'s state letter (`R`, `S`, `D`, `Z`, ...) from
/// `/proc/PID/task/TID/stat`; `None` when it is gone.
pub fn thread_state(pid: i32, tid: i32) -> Option<u8> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().bytes().next()
}

/// Whether process `pid` exists and is not a zombie (`/proc/PID/stat`).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// `/proc/PID/stat`): with its pid, which process it is (pids are reused).
pub fn start_time(pid: i32) -> Option<u64> {
    stat_field(pid, 19)
}

/// Whether process `pid` maps executable a file `wanted` accepts (by
/// identity).
pub fn maps_executable(pid: i32, wanted: impl Fn(FileId) -> bool) -> bool {
    maps(pid).is_ok_and(|ms| ms.iter().any(|m| m.executable && wanted((m.dev, m.inode))))
}

/// Whether process `pid` is gone, a zombie, or on its way out (its main
/// thread's `PF_EXITING` flag, field 9 of `/proc/PID/stat`): its memory
/// goes with it.
pub fn ending(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    let Some((_, rest)) = s.rsplit_once(')') else { return true };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields.first().is_some_and(|st| *st == "Z" || *st == "X")
        || fields.get(6).and_then(|f| f.parse::<u64>().ok()).is_some_and(|f| f & PF_EXITING != 0)
}

/// The process a thread belongs to (`Tgid:` of `/proc/TID/status`).
pub fn tgid(tid: i32) -> Option<i32> {
    let [tgid] = status_fields(i64::from(tid), ["Tgid:"])?;
    tgid.parse().ok()
}

/// Whether thread `tid` runs with a hardware shadow stack (x86's CET
/// `shstk`: `x86_Thread_features` in `/proc/PID/status`, Linux 6.6 on).
pub fn shadow_stack(tid: i32) -> bool {
    status_fields(i64::from(tid), ["x86_Thread_features:"])
        .is_some_and(|[f]| f.split_whitespace().any(|w| w == "shstk"))
}

/// Whether process `pid` sees the pids we see (one pid namespace).
pub fn same_pid_namespace(pid: i32) -> bool {
    let ns = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok();
    ns("/proc/self/ns/pid").is_some_and(|me| ns(&format!("/proc/{pid}/ns/pid")) == Some(me))
}

/// The inode of the file behind our own descriptor `fd`, 0 when unknown.
pub fn fd_inode(fd: i32) -> u64 {
    std::fs::metadata(format!("/proc/self/fd/{fd}")).map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m))
}

/// The path that opens descriptor `fd` of process `pid`.
pub fn fd_path(pid: i32, fd: i64) -> String {
    format!("/proc/{pid}/fd/{fd}")
}

/// Process `pid`'s memory as a file (`/proc/PID/mem`), which also writes
/// read-only pages.
pub fn mem(pid: i32, write: bool) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).write(write).open(format!("/proc/{pid}/mem"))
}

/// The threads of process `pid` (`/proc/PID/task`).
pub fn tasks(pid: i32) -> std::io::Result<std::collections::BTreeSet<i32>> {
    let mut out = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(t) = e?.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.insert(t);
        }
    }
    Ok(out)
}

/// Thread `tid`'s CPU time so far in ns (`/proc/PID/task/TID/schedstat`,
/// its first field).
pub fn thread_cpu_ns(pid: i32, tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Whether thread `tid` of process `pid` still exists.
pub fn thread_exists(pid: i32, tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// This host's name (`/proc/sys/kernel/hostname`: the UTS namespace's),
/// or "" when it cannot be read.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string()
}

/// This process's own CPU time in user and system mode (ms) and its
/// peak resident size (KiB, `VmHWM`: of its own memory only, where
/// getrusage's `ru_maxrss` counts the memory of the process it was forked
/// from too).
pub fn own_usage() -> (u64, u64, u64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let (usr, sys) = if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0 {
        // SAFETY: initialized by the successful call (and zeroed before).
        let ru = unsafe { ru.assume_init() };
        let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
        (ms(ru.ru_utime), ms(ru.ru_stime))
    } else {
        (0, 0)
    };
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmHWM:")?.trim().strip_suffix("kB")?.trim().parse().ok()))
        .unwrap_or(0);
    (usr, sys, hwm)
}

/// The children of process `pid` (every thread's `children` file).
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for tid in tasks(pid).unwrap_or_default() {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) else { continue };
        out.extend(text.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
    }
    out
}

/// Every process id visible here (`/proc`), in no order.
pub fn all_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// The process tracing `pid` (`TracerPid:`), None when none.
pub fn tracer_of(pid: i32) -> Option<i32> {
    let [tracer] = status_fields(i64::from(pid), ["TracerPid:"])?;
    tracer.parse().ok().filter(|&t| t != 0)
}

/// The auxiliary vector of process `pid` (`/proc/PID/auxv`, 64-bit):
/// (type, value) pairs.
pub fn auxv(pid: i32) -> std::io::Result<Vec<(u64, u64)>> {
    Ok(parse_auxv(&std::fs::read(format!("/proc/{pid}/auxv"))?))
}

/// The pairs of an auxiliary vector's bytes, up to `AT_NULL`.
pub fn parse_auxv(bytes: &[u8]) -> Vec<(u64, u64)> {
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    bytes.chunks_exact(16).map(|c| (word(&c[..8]), word(&c[8..]))).take_while(|&(t, _)| t != 0).collect()
}

/// The value of entry `kind` (`AT_ENTRY`, …) of an auxiliary vector.
pub fn aux_value(auxv: &[(u64, u64)], kind: u64) -> Option<u64> {
    auxv.iter().find(|&&(t, _)| t == kind).map(|&(_, v)| v)
}

/// A file's identity: (device, inode), as `stat` and `/proc/PID/maps`
/// give them.
pub type FileId = (u64, u64);

/// The identity of the file at `path` (symbolic links followed).
pub fn file_id(path: &Path) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// The identity of process `pid`'s executable, whatever its mount
/// namespace calls it (`/proc/PID/exe` opens the file itself).
pub fn exe_id(pid: i32) -> Option<FileId> {
    file_id(Path::new(&format!("/proc/{pid}/exe"))).ok()
}

pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (file_id(a), file_id(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Modules are the tracer's files, matched by identity only (probes by
/// path, system-wide: pass 2 read them here). Otherwise (`-p`, `-c`) a
/// module is named as the target shows it (pass 2 read it through the
/// target's mapping), and the same path matches too: a library deleted or
/// renamed over since, a target in a mount namespace of its own.
static BY_IDENTITY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Match modules by identity only, from now on (a session by path).
pub fn match_by_identity() {
    BY_IDENTITY.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a file of identity `id` whose process shows it as `shown` is
/// the file `module` names (see [`BY_IDENTITY`]).
pub(crate) fn is_module(id: Option<(u64, u64)>, shown: &Path, module: &Path) -> bool {
    let by_identity = BY_IDENTITY.load(std::sync::atomic::Ordering::Relaxed);
    match (id, file_id(module)) {
        // An overlay's file: its mapping shows the layer's device.
        (Some((dev, ino)), Ok((mdev, mino))) if ino == mino && (dev == mdev || shown == module) => true,
        (Some(_), Ok(_)) if by_identity => false,
        _ => shown == module || (!by_identity && same_file(shown, module)),
    }
}

/// Whether mapping `m` is of the file `module` names: by identity (device
/// and inode, whatever path the process's mount namespace shows: a
/// container's `/usr/sbin/nginx` may be another file, or ours under
/// another name), or as [`is_module`] says.
pub(crate) fn maps_module(m: &Mapping, module: &Path) -> bool {
    is_module(Some((m.dev, m.inode)), &m.path, module)
}

/// The run-time address of a byte at `file_offset` of `module`.
pub(crate) fn runtime_addr(maps: &[Mapping], module: &Path, file_offset: u64) -> Option<u64> {
    maps.iter()
        .filter(|m| maps_module(m, module))
        .find(|m| file_offset >= m.offset && file_offset < m.offset + (m.end - m.start))
        .map(|m| m.start + (file_offset - m.offset))
}

/// The address range `module`'s mappings cover.
pub fn mapped_range(maps: &[Mapping], module: &Path) -> Option<(u64, u64)> {
    let ms = maps.iter().filter(|m| maps_module(m, module));
    let (lo, hi) = ms.fold((u64::MAX, 0), |(lo, hi), m| (lo.min(m.start), hi.max(m.end)));
    (lo < hi).then_some((lo, hi))
}

#[cfg(test)]
mod tests {

    /// A file's identity is what `/proc/self/exe` gives for our own.
    #[test]
    fn identities() {
        let me = exe_id(std::process::id() as i32).expect("our exe");
        assert_eq!(file_id(&std::env::current_exe().unwrap()).unwrap(), me);
        assert!(exe_id(i32::MAX).is_none());
    }

    /// A process's start time is its own, and stays.
    #[test]
    fn start_times() {
        let me = std::process::id() as i32;
        let t = start_time(me).expect("ours");
        assert!(t > 0 && start_time(me) == Some(t));
        assert_eq!(start_time(i32::MAX), None);
    }

    /// This process runs; a pid that does not exist has ended.
    #[test]
    fn ending_processes() {
        assert!(!ending(std::process::id() as i32));
        assert!(ending(i32::MAX));
    }

    use super::*;

    #[test]
    fn maps_lines() {
        let maps = b"\
55d0c8a00000-55d0c8a02000 r--p 00000000 08:01 1234   /usr/bin/cat
55d0c8a02000-55d0c8a06000 r-xp 00002000 08:01 1234   /usr/bin/cat
7f1c2e200000-7f1c2e228000 r--p 00000000 08:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2e300000-7f1c2e328000 r--p 00000000 08:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6.hardlink
7f1c2e400000-7f1c2e401000 rw-p 00000000 00:00 0
7f1c2e500000-7f1c2e501000 r--p 00000000 08:01 77     /tmp/my lib.so
7f1c2e600000-7f1c2e601000 r--p 00000000 08:01 78     /tmp/gone.so (deleted)
7f1c2e700000-7f1c2e701000 r--p 00000000 103:02 79     /tmp/new\\012line.so
7f1c2e800000-7f1c2e801000 rw-s 00000000 00:01 80     /memfd:telco-stap (deleted)
7ffd1e3fe000-7ffd1e400000 r-xp 00000000 00:00 0      [vdso]
";
        let all: Vec<Mapping> = maps.split(|&b| b == b'\n').filter_map(parse_mapping).collect();
        let files = files_of(all.clone());
        let paths: Vec<&str> = files.iter().map(|m| m.path.to_str().unwrap()).collect();
        // One of each file by each of its names (a hard link is a name of
        // its own), deleted ones too, named as the kernel printed them.
        assert_eq!(
            paths,
            [
                "/usr/bin/cat",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/usr/lib/x86_64-linux-gnu/libc.so.6.hardlink",
                "/tmp/my lib.so",
                "/tmp/gone.so",
                "/tmp/new\nline.so"
            ]
        );
        assert_eq!(files.iter().map(|m| m.deleted).collect::<Vec<_>>(), [false, false, false, false, true, false]);
        assert_eq!(files[0].dev, libc::makedev(8, 1));
        assert_eq!((files[5].dev, files[5].inode), (libc::makedev(0x103, 2), 79));
        // Memory files keep their deleted flag and name, and are no files.
        assert!(all[8].deleted && all[8].path.to_str() == Some("/memfd:telco-stap") && !all[8].is_file());
        assert!(!all[9].is_file() && !all[4].is_file());
        // A name that is not UTF-8 still parses.
        let m = parse_mapping(b"7f1c2e500000-7f1c2e501000 r--p 00000000 08:01 77 /tmp/\xff.so").unwrap();
        assert_eq!(m.path.as_os_str().as_encoded_bytes(), b"/tmp/\xff.so");
    }

    #[test]
    fn mapping_lines_and_auxv() {
        let m = parse_mapping(b"7f1c2e500000-7f1c2e501000 r--p 00001000 08:01 77     /tmp/my  lib.so").unwrap();
        assert_eq!((m.start, m.end, m.offset), (0x7f1c2e500000, 0x7f1c2e501000, 0x1000));
        assert_eq!(m.path, PathBuf::from("/tmp/my  lib.so"));
        assert_eq!(parse_mapping(b"7ffd1e3fe000-7ffd1e400000 rw-p 00000000 00:00 0").unwrap().path, PathBuf::new());
        assert!(parse_mapping(b"garbage").is_none());
        let mut bytes = Vec::new();
        for w in [9u64, 0x401000, 3, 0x400040, 0, 0, 9, 1] {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        let v = parse_auxv(&bytes);
        assert_eq!(v, [(9, 0x401000), (3, 0x400040)]);
        assert_eq!(aux_value(&v, 3), Some(0x400040));
        let me = std::process::id() as i32;
        assert!(aux_value(&auxv(me).unwrap(), libc::AT_ENTRY).is_some());
        assert!(!maps(me).unwrap().is_empty());
    }

    #[test]
    fn own_process() {
        let me = std::process::id();
        let exe = executable(me).expect("own exe");
        assert!(exe.is_file());
        assert!(mapped_files(me).expect("own maps").iter().any(|m| m.path == exe));
        assert!(executable(u32::MAX - 1).unwrap_err().contains("no process"));
    }
}
