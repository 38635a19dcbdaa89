//! The OS layer: the only code in the runtime that talks to the kernel
//! about processes, memory and signals — ptrace, waitpid, signals,
//! memfd/mmap, and the reading of `/proc`. The `nix` crate where it has
//! the call; raw `libc` only where it does not, each place saying why.
//!
//! * [`ptrace`]: stopped processes and threads (guards that detach on
//!   drop), their registers and memory, system calls and calls run inside
//!   them, threads followed into an exec;
//! * [`wait`]: the one decoding of a wait status;
//! * [`process`]: starting a traced command, ending one, signals by name,
//!   whether two processes share their memory;
//! * [`proc`]: `/proc/PID/…`: executable, maps (one parser), auxiliary
//!   vector (one parser), status fields, threads;
//! * [`modfile`]: the files a process maps, opened as it maps them (never
//!   by the path it shows), held memory-mapped once per file;
//! * [`sandbox`]: the process that runs the tracer's own probe handlers
//!   under a seccomp filter, away from the tracer's memory and files;
//! * [`sys`]: shared and executable memory, the tracer's own signals,
//!   clocks and the cycle counter's calibration.

pub mod creds;
pub mod fanotify;
pub mod holder;
pub mod kallsyms;
pub mod modfile;
pub mod perf;
pub mod proc;
pub mod process;
pub mod ptrace;
pub mod sandbox;
pub mod sys;
pub mod wait;
