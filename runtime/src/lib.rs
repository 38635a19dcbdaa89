//! telco-stap's runtime: pass 5. It will attach to or spawn the target,
//! inject the compiled artifact, patch probe sites, drain events, write the
//! outputs and detach. It never parses script text (DESIGN.md invariant 4).
//!
//! Pass 5 is not built yet; the command line says so when a run needs it.
