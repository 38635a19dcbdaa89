//! The one definition of what crosses between the compiler, the compiled
//! code and the runtime (DESIGN.md invariant 5): the shared region's
//! `#[repr(C)]` layout with its magic and version ([`region`]), the encoded
//! printf formats ([`format`]), the compiled artifact ([`artifact`]), and the
//! C header the in-target runtime library is compiled against ([`c_header`]).

pub mod artifact;
pub mod format;
pub mod region;

use std::fmt::Write;

/// A C header with every constant and offset of [`region`] and [`format`],
/// generated from the Rust definitions so the two cannot drift apart.
pub fn c_header() -> String {
    use core::mem::offset_of;
    use region::*;
    let mut h = String::from("/* Generated from telco-abi (abi/src/lib.rs). Do not edit. */\n#pragma once\n");
    let mut def = |name: &str, v: u64| {
        let _ = writeln!(h, "#define {name} {v}ULL");
    };
    def("ABI_VERSION", u64::from(VERSION));
    for (n, v) in [
        ("H_ENABLED", offset_of!(Header, enabled)),
        ("H_EXIT", offset_of!(Header, exit_requested)),
        ("H_ERRORS", offset_of!(Header, errors)),
        ("H_SKIPPED", offset_of!(Header, skipped)),
        ("H_DROPPED", offset_of!(Header, dropped)),
        ("H_PID", offset_of!(Header, pid)),
        ("H_TSC_BASE", offset_of!(Header, tsc_base)),
        ("H_NS_BASE", offset_of!(Header, ns_base)),
        ("H_TSC_MULT", offset_of!(Header, tsc_mult)),
        ("H_TSC_SHIFT", offset_of!(Header, tsc_shift)),
        ("H_MAXSTRINGLEN", offset_of!(Header, maxstringlen)),
        ("H_RING_OFF", offset_of!(Header, ring_off)),
        ("H_EXECNAME", offset_of!(Header, execname)),
        ("H_UID", offset_of!(Header, uid)),
        ("H_PPID", offset_of!(Header, ppid)),
        ("H_PROBES_OFF", offset_of!(Header, probes_off)),
        ("H_INDENT_OFF", offset_of!(Header, indent_off)),
        ("INDENT_SLOTS", INDENT_SLOTS),
        ("IS_SIZE", core::mem::size_of::<IndentSlot>()),
        ("C_ADDR", offset_of!(Ctx, addr)),
        ("C_ENTRY", offset_of!(Ctx, entry)),
        ("C_REGS", offset_of!(Ctx, regs)),
        ("REG_RSP", offset_of!(SavedRegs, rsp)),
        ("REG_RBP", offset_of!(SavedRegs, rbp)),
        ("REG_RIP", offset_of!(SavedRegs, rip)),
        ("R_HEAD", offset_of!(RingHeader, head)),
        ("R_TAIL", offset_of!(RingHeader, tail)),
        ("R_SIZE", offset_of!(RingHeader, size)),
        ("R_DATA_OFF", offset_of!(RingHeader, data_off)),
        ("EV_HEADER_SIZE", EVENT_HEADER_SIZE),
        ("E_SIZE", offset_of!(EventHeader, size)),
        ("E_KIND", offset_of!(EventHeader, kind)),
        ("E_PROBE", offset_of!(EventHeader, probe)),
        ("E_TID", offset_of!(EventHeader, tid)),
        ("E_AUX", offset_of!(EventHeader, aux)),
        ("E_TS", offset_of!(EventHeader, ts)),
        ("HIST_EVENT_SIZE", core::mem::size_of::<HistEvent>()),
        ("LOCKED_STR_HEADER", LOCKED_STR_HEADER),
        ("STAT_HEADER", STAT_HEADER),
        ("S_COUNT", offset_of!(Stat, count)),
        ("S_SUM", offset_of!(Stat, sum)),
        ("S_MIN", offset_of!(Stat, min)),
        ("S_MAX", offset_of!(Stat, max)),
        ("S_SUMSQ", offset_of!(Stat, sumsq)),
        ("SD_NHISTS", offset_of!(StatDesc, nhists)),
        ("SD_HISTS", offset_of!(StatDesc, hists)),
        ("HS_SIZE", core::mem::size_of::<HistSpec>()),
        ("HS_KIND", offset_of!(HistSpec, kind)),
        ("HS_NBUCKETS", offset_of!(HistSpec, nbuckets)),
        ("HS_LO", offset_of!(HistSpec, lo)),
        ("HS_HI", offset_of!(HistSpec, hi)),
        ("HS_STEP", offset_of!(HistSpec, step)),
        ("HS_OFFSET", offset_of!(HistSpec, offset)),
        ("T_LOCK", offset_of!(TableHeader, lock)),
        ("T_NKEYS", offset_of!(TableHeader, nkeys)),
        ("T_KEY_KINDS", offset_of!(TableHeader, key_kinds)),
        ("T_VALUE_KIND", offset_of!(TableHeader, value_kind)),
        ("T_CAPACITY", offset_of!(TableHeader, capacity)),
        ("T_NSLOTS", offset_of!(TableHeader, nslots)),
        ("T_SLOT_SIZE", offset_of!(TableHeader, slot_size)),
        ("T_VALUE_OFF", offset_of!(TableHeader, value_off)),
        ("T_KEY_OFF", offset_of!(TableHeader, key_off)),
        ("T_COUNT", offset_of!(TableHeader, count)),
        ("T_ORDER", offset_of!(TableHeader, order)),
        ("T_STAT_DESC", offset_of!(TableHeader, stat_desc)),
        ("T_MAXSTRINGLEN", offset_of!(TableHeader, maxstringlen)),
        ("TABLE_HEADER_SIZE", TABLE_HEADER_SIZE),
        ("SL_SEQ", offset_of!(SlotHeader, seq)),
        ("SL_STATE", offset_of!(SlotHeader, state)),
        ("SL_ORDER", offset_of!(SlotHeader, order)),
        ("C_PROBE", offset_of!(Ctx, probe)),
        ("C_FLAGS", offset_of!(Ctx, flags)),
        ("C_ACTIONS", offset_of!(Ctx, actions)),
        ("C_NESTING", offset_of!(Ctx, nesting)),
        ("C_ERROR", offset_of!(Ctx, error)),
        ("C_ERROR_LOC", offset_of!(Ctx, error_loc)),
        ("C_TID", offset_of!(Ctx, tid)),
        ("C_PID", offset_of!(Ctx, pid)),
        ("C_TOK_POS", offset_of!(Ctx, tok_pos)),
        ("CTX_SIZE", CTX_SIZE),
    ] {
        def(n, v as u64);
    }
    for (n, v) in [
        ("COMMITTED", u64::from(COMMITTED)),
        ("EV_PAD", u64::from(EV_PAD)),
        ("EV_PRINTF", u64::from(EV_PRINTF)),
        ("EV_ERROR", u64::from(EV_ERROR)),
        ("EV_WARN", u64::from(EV_WARN)),
        ("EV_EXIT", u64::from(EV_EXIT)),
        ("EV_HIST", u64::from(EV_HIST)),
        ("EV_INSTANT", u64::from(EV_INSTANT)),
        ("EV_COUNTER", u64::from(EV_COUNTER)),
        ("HIST_LOG", u64::from(HIST_LOG)),
        ("HIST_LINEAR", u64::from(HIST_LINEAR)),
        ("HIST_LOG_BUCKETS", u64::from(HIST_LOG_BUCKETS)),
        ("HIST_LOG_BUCKET0", u64::from(HIST_LOG_BUCKET0)),
        ("KIND_LONG", u64::from(KIND_LONG)),
        ("KIND_STRING", u64::from(KIND_STRING)),
        ("KIND_STAT", u64::from(KIND_STAT)),
        ("SLOT_EMPTY", u64::from(SLOT_EMPTY)),
        ("SLOT_LIVE", u64::from(SLOT_LIVE)),
        ("SLOT_DEAD", u64::from(SLOT_DEAD)),
        ("CTX_MAY_WAIT", u64::from(CTX_MAY_WAIT)),
        ("ERR_DIV0", u64::from(ERR_DIV0)),
        ("ERR_MAXACTION", u64::from(ERR_MAXACTION)),
        ("ERR_OVERFLOW", u64::from(ERR_OVERFLOW)),
        ("ERR_NESTING", u64::from(ERR_NESTING)),
        ("ERR_USER", u64::from(ERR_USER)),
        ("ERR_EMPTY_AGG", u64::from(ERR_EMPTY_AGG)),
        ("ERR_FAULT", u64::from(ERR_FAULT)),
        ("FMT_END", u64::from(format::FMT_END)),
        ("FMT_TEXT", u64::from(format::FMT_TEXT)),
        ("FMT_CONV", u64::from(format::FMT_CONV)),
        ("CONV_SIGNED", u64::from(format::CONV_SIGNED)),
        ("CONV_UNSIGNED", u64::from(format::CONV_UNSIGNED)),
        ("CONV_HEX", u64::from(format::CONV_HEX)),
        ("CONV_HEX_UPPER", u64::from(format::CONV_HEX_UPPER)),
        ("CONV_OCTAL", u64::from(format::CONV_OCTAL)),
        ("CONV_CHAR", u64::from(format::CONV_CHAR)),
        ("CONV_POINTER", u64::from(format::CONV_POINTER)),
        ("CONV_STRING", u64::from(format::CONV_STRING)),
        ("FLAG_LEFT", u64::from(format::FLAG_LEFT)),
        ("FLAG_PLUS", u64::from(format::FLAG_PLUS)),
        ("FLAG_SPACE", u64::from(format::FLAG_SPACE)),
        ("FLAG_ZERO", u64::from(format::FLAG_ZERO)),
        ("FLAG_ALT", u64::from(format::FLAG_ALT)),
    ] {
        def(n, v);
    }
    let _ = writeln!(h, "#define COUNT_NONE ({})", format::COUNT_NONE);
    let _ = writeln!(h, "#define COUNT_ARG ({})", format::COUNT_ARG);
    h
}
