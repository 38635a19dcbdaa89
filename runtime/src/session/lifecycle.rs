//! Lifecycle probes the tracer runs itself by a remote call
//! (`process.begin` at arm time and at an exec, `thread.begin`).

use super::*;

/// Run the handlers of the lifecycle probes of `event` in thread `tid` of
/// the stopped process (running program `exe`), by remote calls of
/// `rt_call_probe` in code region `code`.
/// What could not run is returned, for warnings.
pub(super) fn lifecycle(
    s: &mut Stopped,
    a: &Artifact,
    code: &CodeRegion,
    region: u64,
    tid: i32,
    event: LifeEvent,
    exe: &Program,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let Some(call) = a.symbols.iter().find(|s| s.name == "rt_call_probe").map(|s| code.at(s.offset)) else {
        return warnings;
    };
    for (i, p) in a.probes.iter().enumerate() {
        let Attach::Lifecycle { event: e, module, .. } = &p.attach else { continue };
        if *e != event || module.as_ref().is_some_and(|m| !exe.is(m)) {
            continue;
        }
        // process.end at an exec: `$status` is -1 (the program did not exit).
        let arg1 = if event == LifeEvent::ProcessEnd { u64::MAX } else { 0 };
        let args = [region, code.at(p.handler), i as u64, u64::from(a.ctx_size), arg1];
        match s.call(tid, call, &args, code.trap()) {
            Ok(r) if r as i64 == -1 => warnings.push(format!(
                "`{}` did not run in pid {} ({}): its thread has no thread pointer yet (a static program at its \
                 start)",
                p.name,
                s.pid(),
                exe.path.display()
            )),
            Ok(_) => {}
            Err(e) => warnings.push(format!("cannot run `{}` in thread {tid}: {e}", p.name)),
        }
    }
    warnings
}
