//! The kernel's function symbols (`/proc/kallsyms`): the names of the
//! kernel frames in a profile, and the system call a thread blocked in
//! (`--off-cpu`, `process.blocked`), read from the kernel call chain the
//! perf sample at its switch-out carries.

/// The kernel's function symbols, by address; empty where they cannot be
/// read or are hidden (`kptr_restrict`: all zero).
pub fn read() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let mut v: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
        })
        .collect();
    v.sort_unstable();
    v
}

/// The function of `syms` (sorted, as [`read`] gives them) holding `addr`.
pub fn name_of(syms: &[(u64, String)], addr: u64) -> Option<&str> {
    let i = syms.partition_point(|(a, _)| *a <= addr);
    i.checked_sub(1).map(|i| syms[i].1.as_str())
}

/// The system call a kernel call chain (innermost first) is inside: the
/// function the system call entry (`do_syscall_64`, `invoke_syscall`)
/// called, less its prefix (`__x64_sys_futex`: `futex`). Where that
/// wrapper tail-calls its work (`read`: `ksys_read`, `accept4`:
/// `__sys_accept4`) the work's name says it, and a few inner names map
/// to their call (`kernel_wait4`: `wait4`).
pub fn syscall_in(names: &[&str]) -> Option<String> {
    const ENTRIES: [&str; 7] = [
        "do_syscall_64",
        "x64_sys_call",
        "invoke_syscall",
        "el0_svc_common",
        "do_el0_svc",
        "__do_fast_syscall_32",
        "do_int80_syscall_32",
    ];
    const PREFIXES: [&str; 11] = [
        "__x64_sys_",
        "__arm64_sys_",
        "__ia32_sys_",
        "__x64_compat_sys_",
        "__se_sys_",
        "__do_sys_",
        "ksys_",
        "__sys_",
        "do_sys_",
        "kernel_",
        "core_sys_",
    ];
    const ALIASES: [(&str, &str); 7] = [
        ("hrtimer_nanosleep", "nanosleep"),
        ("common_nsleep", "clock_nanosleep"),
        ("common_nsleep_timens", "clock_nanosleep"),
        ("do_epoll_wait", "epoll_wait"),
        ("do_futex", "futex"),
        ("vfs_read", "read"),
        ("vfs_write", "write"),
    ];
    let entry = names.iter().position(|n| ENTRIES.contains(n))?;
    let called = names[..entry].iter().rev().find(|n| !ENTRIES.contains(n) && !n.is_empty())?;
    if let Some((_, a)) = ALIASES.iter().find(|(n, _)| n == called) {
        return Some((*a).to_string());
    }
    let bare = PREFIXES.iter().find_map(|p| called.strip_prefix(p)).unwrap_or(called);
    (!bare.is_empty()).then(|| bare.to_string())
}

/// What a kernel call chain with no system call in it waited in: a page
/// fault (memory), a stop (a debugger's, or the tracer's own while it
/// attaches: `ptrace stop`; SIGSTOP: `stopped`), else the kernel.
pub fn wait_in(names: &[&str]) -> &'static str {
    for n in names {
        match *n {
            "ptrace_stop" => return "ptrace stop",
            "do_signal_stop" => return "stopped",
            "exc_page_fault" | "do_page_fault" | "do_mem_abort" | "el0_da" | "handle_mm_fault" => return "page fault",
            _ => {}
        }
    }
    "kernel"
}

/// The functions of a kernel call chain (`""` where none holds an
/// address).
pub fn names<'s>(syms: &'s [(u64, String)], chain: &[u64]) -> Vec<&'s str> {
    chain.iter().map(|&a| name_of(syms, a).unwrap_or("")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syscall_is_the_outermost_entry_frame() {
        let syms: Vec<(u64, String)> = [
            (0x100, "schedule"),
            (0x200, "futex_wait"),
            (0x300, "__x64_sys_futex"),
            (0x400, "do_syscall_64"),
            (0x500, "exc_page_fault"),
            (0x600, "ksys_read"),
            (0x700, "kernel_wait4"),
        ]
        .iter()
        .map(|(a, n)| (*a, n.to_string()))
        .collect();
        let of = |chain: &[u64]| syscall_in(&names(&syms, chain));
        assert_eq!(of(&[0x110, 0x210, 0x310, 0x410]).as_deref(), Some("futex"));
        assert_eq!(of(&[0x110, 0x210]), None);
        // Wrappers that tail-call their work (not on the stack).
        assert_eq!(of(&[0x110, 0x610, 0x410]).as_deref(), Some("read"));
        assert_eq!(of(&[0x110, 0x710, 0x410]).as_deref(), Some("wait4"));
        assert_eq!(name_of(&syms, 0x50), None);
        assert_eq!(wait_in(&names(&syms, &[0x110, 0x510])), "page fault");
        assert_eq!(wait_in(&names(&syms, &[0x110, 0x210])), "kernel");
    }
}
