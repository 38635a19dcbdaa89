//! The runtime library's functions (`compiler/rt/rt.c`) that compiled code
//! calls, with their arity. The library's bytes and symbol table come from
//! the build script.

include!(concat!(env!("OUT_DIR"), "/rt_symbols.rs"));

/// The runtime library's machine code (position independent; offsets in
/// [`RT_SYMBOLS`]).
pub const RT_CODE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rt.bin"));

macro_rules! rt_fns {
    ($($v:ident = $name:literal ($n:literal) $ret:literal),* $(,)?) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Rt { $($v),* }
        pub const ALL: &[Rt] = &[$(Rt::$v),*];
        impl Rt {
            pub fn name(self) -> &'static str {
                match self { $(Rt::$v => $name),* }
            }
            /// (number of i64 parameters, returns an i64)
            pub fn signature(self) -> (usize, bool) {
                match self { $(Rt::$v => ($n, $ret)),* }
            }
        }
    };
}

rt_fns! {
    Strcpy = "rt_strcpy"(3) false,
    Concat = "rt_concat"(4) false,
    Strcmp = "rt_strcmp"(2) true,
    Strlen = "rt_strlen"(1) true,
    Substr = "rt_substr"(5) false,
    Strpos = "rt_strpos"(2) true,
    StrReplace = "rt_str_replace"(5) false,
    Strtol = "rt_strtol"(2) true,
    Tokenize = "rt_tokenize"(5) false,
    TextStrn = "rt_text_strn"(5) false,
    Randint = "rt_randint"(2) true,
    Format = "rt_format"(5) true,
    Printf = "rt_printf"(6) false,
    Warn = "rt_warn"(3) false,
    Instant = "rt_instant"(3) false,
    Counter = "rt_counter"(4) false,
    NamedSpan = "rt_trace_span"(4) false,
    Span = "rt_span"(4) false,
    Ticks = "rt_ticks"(0) true,
    ItraceWait = "rt_itrace_wait"(3) false,
    Exit = "rt_exit"(2) false,
    FlightDump = "rt_flight_dump"(1) false,
    UserError = "rt_user_error"(4) false,
    ErrorMessage = "rt_error_message"(3) false,
    Report = "rt_report"(2) false,
    GstrLoad = "rt_gstr_load"(3) false,
    GstrStore = "rt_gstr_store"(3) false,
    StatAdd = "rt_stat_add"(3) false,
    StatClear = "rt_stat_clear"(2) false,
    StatGet = "rt_stat_get"(4) true,
    HistPrint = "rt_hist_print"(6) false,
    HistSprint = "rt_hist_sprint"(7) false,
    HistBucket = "rt_hist_bucket"(6) true,
    MapFind = "rt_map_find"(3) true,
    MapDelete = "rt_map_delete"(2) false,
    MapClear = "rt_map_clear"(1) false,
    MapCollect = "rt_map_collect"(5) true,
    MapSlot = "rt_map_slot"(2) true,
    UserInt = "rt_user_int"(4) true,
    UserString = "rt_user_string"(8) false,
    Execname = "rt_execname"(4) false,
    ThreadIndent = "rt_thread_indent"(5) false,
    NowNs = "rt_now_ns"(1) true,
    Cpu = "rt_cpu"(0) true,
    Arg = "rt_arg"(3) true,
    Register = "rt_register"(2) true,
    SetArg = "rt_set_arg"(3) false,
    SetRegister = "rt_set_register"(3) false,
    UserIntError = "rt_user_int_error"(7) true,
    SetUserInt = "rt_set_user_int"(7) false,
    Ubacktrace = "rt_ubacktrace"(5) false,
    PrintUbacktrace = "rt_print_ubacktrace"(5) false,
    SprintUbacktrace = "rt_sprint_ubacktrace"(5) false,
    Usymname = "rt_usymname"(4) false,
    Umodname = "rt_umodname"(6) false,
    Ucallers = "rt_ucallers"(6) false,
    SprintUsyms = "rt_sprint_usyms"(4) false,
    PrintUsyms = "rt_print_usyms"(6) false,
    ErrnoStr = "rt_errno_str"(3) false,
    UserStringUtf = "rt_user_string_utf"(8) false,
    ModuleBias = "rt_module_bias"(5) true,
    Fp = "rt_fp"(4) true,
    FpToString = "rt_fp_to_string"(4) false,
    StringToFp = "rt_string_to_fp"(4) true,
    CmdlineStr = "rt_cmdline_str"(4) false,
    Tid = "rt_tid"(1) true,
    Goid = "rt_goid"(2) true,
    Ppid = "rt_ppid"(2) true,
    Uid = "rt_uid"(2) true,
    RetPush = "rt_ret_push"(5) true,
    RetPop = "rt_ret_pop"(3) true,
    Enter = "rt_enter"(1) true,
    DlNotify = "rt_dlnotify"(2) false,
    Unwind = "rt_unwind"(2) false,
    ShardSum = "rt_shard_sum"(3) true,
    StatAddLocal = "rt_stat_add_local"(3) false,
    StatMerge = "rt_stat_merge"(6) false,
    StatClearAll = "rt_stat_clear_all"(5) false,
    ShardSet = "rt_shard_set"(4) false,
}

/// Offset of a runtime function in [`RT_CODE`].
pub fn offset(name: &str) -> Option<u32> {
    RT_SYMBOLS.iter().find(|s| s.0 == name).map(|s| s.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runtime_function_exists() {
        for f in ALL {
            assert!(offset(f.name()).is_some(), "{} is not in rt.c", f.name());
        }
        assert!(offset("rt_format").is_some());
    }
}
