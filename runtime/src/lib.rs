//! telco-stap's runtime: pass 5. It will attach to or spawn the target,
//! inject the compiled artifact, patch probe sites, drain events, write the
//! outputs and detach. It never parses script text (INTERNALS.md, invariant 4).
//!
//! Built so far: [`proc`], the read-only view of running processes that
//! pass 2 uses (through the compiler's `TargetQuery`) to find a target's
//! executable and libraries.

pub mod arch;
pub mod chrome;
pub mod crash;
pub mod inject;
pub mod itrace;
pub mod local;
pub mod os;
pub mod render;
pub mod target;
