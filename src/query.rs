//! What the passes ask of the running system: the program `-c` names, the
//! target's executable, mappings and files (`TargetQuery`), and the symbols
//! of libraries a target loads later (`SymbolSource`).

use crate::cli::Cli;
use anyhow::{bail, Result};
use std::path::Path;
use telco_compiler::elaborate::TargetQuery;

/// The program `-c CMD` runs, found on `$PATH` like a shell would.
pub fn command_program(cli: &Cli) -> Result<Option<std::path::PathBuf>> {
    let Some(cmd) = &cli.command else { return Ok(None) };
    let prog = first_word(cmd);
    let prog = prog.as_str();
    match telco_compiler::elf::find_on_path(prog) {
        Some(p) => Ok(Some(p)),
        None => bail!("-c {cmd:?}: program `{prog}` not found"),
    }
}

/// The first word of a shell command, its quotes taken off as the shell
/// does (`'/bin/ls' -l` runs `/bin/ls`; `"my prog" x` runs `my prog`).
fn first_word(cmd: &str) -> String {
    let mut word = String::new();
    let mut chars = cmd.trim_start().chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => break,
            '\'' => word.extend(chars.by_ref().take_while(|&c| c != '\'')),
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => word.extend(chars.next()),
            c => word.push(c),
        }
    }
    word
}

/// Facts about running processes come from the runtime's `/proc` reader;
/// their files are opened as the process maps them, never by the path it
/// shows (`telco_runtime::os::modfile`): each path named is remembered
/// with its file, or with why it has none.
#[derive(Default)]
pub struct ProcQuery {
    #[allow(clippy::type_complexity)]
    files: std::cell::RefCell<
        std::collections::HashMap<(u32, std::path::PathBuf), Result<telco_runtime::os::modfile::Image, String>>,
    >,
}

impl ProcQuery {
    fn remember(&self, pid: u32, path: &std::path::Path, file: Option<telco_runtime::os::modfile::Image>) {
        let file = file.ok_or_else(|| format!("{}: cannot read it as process {pid} maps it", path.display()));
        self.files.borrow_mut().entry((pid, path.to_path_buf())).or_insert(file);
    }
}

impl TargetQuery for ProcQuery {
    fn executable(&self, pid: u32) -> Result<std::path::PathBuf, String> {
        let path = telco_runtime::os::proc::executable(pid)?;
        if !self.files.borrow().contains_key(&(pid, path.clone())) {
            self.remember(pid, &path, telco_runtime::os::modfile::executable(pid as i32));
        }
        Ok(path)
    }
    fn mapped_files(&self, pid: u32) -> Result<Vec<std::path::PathBuf>, String> {
        let mut out = Vec::new();
        for m in telco_runtime::os::proc::mapped_files(pid)? {
            if !self.files.borrow().contains_key(&(pid, m.path.clone())) {
                self.remember(pid, &m.path, telco_runtime::os::modfile::mapped(&m));
            }
            out.push(m.path);
        }
        Ok(out)
    }
    fn image(&self, pid: u32, path: &std::path::Path) -> Option<Result<telco_compiler::elf::Image, String>> {
        let files = self.files.borrow();
        let file = files.get(&(pid, path.to_path_buf()))?;
        Some(file.clone().map(|f| telco_compiler::elf::Image::given(f)))
    }
}

/// The target of a run must exist; say so before anything else happens.
pub fn check_target(cli: &Cli) -> Result<()> {
    use telco_runtime::os::proc;
    for &pid in cli.pids.iter().chain(&cli.target_pid) {
        if !proc::exists(pid as i32) {
            bail!("no process with pid {pid}");
        }
        if proc::kernel_thread(pid as i32) {
            bail!(
                "pid {pid} ({}) is a kernel thread: it runs no program to probe (name a process with -p)",
                proc::comm(pid as i32).trim()
            );
        }
        if !proc::running(pid as i32) {
            bail!("pid {pid} ({}) has ended (a zombie its parent has not reaped)", proc::comm(pid as i32).trim());
        }
    }
    if let Some(cmd) = &cli.command {
        let shell_syntax = telco_runtime::session::Target::has_shell_syntax(cmd);
        let prog = cmd.split_whitespace().next().unwrap_or("");
        if !shell_syntax && !program_exists(prog) {
            bail!("-c {cmd:?}: program `{prog}` not found");
        }
    }
    Ok(())
}

fn program_exists(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).is_file();
    }
    std::env::var_os("PATH").map(|paths| std::env::split_paths(&paths).any(|d| d.join(prog).is_file())).unwrap_or(false)
}

/// The symbols of a library the target loads later, read as pass 2 reads
/// the modules it knows (names, a debug file's names, CFI rows).
pub struct ElfSymbols;

impl telco_runtime::symtab::SymbolSource for ElfSymbols {
    fn symbols(
        &self,
        path: &std::path::Path,
        file: &telco_runtime::os::modfile::Image,
    ) -> Option<telco_runtime::symtab::ModuleSymbols> {
        let image = telco_compiler::elf::Image::given(file.clone());
        let m = telco_compiler::elf::Module::from_image(path, image).ok()?;
        let s = telco_compiler::elaborate::module_symbols(&m, path)?;
        Some(telco_runtime::symtab::ModuleSymbols {
            anchor_addr: s.module.anchor_addr,
            anchor_offset: s.module.anchor_offset,
            functions: s.functions,
            unwind: s.unwind,
        })
    }

    fn functions_named(
        &self,
        _path: &std::path::Path,
        file: &telco_runtime::os::modfile::Image,
        names: &[&str],
    ) -> Vec<(u64, u64, usize)> {
        telco_compiler::image::functions_named(&file[..], names)
    }

    fn layout(&self, bytes: &[u8]) -> Option<telco_runtime::symtab::ElfLayout> {
        let l = telco_compiler::image::layout(bytes)?;
        Some(telco_runtime::symtab::ElfLayout {
            loads: l.loads,
            sections: l.sections,
            build_id: l.build_id,
            debug_frame: telco_compiler::elf::go_debug_frame(bytes),
        })
    }

    fn function_at(
        &self,
        _path: &std::path::Path,
        file: &telco_runtime::os::modfile::Image,
        file_offset: u64,
    ) -> Option<String> {
        telco_compiler::image::function_at(&file[..], file_offset)
    }
}
