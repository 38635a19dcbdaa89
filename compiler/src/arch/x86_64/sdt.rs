//! SDT marker argument specs in x86_64's AT&T operand syntax, as
//! `<sys/sdt.h>` writes them (`-4@%eax 8@-16(%rbp) 8@8(%rax,%rdx,4) 4@$5`).

use super::super::{ArgLoc, MarkArg};
use telco_abi::arch::x86_64 as regs;

/// Parse an x86_64 argument text (`-4@%eax 8@-16(%rbp) 4@$5`).
pub fn parse_args(text: &str) -> Result<Vec<MarkArg>, String> {
    text.split_whitespace().map(parse_arg).collect()
}

fn parse_arg(spec: &str) -> Result<MarkArg, String> {
    let (size, signed, operand) = match spec.split_once('@') {
        Some((n, op)) => {
            let v: i64 = n.parse().map_err(|_| format!("`{spec}`: bad size `{n}`"))?;
            let size = v.unsigned_abs();
            if ![1, 2, 4, 8].contains(&size) {
                return Err(format!("`{spec}`: size {v} is not 1, 2, 4 or 8 bytes"));
            }
            (size as u8, v < 0, op)
        }
        // The old form, without a size: a long.
        None => (8, true, spec),
    };
    let loc = if let Some(c) = operand.strip_prefix('$') {
        ArgLoc::Const(parse_num(c).ok_or_else(|| format!("`{spec}`: bad constant `{c}`"))?)
    } else if operand.starts_with('%') {
        let (index, shift) = reg(operand).ok_or_else(|| format!("`{spec}`: unknown register `{operand}`"))?;
        ArgLoc::Reg { index, shift }
    } else if let Some((name, offset)) = symbol_operand(operand) {
        ArgLoc::Symbol { name, offset }
    } else if let Some(open) = operand.find('(') {
        let disp_text = &operand[..open];
        let inner = operand[open + 1..].strip_suffix(')').ok_or_else(|| format!("`{spec}`: missing `)`"))?;
        let disp = if disp_text.is_empty() {
            0
        } else {
            parse_num(disp_text).ok_or_else(|| {
                format!("`{spec}`: the displacement `{disp_text}` is a symbol with a base register other than %rip")
            })?
        };
        let mut parts = inner.split(',').map(str::trim);
        let base = match parts.next() {
            Some("") | None => None,
            Some(r) => Some(full_reg(r).ok_or_else(|| format!("`{spec}`: unknown base register `{r}`"))?),
        };
        if base == regs::register_index("rip") {
            return Err(format!("`{spec}`: a %rip-relative operand (a global) is not supported"));
        }
        let index = match parts.next() {
            None => None,
            Some(r) => {
                let i = full_reg(r).ok_or_else(|| format!("`{spec}`: unknown index register `{r}`"))?;
                let scale = match parts.next() {
                    None => 1,
                    Some(s) => s
                        .parse::<u8>()
                        .ok()
                        .filter(|s| [1, 2, 4, 8].contains(s))
                        .ok_or_else(|| format!("`{spec}`: scale `{s}` is not 1, 2, 4 or 8"))?,
                };
                Some((i, scale))
            }
        };
        ArgLoc::Mem { base, index, disp }
    } else if let Some(v) = parse_num(operand) {
        // An absolute address.
        ArgLoc::Mem { base: None, index: None, disp: v }
    } else {
        return Err(format!("`{spec}`: cannot read the operand `{operand}`"));
    };
    Ok(MarkArg { size, signed, loc })
}

/// `name`, `name+8`, `4+name`, `name-4`, alone or `(%rip)`-relative:
/// memory at a symbol plus numbers (an operand gas resolves to that
/// address). One symbol, added; None for anything else.
fn symbol_operand(operand: &str) -> Option<(String, i64)> {
    let text = operand.strip_suffix("(%rip)").unwrap_or(operand);
    if text.contains('(') || text.is_empty() {
        return None;
    }
    let (mut name, mut offset) = (None, 0i64);
    let mut rest = text;
    let mut sign = 1i64;
    while !rest.is_empty() {
        let end = rest[1..].find(['+', '-']).map_or(rest.len(), |i| i + 1);
        let (term, next) = rest.split_at(end);
        let t = match term.as_bytes()[0] {
            b'+' => &term[1..],
            b'-' => {
                sign = -1;
                &term[1..]
            }
            _ => term,
        };
        let symbolic = t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '.');
        if symbolic {
            let ok = t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '$');
            if !ok || sign < 0 || name.is_some() {
                return None;
            }
            name = Some(t.to_string());
        } else {
            offset = offset.wrapping_add(sign.wrapping_mul(parse_num(t)?));
        }
        sign = 1;
        rest = next;
    }
    Some((name?, offset))
}

fn parse_num(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None => digits.parse::<i64>().ok()?,
    };
    Some(if neg { -v } else { v })
}

