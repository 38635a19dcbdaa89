//! Every file the tracer writes for the user (`-o`, `--chrome`,
//! `--perfetto`, `--itrc`, the profile files, `itrc-dump --chrome`) is
//! opened by [`open`], which runs as root and is often pointed into `/tmp`.
//!
//! The rule is the kernel's `fs.protected_symlinks`, `protected_regular`
//! and `protected_fifos` (level 1), applied by the tracer itself, so it
//! holds whatever the machine's sysctls say: in a sticky world-writable
//! directory (`/tmp`, `/var/tmp`, `/dev/shm`), a symlink, a regular file
//! or a FIFO is used only if it belongs to the tracer's effective user or
//! to the directory's owner. Another user's symlink there could point at
//! any file root can write, and another user's file or FIFO would hand
//! them the trace. Symlinks are followed one at a time (each checked
//! against its own directory), and the file is opened with `O_NOFOLLOW`
//! and checked again on the open descriptor, so nothing swapped in
//! between the check and the open is used. A regular file with other
//! names (hard links) in such a directory is refused too, as
//! `fs.protected_hardlinks` would have kept it from being made.
//!
//! A FIFO is opened without blocking: one nobody reads is an error at
//! once, never a hang; one that a reader holds (`mkfifo` then a reader,
//! or `-o /dev/stdout` on a pipe) is written to. Devices are written as
//! named (`-o /dev/null`, `-o /dev/stderr`): only root makes device nodes.
//! A directory another user can write that is not sticky is that user's
//! to arrange, for the tracer as for any program root runs.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// How an output file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Created, or emptied if it exists.
    Create,
    /// Written at its end; it must exist (a file the session made).
    Append,
}

/// Symlinks followed, at most (the kernel's limit).
const MAX_LINKS: usize = 40;

/// `path`, opened for writing as [`Mode`] says, under the rule of the
/// module's documentation. A refusal is `PermissionDenied` whose text
/// names the path, its owner and the directory.
pub fn open(path: &Path, mode: Mode) -> io::Result<File> {
    let euid = nix::unistd::geteuid().as_raw();
    let mut at = path.to_path_buf();
    let mut links = 0;
    // Each turn either returns or follows a link; a race (the name
    // created or swapped between looking and opening) costs a turn.
    for _ in 0..MAX_LINKS + 8 {
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound && mode == Mode::Create => None,
            Err(e) => return Err(e),
        };
        match meta {
            Some(m) if m.file_type().is_symlink() && !magic(&at) => {
                links += 1;
                if links > MAX_LINKS {
                    break;
                }
                at = follow(&at, &m, euid)?;
            }
            Some(m) => {
                // A `/proc` link (`/dev/stdout` is one) is the kernel's to
                // follow: it names an open file, not a path.
                match existing(&at, mode, m.file_type().is_symlink(), euid)? {
                    Some(f) => return Ok(f),
                    None => continue,
                }
            }
            None => {
                let made = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(&at);
                match made {
                    Ok(f) => {
                        blocking(&f)?;
                        return Ok(f);
                    }
                    // Someone made it meanwhile: look at what it is.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("`{}`: more than {MAX_LINKS} symlinks, or changing while it is opened", path.display()),
    ))
}

/// An existing file opened (`follow`: through a `/proc` link), checked
/// on the descriptor; None if it became a symlink meanwhile.
fn existing(at: &Path, mode: Mode, follow: bool, euid: u32) -> io::Result<Option<File>> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).custom_flags(if follow { 0 } else { libc::O_NOFOLLOW } | libc::O_NONBLOCK);
    if mode == Mode::Append {
        o.append(true);
    }
    let f = match o.open(at) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) && !follow => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(io::Error::new(
                e.kind(),
                format!("`{}` is a FIFO that nobody reads (or a socket)", at.display()),
            ))
        }
        Err(e) => return Err(e),
    };
    // The rule again, on what was opened (a `/proc` link's file is not in
    // a sticky directory: its own entry is what counts).
    let m = f.metadata()?;
    if !follow {
        allowed(at, &m, euid)?;
    }
    if m.is_file() && mode == Mode::Create {
        f.set_len(0)?;
    }
    blocking(&f)?;
    Ok(Some(f))
}

/// A link of `/proc` (`/proc/self/fd/1`): it names an open file, which
/// may be a pipe with no path.
fn magic(at: &Path) -> bool {
    at.starts_with("/proc")
}

