//! The runtime's errors: arming a target (`TargetError`), running a
//! session (`RunError`).

use crate::arch::native as arch;
use crate::inject::InjectError;
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
    #[error("no probe could be placed:\n{0}")]
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
