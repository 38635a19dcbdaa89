//! SDT marker argument specs in aarch64's operand syntax, as `<sys/sdt.h>`
//! has gcc write them (`-8@x0 -4@x1 -8@[sp, 24] 1@[x3, 12] -4@42
//! -8@[x4, #:lo12:glob]`).
//!
//! gcc names a register by its 64-bit name whatever the argument's size
//! (`-4@x1` for an `int`: the spec's size says which bits count); other
//! compilers may write `w1`, `#42` or `[x29, #-20]`, read the same way. A
//! `:lo12:` offset (`[x4, #:lo12:glob]`) is the low 12 bits of a symbol's
//! address added to the register an `adrp` loaded with the symbol's page:
//! memory at the symbol, whatever the register. Floating-point arguments
//! (`8f@x1`: gcc moves a `double` into a general register and marks its
//! size with `f`) are refused, as they are on x86_64.

use super::super::{ArgLoc, MarkArg};
use telco_abi::arch::aarch64 as regs;

/// Parse an aarch64 argument text (`-4@x0 8@[sp, 16] 4@42`).
pub fn parse_args(text: &str) -> Result<Vec<MarkArg>, String> {
    text.split_whitespace()
        .map(str::to_string)
        // A memory operand has a space after its comma: `[sp, 16]`.
        .fold(Vec::<String>::new(), |mut specs, part| {
            match specs.last_mut() {
                Some(open) if open.contains('[') && !open.contains(']') => {
                    open.push(' ');
                    open.push_str(&part);
                }
                _ => specs.push(part),
            }
            specs
        })
        .iter()
        .map(|s| parse_arg(s))
        .collect()
}

fn parse_arg(spec: &str) -> Result<MarkArg, String> {
    let (size, signed, operand) = match spec.split_once('@') {
        Some((n, op)) => {
            if n.ends_with('f') {
                return Err(format!("`{spec}`: a floating-point argument (size `{n}`) is not supported"));
            }
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
    let loc = if let Some(inner) = operand.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(|| format!("`{spec}`: missing `]`"))?;
        memory(spec, inner)?
    } else if let Some(v) = parse_num(operand.strip_prefix('#').unwrap_or(operand)) {
        ArgLoc::Const(v)
    } else if matches!(operand, "xzr" | "wzr") {
        ArgLoc::Const(0)
    } else {
        let index = reg(operand).ok_or_else(|| format!("`{spec}`: cannot read the operand `{operand}`"))?;
        ArgLoc::Reg { index, shift: 0 }
    };
    Ok(MarkArg { size, signed, loc })
}

/// The inside of `[...]`: `base`, `base, off`, `base, #off`, `base,
/// #:lo12:sym+off`, `base, index`, `base, index, lsl #n`.
fn memory(spec: &str, inner: &str) -> Result<ArgLoc, String> {
    let mut parts = inner.split(',').map(str::trim);
    let base_name = parts.next().unwrap_or_default();
    let base = reg(base_name)
        .filter(|_| !base_name.starts_with('w'))
        .ok_or_else(|| format!("`{spec}`: `{base_name}` is no 64-bit base register"))?;
    let second = parts.next();
    let third = parts.next();
    if parts.next().is_some() {
        return Err(format!("`{spec}`: cannot read the address `[{inner}]`"));
    }
    let Some(second) = second else { return Ok(ArgLoc::Mem { base: Some(base), index: None, disp: 0 }) };
    let imm = second.strip_prefix('#').unwrap_or(second);
    if let Some(sym) = imm.strip_prefix(":lo12:") {
        let (name, offset) = symbol(sym).ok_or_else(|| format!("`{spec}`: cannot read the symbol `{sym}`"))?;
        if name.starts_with(".L") {
            return Err(format!(
                "`{spec}`: the argument is at `{sym}`, an assembler-local label (gcc's section anchor) that no \
                 symbol table keeps"
            ));
        }
        if third.is_some() {
            return Err(format!("`{spec}`: cannot read the address `[{inner}]`"));
        }
        return Ok(ArgLoc::Symbol { name, offset });
    }
    if imm.starts_with(':') {
        return Err(format!("`{spec}`: the relocation operator in `{second}` is not supported"));
    }
    if let Some(disp) = parse_num(imm) {
        if third.is_some() {
            return Err(format!("`{spec}`: cannot read the address `[{inner}]`"));
        }
        return Ok(ArgLoc::Mem { base: Some(base), index: None, disp });
    }
    // A register offset: 64-bit, shifted left or not (an extended 32-bit
    // index, `w1, sxtw`, is not a plain sum).
    let index = reg(second)
        .filter(|&i| !second.starts_with('w') && (i as usize) < regs::SP)
        .ok_or_else(|| format!("`{spec}`: `{second}` is no 64-bit index register"))?;
    let scale = match third {
        None => 1,
        Some(shift) => {
            let n = shift
                .strip_prefix("lsl")
                .map(|n| n.trim())
                .map(|n| n.strip_prefix('#').unwrap_or(n))
                .and_then(|n| n.parse::<u8>().ok())
                .filter(|&n| n <= 3)
                .ok_or_else(|| format!("`{spec}`: the index's `{shift}` is not `lsl` by 0 to 3"))?;
            1 << n
        }
    };
    Ok(ArgLoc::Mem { base: Some(base), index: Some((index, scale)), disp: 0 })
}

/// `sym`, `sym+8`, `sym-4`: a symbol and what is added to it.
fn symbol(text: &str) -> Option<(String, i64)> {
    let end = text.find(['+', '-']).unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '$');
    if !ok {
        return None;
    }
    let offset = if rest.is_empty() { 0 } else { parse_num(rest)? };
    Some((name.to_string(), offset))
}

