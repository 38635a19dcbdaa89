//! The runtime's errors: arming a target (`TargetError`), running a
//! session (`RunError`), putting the session into a process
//! (`InjectError`).

use crate::arch::native as arch;
use crate::os::ptrace::PtraceError;

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Ptrace(#[from] PtraceError),
    #[error(transparent)]
    Inject(#[from] InjectError),
    #[error("cannot start `{cmd}`: {err}")]
    Spawn { cmd: String, err: std::io::Error },
    #[error("`{cmd}` exited before its entry point (status {status})")]
    EarlyExit { cmd: String, status: i32 },
    #[error("pid {pid} is not an {} process ({what})", arch::NAME)]
    NotNative { pid: i32, what: String },
    #[error("{module} is not mapped in pid {pid} (is the library loaded?)")]
    NotMapped { module: String, pid: i32 },
    #[error("cannot read /proc/{pid}/{file}: {err}")]
    Proc { pid: i32, file: &'static str, err: std::io::Error },
    #[error("no probe could be placed: {0}")]
    NothingPlaced(String),
    #[error("{0}")]
    Unsupported(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot create the shared region ({size} bytes): {source}")]
    Region { size: u64, source: std::io::Error },
    #[error("cannot map the compiled code: {0}")]
    Code(std::io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("writing the output failed: {0}")]
    Output(std::io::Error),
    #[error("internal error: the compiled artifact is inconsistent: {0}")]
    BadArtifact(String),
}

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error(transparent)]
    Ptrace(#[from] PtraceError),
    #[error("{call} in pid {pid} failed: {err}")]
    Remote { call: &'static str, pid: i32, err: std::io::Error },
    #[error("cannot open the target's region (/proc/{pid}/fd/{fd}): {err}")]
    OpenRegion { pid: i32, fd: i64, err: std::io::Error },
    #[error("cannot map the target's region: {0}")]
    MapRegion(std::io::Error),
    #[error(transparent)]
    Region(#[from] RunError),
    #[error(
        "no free address range for code within {} MiB of {near:#x} in pid {pid} (the reach of a patched jump)",
        crate::arch::native::patch::REACH >> 20
    )]
    NoCodeRange { pid: i32, near: u64 },
}
