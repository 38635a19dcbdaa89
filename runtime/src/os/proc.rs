//! Read-only facts about running processes from `/proc`.

use std::path::PathBuf;

/// The executable of process `pid` (`/proc/PID/exe`).
pub fn executable(pid: u32) -> Result<PathBuf, String> {
    std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("no process with pid {pid}"),
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot read /proc/{pid}/exe: permission denied (run as the process owner or as root)")
        }
        _ => format!("cannot read /proc/{pid}/exe: {e}"),
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

/// The files mapped into process `pid`, each once, in the order of their
/// first mapping (`/proc/PID/maps`). Anonymous and special mappings
/// (`[heap]`, `[vdso]`) and deleted files are left out.
pub fn mapped_files(pid: u32) -> Result<Vec<PathBuf>, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("cannot read /proc/{pid}/maps: {e}"))?;
    Ok(parse_maps(&maps))
}

/// The file paths of a `/proc/PID/maps` text.
pub fn parse_maps(maps: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in maps.lines().filter_map(parse_mapping) {
        let path = m.path.to_string_lossy();
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            continue;
        }
        if !out.contains(&m.path) {
            out.push(m.path);
        }
    }
    out
}

/// A mapping (`/proc/PID/maps`): its range, file offset and path (empty
/// for anonymous memory, `[stack]` and the like for special ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub inode: u64,
    pub path: PathBuf,
    /// The permissions say `w`.
    pub writable: bool,
    /// The permissions say `x`.
    pub executable: bool,
}

/// One line of `/proc/PID/maps`: `start-end perms offset dev inode path`
/// (the path may contain spaces).
pub fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut fields = [""; 5];
    let mut rest = line;
    for f in &mut fields {
        rest = rest.trim_start();
        let end = rest.find(' ').unwrap_or(rest.len());
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let [range, perms, off, _dev, inode] = fields;
    let (a, b) = range.split_once('-')?;
    let (start, end) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
    let offset = u64::from_str_radix(off, 16).ok()?;
    let inode = inode.parse().ok()?;
    let writable = perms.as_bytes().get(1) == Some(&b'w');
    let executable = perms.as_bytes().get(2) == Some(&b'x');
    Some(Mapping { start, end, offset, inode, path: PathBuf::from(rest.trim()), writable, executable })
}

/// Every mapping of process `pid`.
pub fn maps(pid: i32) -> std::io::Result<Vec<Mapping>> {
    Ok(std::fs::read_to_string(format!("/proc/{pid}/maps"))?.lines().filter_map(parse_mapping).collect())
}

/// Whether process `pid` maps a file whose path starts with `prefix`
/// (and, when `inode` is not 0, with that inode).
pub fn maps_file(pid: i32, prefix: &str, inode: u64) -> bool {
    maps(pid).is_ok_and(|ms| {
        ms.iter().any(|m| (inode == 0 || m.inode == inode) && m.path.to_string_lossy().starts_with(prefix))
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

/// Whether process `pid` exists and is not a zombie (`/proc/PID/stat`).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
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

/// The children of process `pid` (every thread's `children` file).
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for tid in tasks(pid).unwrap_or_default() {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) else { continue };
        out.extend(text.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
    }
    out
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

#[cfg(test)]
mod tests {

    /// This process runs; a pid that does not exist has ended.
    #[test]
    fn ending_processes() {
        assert!(!ending(std::process::id() as i32));
        assert!(ending(i32::MAX));
    }

    use super::*;

    #[test]
    fn maps_lines() {
        let maps = "\
55d0c8a00000-55d0c8a02000 r--p 00000000 08:01 1234   /usr/bin/cat
55d0c8a02000-55d0c8a06000 r-xp 00002000 08:01 1234   /usr/bin/cat
7f1c2e200000-7f1c2e228000 r--p 00000000 08:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2e400000-7f1c2e401000 rw-p 00000000 00:00 0
7f1c2e500000-7f1c2e501000 r--p 00000000 08:01 77     /tmp/my lib.so
7f1c2e600000-7f1c2e601000 r--p 00000000 08:01 78     /tmp/gone.so (deleted)
7ffd1e3fe000-7ffd1e400000 r-xp 00000000 00:00 0      [vdso]
";
        let files = parse_maps(maps);
        assert_eq!(
            files,
            vec![
                PathBuf::from("/usr/bin/cat"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/tmp/my lib.so")
            ]
        );
    }

    #[test]
    fn mapping_lines_and_auxv() {
        let m = parse_mapping("7f1c2e500000-7f1c2e501000 r--p 00001000 08:01 77     /tmp/my  lib.so").unwrap();
        assert_eq!((m.start, m.end, m.offset), (0x7f1c2e500000, 0x7f1c2e501000, 0x1000));
        assert_eq!(m.path, PathBuf::from("/tmp/my  lib.so"));
        assert_eq!(parse_mapping("7ffd1e3fe000-7ffd1e400000 rw-p 00000000 00:00 0").unwrap().path, PathBuf::new());
        assert!(parse_mapping("garbage").is_none());
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
        assert!(mapped_files(me).expect("own maps").contains(&exe));
        assert!(executable(u32::MAX - 1).unwrap_err().contains("no process"));
    }
}
