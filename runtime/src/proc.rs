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

/// The real user id and the parent of process `pid` (`/proc/PID/status`).
pub fn uid_and_parent(pid: u32) -> Option<(u32, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let uid = field("Uid:")?.split_whitespace().next()?.parse().ok()?;
    let ppid = field("PPid:")?.parse().ok()?;
    Some((uid, ppid))
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
    for line in maps.lines() {
        // address perms offset dev inode pathname (the path may contain spaces)
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start();
            match rest.find(' ') {
                Some(i) => rest = &rest[i..],
                None => {
                    rest = "";
                    break;
                }
            }
        }
        let path = rest.trim();
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            continue;
        }
        let p = PathBuf::from(path);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
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
    fn own_process() {
        let me = std::process::id();
        let exe = executable(me).expect("own exe");
        assert!(exe.is_file());
        assert!(mapped_files(me).expect("own maps").contains(&exe));
        assert!(executable(u32::MAX - 1).unwrap_err().contains("no process"));
    }
}