/// A 64-bit register by any of its names (for addresses).
fn full_reg(name: &str) -> Option<u32> {
    reg(name).filter(|&(_, shift)| shift == 0).map(|(i, _)| i)
}

/// A register name (`%eax`, `%r8d`, `%ah`): its full register's index and
/// the shift of the named part.
fn reg(name: &str) -> Option<(u32, u8)> {
    let n = name.strip_prefix('%')?;
    let high = ["ah", "bh", "ch", "dh"];
    if let Some(i) = high.iter().position(|h| *h == n) {
        let full = ["rax", "rbx", "rcx", "rdx"][i];
        return Some((regs::register_index(full)?, 8));
    }
    let legacy: [(&str, [&str; 4]); 8] = [
        ("rax", ["rax", "eax", "ax", "al"]),
        ("rbx", ["rbx", "ebx", "bx", "bl"]),
        ("rcx", ["rcx", "ecx", "cx", "cl"]),
        ("rdx", ["rdx", "edx", "dx", "dl"]),
        ("rsi", ["rsi", "esi", "si", "sil"]),
        ("rdi", ["rdi", "edi", "di", "dil"]),
        ("rbp", ["rbp", "ebp", "bp", "bpl"]),
        ("rsp", ["rsp", "esp", "sp", "spl"]),
    ];
    for (full, names) in legacy {
        if names.contains(&n) {
            return Some((regs::register_index(full)?, 0));
        }
    }
    if n == "rip" {
        return Some((regs::register_index("rip")?, 0));
    }
    // r8 .. r15 with d, w, b (or l) suffixes.
    let digits: String = n.strip_prefix('r')?.chars().take_while(char::is_ascii_digit).collect();
    let num: u32 = digits.parse().ok()?;
    let suffix = &n[1 + digits.len()..];
    if !(8..=15).contains(&num) || !["", "d", "w", "b", "l"].contains(&suffix) {
        return None;
    }
    Some((regs::register_index(&format!("r{num}"))?, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg_index(n: &str) -> u32 {
        regs::register_index(n).unwrap()
    }

    #[test]
    fn argument_specs() {
        let a = parse_args("-4@%eax 8@%rdx 8@-16(%rbp) 8@8(%rax,%rdx,4) 4@$5 -1@%ah 2@%r9w 8@(%rsp)").unwrap();
        assert_eq!(a[0], MarkArg { size: 4, signed: true, loc: ArgLoc::Reg { index: reg_index("rax"), shift: 0 } });
        assert_eq!(a[1], MarkArg { size: 8, signed: false, loc: ArgLoc::Reg { index: reg_index("rdx"), shift: 0 } });
        assert_eq!(a[2].loc, ArgLoc::Mem { base: Some(reg_index("rbp")), index: None, disp: -16 });
        assert_eq!(a[3].loc, ArgLoc::Mem { base: Some(reg_index("rax")), index: Some((reg_index("rdx"), 4)), disp: 8 });
        assert_eq!(a[4], MarkArg { size: 4, signed: false, loc: ArgLoc::Const(5) });
        assert_eq!(a[5].loc, ArgLoc::Reg { index: reg_index("rax"), shift: 8 });
        assert_eq!(a[6].loc, ArgLoc::Reg { index: reg_index("r9"), shift: 0 });
        assert_eq!(a[7].loc, ArgLoc::Mem { base: Some(reg_index("rsp")), index: None, disp: 0 });
        assert!(parse_args("").unwrap().is_empty());
    }

    /// Symbolic operands (`STAP_SDT_ARG_CONSTRAINT=m` on globals and
    /// statics): the symbol and what is added to it.
    #[test]
    fn symbol_operands() {
        let a = parse_args("-4@globalvar(%rip) 8@4+localstruct(%rip) 2@x.1234-2(%rip) 4@plain 4@table+16").unwrap();
        let sym = |n: &str, o: i64| ArgLoc::Symbol { name: n.into(), offset: o };
        let locs: Vec<ArgLoc> = a.into_iter().map(|a| a.loc).collect();
        assert_eq!(
            locs,
            [sym("globalvar", 0), sym("localstruct", 4), sym("x.1234", -2), sym("plain", 0), sym("table", 16)]
        );
    }

    #[test]
    fn bad_specs_say_why() {
        assert!(parse_args("3@%eax").unwrap_err().contains("not 1, 2, 4 or 8"));
        assert!(parse_args("8@%xyz").unwrap_err().contains("unknown register"));
        assert!(parse_args("8@counter(%rbx)").unwrap_err().contains("symbol"));
        assert!(parse_args("8@a+b(%rip)").is_err());
        assert!(parse_args("8@-sym(%rip)").is_err());
        assert!(parse_args("8@8(%rax,%rbx,3)").unwrap_err().contains("scale"));
    }
}
