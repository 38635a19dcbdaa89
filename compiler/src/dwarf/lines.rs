//! DWARF line tables (`.debug_line`, via gimli): where the code of a
//! source line is, for `.statement("func@file.c:LINE")`.
//!
//! The statement rows (`is_stmt`) of that line, in files whose path is the
//! one named or ends with it, grouped by function: the lowest address of
//! each is the probe's (SystemTap's choice: a line probe fires each time
//! the line is entered there). `.nearest` moves a line without code to the
//! next that has some (`Module::line_addresses`); pass 2 then proves the
//! site safe as any statement's.

use gimli::Reader;

/// One row: an address where a statement of `line` in file `file` (as the
/// line table names it, directory joined) starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub addr: u64,
    pub file: String,
    pub line: u64,
}

/// Every statement row of the module's line tables (its DWARF as
/// [`super::Debug`] finds it: its own sections, compressed or not,
/// or a separate debug file); empty when it has none.
pub fn rows(debug: &super::Debug) -> Result<Vec<Row>, String> {
    let dwarf = debug.dwarf();
    let text = |r: super::R| r.to_string_lossy().map(|s| s.into_owned()).unwrap_or_default();
    let mut out = Vec::new();
    for unit in debug.units() {
        let Some(program) = unit.line_program.clone() else { continue };
        let mut rows = program.rows();
        while let Ok(Some((header, row))) = rows.next_row() {
            if row.end_sequence() || !row.is_stmt() {
                continue;
            }
            let Some(line) = row.line() else { continue };
            let Some(file) = row.file(header) else { continue };
            let name = dwarf.attr_string(&unit, file.path_name()).map(text).unwrap_or_default();
            let path = if name.starts_with('/') {
                name
            } else {
                let dir =
                    file.directory(header).and_then(|d| dwarf.attr_string(&unit, d).ok()).map(text).unwrap_or_default();
                if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                }
            };
            out.push(Row { addr: row.address(), file: path, line: line.get() });
        }
    }
    Ok(out)
}

/// Whether a line table's file is the one a script names: the same path,
/// or one ending in `/NAME`.
pub fn file_matches(table: &str, named: &str) -> bool {
    let named = named.trim_start_matches("./");
    if named.contains(['*', '?', '[']) {
        // A glob (`at_var_cu*.c`): the whole path, or its last components.
        return crate::glob::glob_match(named, table) || crate::glob::glob_match(&format!("*/{named}"), table);
    }
    table == named || table.ends_with(&format!("/{named}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_match_by_suffix() {
        assert!(file_matches("/src/tests/programs/sdt.c", "sdt.c"));
        assert!(file_matches("/src/tests/programs/sdt.c", "programs/sdt.c"));
        assert!(file_matches("/src/a.c", "/src/a.c"));
        assert!(!file_matches("/src/xsdt.c", "sdt.c"));
        assert!(file_matches("/src/at_var_cu_2.c", "at_var_cu*.c"));
        assert!(!file_matches("/src/at_var_cu_2.h", "at_var_cu*.c"));
    }
}