/// [`open`] with [`Mode::Create`].
pub fn create(path: &Path) -> io::Result<File> {
    open(path, Mode::Create)
}

/// The same rule without opening anything: whether [`open`] would refuse
/// `path` as it is now (to say so before a session starts).
pub fn check(path: &Path) -> io::Result<()> {
    let euid = nix::unistd::geteuid().as_raw();
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let m = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if !m.file_type().is_symlink() || magic(&at) {
            return allowed(&at, &m, euid);
        }
        at = follow(&at, &m, euid)?;
    }
    Ok(())
}

/// Where the symlink `at` (described by `m`) points, if the rule lets
/// it be followed.
fn follow(at: &Path, m: &Metadata, euid: u32) -> io::Result<PathBuf> {
    allowed(at, m, euid)?;
    let to = std::fs::read_link(at)?;
    Ok(if to.is_absolute() { to } else { directory(at).join(to) })
}

/// The directory a name is in (`.` for a bare name).
fn directory(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The kernel's rule for `at` (described by `m`) in its directory.
fn allowed(at: &Path, m: &Metadata, euid: u32) -> io::Result<()> {
    let dir = directory(at);
    let d = std::fs::metadata(&dir)?;
    let sticky_world_writable = d.mode() & 0o1000 != 0 && d.mode() & 0o002 != 0;
    if !sticky_world_writable {
        return Ok(());
    }
    let kind = m.file_type();
    let what = if kind.is_symlink() {
        "symlink"
    } else if kind.is_file() {
        "file"
    } else if kind.is_fifo() {
        "FIFO"
    } else {
        // Devices (only root makes them) and sockets (never opened).
        ""
    };
    let ours = m.uid() == euid || m.uid() == d.uid();
    if !what.is_empty() && !ours {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{}` is a {what} owned by uid {} in `{}`, a sticky world-writable directory (owned by uid {}): \
                 telco-stap does not write through another user's {what} there (the rule of the kernel's \
                 fs.protected_symlinks and protected_regular); remove it or name another path",
                at.display(),
                m.uid(),
                dir.display(),
                d.uid(),
            ),
        ));
    }
    if kind.is_file() && m.nlink() > 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{}` has {} names (hard links) in `{}`, a sticky world-writable directory: telco-stap does \
                 not write to it (another name may be a file elsewhere); remove it or name another path",
                at.display(),
                m.nlink(),
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Writes wait again (a FIFO was opened without blocking only to fail
/// fast when nobody reads it).
fn blocking(f: &File) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(f, FcntlArg::F_GETFL)?);
    fcntl(f, FcntlArg::F_SETFL(flags & !OFlag::O_NONBLOCK))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A sticky world-writable directory of our own, removed however
    /// the test ends.
    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn sticky(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("telco-outfile-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Dir(d)
    }

    #[test]
    fn our_own_names_are_written() {
        let d = sticky("own");
        let target = d.0.join("real");
        std::fs::write(&target, b"old contents").unwrap();
        // A new file, an existing one (emptied), through our own symlink.
        create(&d.0.join("new")).unwrap();
        std::os::unix::fs::symlink(&target, d.0.join("link")).unwrap();
        use std::io::Write;
        create(&d.0.join("link")).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        open(&target, Mode::Append).unwrap().write_all(b"er").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"newer");
        check(&d.0.join("link")).unwrap();
    }

    #[test]
    fn another_users_symlink_in_a_sticky_directory_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: making a file another user owns needs root");
            return;
        }
        let d = sticky("other");
        let target = d.0.join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let link = d.0.join("planted");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(12345), Some(12345)).unwrap();
        for e in [create(&link).unwrap_err(), check(&link).unwrap_err()] {
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
            assert!(e.to_string().contains("symlink owned by uid 12345"), "{e}");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // Another user's file or FIFO there.
        let file = d.0.join("theirs");
        std::fs::write(&file, b"x").unwrap();
        std::os::unix::fs::lchown(&file, Some(12345), Some(12345)).unwrap();
        assert!(create(&file).unwrap_err().to_string().contains("a file owned by uid 12345"));
        // A FIFO of our own that nobody reads: an error, not a hang.
        let fifo = d.0.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(create(&fifo).unwrap_err().to_string().contains("FIFO that nobody reads"));
    }
}
