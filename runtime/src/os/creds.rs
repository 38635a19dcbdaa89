//! A process's credentials, as the kernel reports them
//! (`/proc/PID/status`, the auxiliary vector's `AT_SECURE`): what decides
//! whether two processes may share a region (INTERNALS.md, invariant 6:
//! one trust domain per region).

/// The lines of `/proc/PID/status` that make a process's privileges: its
/// real, effective, saved and filesystem user and group ids, its
/// supplementary groups and its capability sets. Two processes with equal
/// `Credentials` can do the same things to each other and to the system;
/// any difference, either way, is another trust domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    lines: Vec<String>,
}

const FIELDS: [&str; 8] = ["Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"];

impl Credentials {
    /// The process's credentials now; None when it is gone (a zombie's
    /// status no longer says what it could do) or its status cannot be
    /// read.
    pub fn of(pid: i32) -> Option<Credentials> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let state = text.lines().find_map(|l| l.strip_prefix("State:")).map(str::trim_start);
        if state.is_none_or(|s| s.starts_with('Z') || s.starts_with('X')) {
            return None;
        }
        Some(Credentials::parse(&text))
    }

    fn parse(status: &str) -> Credentials {
        let mut lines: Vec<String> = FIELDS
            .iter()
            .map(|f| {
                status
                    .lines()
                    .find(|l| l.starts_with(f))
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .unwrap_or_else(|| format!("{f} ?"))
            })
            .collect();
        lines.shrink_to_fit();
        Credentials { lines }
    }

    /// Whether a process of these credentials and one of `other`'s are one
    /// trust domain: equal, or different in their supplementary groups
    /// alone while both may set those at will (`CAP_SETGID` in the same
    /// effective set): nginx's root workers, which call `initgroups` as
    /// their root master does not, can do nothing the master cannot.
    pub fn same_domain(&self, other: &Credentials) -> bool {
        const CAP_SETGID: u32 = 6;
        let groups = FIELDS.iter().position(|f| *f == "Groups:").unwrap_or(usize::MAX);
        let eff = FIELDS.iter().position(|f| *f == "CapEff:").unwrap_or(usize::MAX);
        let setgid = |c: &Credentials| {
            let hex = c.lines.get(eff).and_then(|l| l.split_whitespace().nth(1));
            hex.and_then(|h| u64::from_str_radix(h, 16).ok()).is_some_and(|caps| caps & (1 << CAP_SETGID) != 0)
        };
        let rest = |c: &Credentials| -> Vec<String> {
            c.lines.iter().enumerate().filter(|&(i, _)| i != groups).map(|x| x.1.clone()).collect()
        };
        self == other || (setgid(self) && rest(self) == rest(other))
    }

    /// The user and group ids (real, effective, saved) and supplementary
    /// groups, as numbers (a holder takes them: `os::holder`).
    pub fn ids(&self) -> Option<super::holder::Ids> {
        let nums = |name: &str| -> Option<Vec<u32>> {
            let l = self.lines.iter().find(|l| l.starts_with(name))?;
            l[name.len()..].split_whitespace().map(|w| w.parse().ok()).collect()
        };
        let (uid, gid) = (nums("Uid:")?, nums("Gid:")?);
        Some(super::holder::Ids {
            uid: [*uid.first()?, *uid.get(1)?, *uid.get(2)?],
            gid: [*gid.first()?, *gid.get(1)?, *gid.get(2)?],
            groups: nums("Groups:")?,
        })
    }

    /// The effective user id, for messages.
    pub fn euid(&self) -> Option<u32> {
        self.lines.first()?.split_whitespace().nth(2)?.parse().ok()
    }

    /// How messages name a domain of these credentials: "the domain of
    /// uid 33 (www-data)".
    pub fn describe(&self) -> String {
        let Some(uid) = self.euid() else { return "a domain of its own".into() };
        match crate::os::proc::user_name(uid) {
            Some(n) => format!("the domain of uid {uid} ({n})"),
            None => format!("the domain of uid {uid}"),
        }
    }

    /// What differs from `other`, for a warning ("uid 0 0 0 0 against
    /// 12345 12345 12345 12345").
    pub fn difference(&self, other: &Credentials) -> String {
        self.lines
            .iter()
            .zip(&other.lines)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| {
                let (name, mine) = a.split_once(' ').unwrap_or((a, ""));
                let theirs = b.split_once(' ').map_or("", |x| x.1);
                format!("{} {} against {}", name.trim_end_matches(':'), mine, theirs)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Whether the program the process runs was started with privileges its
/// parent did not have (a setuid, setgid or file-capability exec: the
/// kernel's `AT_SECURE`).
pub fn secure_exec(pid: i32) -> bool {
    crate::os::proc::auxv(pid)
        .ok()
        .and_then(|a| crate::os::proc::aux_value(&a, libc::AT_SECURE))
        .is_some_and(|v| v != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str =
        "Name:\tsu\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\nCapInh:\t0\nCapPrm:\t000001ffffffffff\n\
                        CapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\nCapAmb:\t0\n";

    #[test]
    fn a_dropped_uid_is_another_domain_and_says_which() {
        let root = Credentials::parse(ROOT);
        let user = Credentials::parse(
            &ROOT.replace("Uid:\t0\t0\t0\t0", "Uid:\t12345\t12345\t12345\t12345").replace("000001ffffffffff", "0"),
        );
        assert_ne!(root, user);
        assert_eq!(root, Credentials::parse(ROOT));
        assert_eq!(root.euid(), Some(0));
        assert_eq!(user.euid(), Some(12345));
        let d = user.difference(&root);
        assert!(d.starts_with("Uid 12345 12345 12345 12345 against 0 0 0 0"), "{d}");
        assert!(d.contains("CapEff 0 against 000001ffffffffff"), "{d}");
    }

    #[test]
    fn groups_differ_alone_where_both_may_set_them() {
        let master = Credentials::parse(ROOT);
        let worker = Credentials::parse(&ROOT.replace("Groups:\t\n", "Groups:\t0 \n"));
        assert_ne!(master, worker);
        assert!(master.same_domain(&worker) && worker.same_domain(&master));
        // Without CAP_SETGID, groups are privileges.
        let no_caps = |c: &str| c.replace("000001ffffffffff", "0");
        let (a, b) = (
            Credentials::parse(&no_caps(ROOT)),
            Credentials::parse(&no_caps(&ROOT.replace("Groups:\t\n", "Groups:\t27 \n"))),
        );
        assert!(!a.same_domain(&b));
        let user = Credentials::parse(&ROOT.replace("Uid:\t0\t0\t0\t0", "Uid:\t1\t1\t1\t1"));
        assert!(!master.same_domain(&user));
    }

    #[test]
    fn ids_as_numbers() {
        let c = Credentials::parse(
            &ROOT.replace("Uid:\t0\t0\t0\t0", "Uid:\t7\t8\t9\t8").replace("Groups:\t", "Groups:\t4 27"),
        );
        let ids = c.ids().expect("ids");
        assert_eq!((ids.uid, ids.gid, ids.groups.clone()), ([7, 8, 9], [0, 0, 0], vec![4, 27]));
        assert!(ids.unprivileged());
        assert!(!Credentials::parse(ROOT).ids().unwrap().unprivileged());
    }

    #[test]
    fn a_saved_uid_alone_differs_too() {
        let a = Credentials::parse(ROOT);
        let b = Credentials::parse(&ROOT.replace("Uid:\t0\t0\t0\t0", "Uid:\t0\t0\t12345\t0"));
        assert_ne!(a, b);
    }
}
