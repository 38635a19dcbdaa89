//! The runtime's errors: arming a target (`TargetError`).

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