fn parse_num(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None if digits.starts_with(|c: char| c.is_ascii_digit()) => digits.parse::<i64>().ok()?,
        None => return None,
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

/// A general register (`x0`–`x30`, `w0`–`w30`, `sp`, `wsp`, `fp`, `lr`): its
/// index in the saved registers. Not `pc` or `pstate`, which no operand
/// names.
fn reg(name: &str) -> Option<u32> {
    regs::register_index(name).filter(|&i| i as usize <= regs::SP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(n: u32) -> u32 {
        regs::register_index(&format!("x{n}")).unwrap()
    }

    fn mem(base: u32, disp: i64) -> ArgLoc {
        ArgLoc::Mem { base: Some(base), index: None, disp }
    }

    /// What aarch64-linux-gnu-gcc 12 writes (`readelf -n` of a program
    /// using `DTRACE_PROBEn`, at -O0 and -O2).
    #[test]
    fn gcc_argument_specs() {
        let sp = regs::SP as u32;
        let a = parse_args("-8@[sp, 24] -4@[sp, 20] 8@[sp, 8] -8@x0 1@[sp, 19] -2@[sp, 16]").unwrap();
        assert_eq!(a[0], MarkArg { size: 8, signed: true, loc: mem(sp, 24) });
        assert_eq!(a[2], MarkArg { size: 8, signed: false, loc: mem(sp, 8) });
        assert_eq!(a[3], MarkArg { size: 8, signed: true, loc: ArgLoc::Reg { index: x(0), shift: 0 } });
        assert_eq!(a[4], MarkArg { size: 1, signed: false, loc: mem(sp, 19) });
        assert_eq!(a.len(), 6);
        let a = parse_args("-8@x0 -4@x1 8@x2 -8@[x3] 1@x4 -2@x5").unwrap();
        assert_eq!(a[1], MarkArg { size: 4, signed: true, loc: ArgLoc::Reg { index: x(1), shift: 0 } });
        assert_eq!(a[3].loc, mem(x(3), 0));
        let a = parse_args("-8@[x6, 16] -4@x2 -4@[x3, 8] 1@[x3, 12]").unwrap();
        assert_eq!(a[0].loc, mem(x(6), 16));
        assert_eq!(a[3].loc, mem(x(3), 12));
        let a = parse_args("-4@42 -4@-1 -8@4886718345").unwrap();
        let consts: Vec<ArgLoc> = a.into_iter().map(|a| a.loc).collect();
        assert_eq!(consts, [ArgLoc::Const(42), ArgLoc::Const(-1), ArgLoc::Const(4886718345)]);
        // -fno-section-anchors: a global through its page and `:lo12:`.
        let a = parse_args("-8@[x4, #:lo12:glob] -2@[x3, 14] -8@[x5] -4@0 -4@0").unwrap();
        assert_eq!(a[0].loc, ArgLoc::Symbol { name: "glob".into(), offset: 0 });
        assert_eq!(a[1], MarkArg { size: 2, signed: true, loc: mem(x(3), 14) });
        assert_eq!(a[3].loc, ArgLoc::Const(0));
        assert!(parse_args("").unwrap().is_empty());
    }

    /// Other spellings: `w` registers, `#` immediates, frame-pointer
    /// offsets, register offsets, the zero register.
    #[test]
    fn other_spellings() {
        let a = parse_args("-4@w3 4@[x29, #-20] 8@#42 8@[x1, x2, lsl #3] 8@[x1, x2] 4@wzr 8@[sp] 8@lr 8@[x0, #0x10]")
            .unwrap();
        let locs: Vec<ArgLoc> = a.into_iter().map(|a| a.loc).collect();
        assert_eq!(
            locs,
            [
                ArgLoc::Reg { index: x(3), shift: 0 },
                mem(x(29), -20),
                ArgLoc::Const(42),
                ArgLoc::Mem { base: Some(x(1)), index: Some((x(2), 8)), disp: 0 },
                ArgLoc::Mem { base: Some(x(1)), index: Some((x(2), 1)), disp: 0 },
                ArgLoc::Const(0),
                mem(regs::SP as u32, 0),
                ArgLoc::Reg { index: x(30), shift: 0 },
                mem(x(0), 16),
            ]
        );
        let a = parse_args("8@[x2, #:lo12:table+16]").unwrap();
        assert_eq!(a[0].loc, ArgLoc::Symbol { name: "table".into(), offset: 16 });
    }

    #[test]
    fn bad_specs_say_why() {
        let e = parse_args("8f@x1 4f@x2 8@[x3, #:lo12:gp]").unwrap_err();
        assert!(e.contains("floating-point"), "{e}");
        let e = parse_args("-8@[x3, #:lo12:.LANCHOR0]").unwrap_err();
        assert!(e.contains("section anchor"), "{e}");
        assert!(parse_args("3@x0").unwrap_err().contains("not 1, 2, 4 or 8"));
        assert!(parse_args("8@x31").unwrap_err().contains("cannot read the operand"));
        assert!(parse_args("8@pc").unwrap_err().contains("cannot read the operand"));
        assert!(parse_args("8@[w1, 8]").unwrap_err().contains("base register"));
        assert!(parse_args("8@[x1, w2, sxtw]").unwrap_err().contains("index register"));
        assert!(parse_args("8@[x1, x2, lsl #4]").unwrap_err().contains("lsl"));
        assert!(parse_args("8@[x1, #:got_lo12:g]").unwrap_err().contains("relocation operator"));
        assert!(parse_args("8@[x1, 8").unwrap_err().contains("missing `]`"));
    }
}
