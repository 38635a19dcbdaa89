//! Built-in functions: their names, argument and result types.
//!
//! The runtime provides each of them; pass 2 only needs their signatures.

use crate::program::Ty;

macro_rules! builtins {
    ($( $variant:ident = $name:literal ($($arg:ident),* $(; $var:ident)?) $(+ $opt:ident)* -> $ret:ident ),* $(,)?) => {
        /// A built-in function.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Builtin { $($variant),* }

        /// Every built-in with its signature.
        pub const BUILTINS: &[Signature] = &[
            $(Signature {
                builtin: Builtin::$variant,
                name: $name,
                args: &[$(Ty::$arg),*],
                optional: &[$(Ty::$opt),*],
                varargs: builtins!(@var $($var)?),
                ret: Ty::$ret,
            }),*
        ];
    };
    (@var) => { false };
    (@var $v:ident) => { true };
}

/// What a built-in takes and gives.
#[derive(Debug)]
pub struct Signature {
    pub builtin: Builtin,
    pub name: &'static str,
    pub args: &'static [Ty],
    /// Optional trailing arguments.
    pub optional: &'static [Ty],
    /// Any number of further arguments of any printable type (`printf`).
    pub varargs: bool,
    pub ret: Ty,
}

builtins! {
    // Output.
    Printf = "printf"(String; any) -> Void,
    Sprintf = "sprintf"(String; any) -> String,
    // Internal: `$v$`, `$$vars` and friends, formatted as sprintf formats,
    // and printed directly by print/println (no MAXSTRINGLEN string).
    PrettyText = "__pretty_text"(String; any) -> String,
    Print = "print"(; any) -> Void,
    Println = "println"(; any) -> Void,
    // `printd(delimiter, ...)`: the values with the (literal) delimiter
    // between them; `printdln` ends the line.
    Printd = "printd"(String; any) -> Void,
    Printdln = "printdln"(String; any) -> Void,
    PrintChar = "print_char"(Long) -> Void,
    Sprint = "sprint"(; any) -> String,
    Sprintln = "sprintln"(; any) -> String,
    // Context.
    Pid = "pid"() -> Long,
    Tid = "tid"() -> Long,
    Ppid = "ppid"() -> Long,
    Target = "target"() -> Long,
    Uid = "uid"() -> Long,
    Cpu = "cpu"() -> Long,
    Execname = "execname"() -> String,
    Pp = "pp"() -> String,
    Ppfunc = "ppfunc"() -> String,
    Probefunc = "probefunc"() -> String,
    Uaddr = "uaddr"() -> Long,
    // The goroutine's id in a probe on a Go function; 0 elsewhere.
    Goid = "goid"() -> Long,
    Register = "register"(String) -> Long,
    // Arguments and the return value by C type (SystemTap's DWARF-less
    // conversions): argument n from its register or stack slot, the low
    // bits sign- or zero-extended.
    IntArg = "int_arg"(Long) -> Long,
    UintArg = "uint_arg"(Long) -> Long,
    LongArg = "long_arg"(Long) -> Long,
    UlongArg = "ulong_arg"(Long) -> Long,
    LonglongArg = "longlong_arg"(Long) -> Long,
    UlonglongArg = "ulonglong_arg"(Long) -> Long,
    S32Arg = "s32_arg"(Long) -> Long,
    U32Arg = "u32_arg"(Long) -> Long,
    S64Arg = "s64_arg"(Long) -> Long,
    U64Arg = "u64_arg"(Long) -> Long,
    PointerArg = "pointer_arg"(Long) -> Long,
    Returnval = "returnval"() -> Long,
    // Internal: a `process.blocked` probe's `$duration` (ns) and `$syscall`.
    WaitNs = "__wait_ns"() -> Long,
    WaitName = "__wait_name"() -> String,
    // A value's low bits as a C type (SystemTap's aux tapset).
    Int32 = "__int32"(Long) -> Long,
    Uint32 = "__uint32"(Long) -> Long,
    Short = "__short"(Long) -> Long,
    Ushort = "__ushort"(Long) -> Long,
    // Time.
    GettimeofdayNs = "gettimeofday_ns"() -> Long,
    GettimeofdayUs = "gettimeofday_us"() -> Long,
    GettimeofdayMs = "gettimeofday_ms"() -> Long,
    GettimeofdayS = "gettimeofday_s"() -> Long,
    // Target memory, fault-safe.
    UserString = "user_string"(Long) + String -> String,
    UserStringN = "user_string_n"(Long, Long) + String -> String,
    UserStringUtf16 = "user_string_utf16"(Long) + String -> String,
    UserStringUtf32 = "user_string_utf32"(Long) + String -> String,
    // Internal: the load bias of a module `@var` names in a script
    // function (its index in the probe table), from the calling probe.
    ModuleBias = "__module_bias"(Long) -> Long,
    // Floating point (64-bit values in longs): the floatingpoint tapset's
    // operations by number (`__fp`), and its conversions from and to text.
    Fp = "__fp"(Long, Long, Long, Long) -> Long,
    FpToString = "fp_to_string"(Long, Long) -> String,
    StringToFp = "string_to_fp"(String) -> Long,
    // Internal: the calling probe's link-time address (the probe table's).
    ProbeLink = "__probe_link"() -> Long,
    UserChar = "user_char"(Long) -> Long,
    UserShort = "user_short"(Long) -> Long,
    UserInt = "user_int"(Long) -> Long,
    UserLong = "user_long"(Long) -> Long,
    UserInt8 = "user_int8"(Long) -> Long,
    UserInt16 = "user_int16"(Long) -> Long,
    UserInt32 = "user_int32"(Long) -> Long,
    UserInt64 = "user_int64"(Long) -> Long,
    UserUint8 = "user_uint8"(Long) -> Long,
    UserUint16 = "user_uint16"(Long) -> Long,
    UserUint32 = "user_uint32"(Long) -> Long,
    UserUint64 = "user_uint64"(Long) -> Long,
    // The same, but a fault is an error (what `$p->field` reads with).
    UserCharError = "user_char_error"(Long) -> Long,
    UserShortError = "user_short_error"(Long) -> Long,
    UserIntError = "user_int_error"(Long) -> Long,
    UserLongError = "user_long_error"(Long) -> Long,
    UserInt8Error = "user_int8_error"(Long) -> Long,
    UserInt16Error = "user_int16_error"(Long) -> Long,
    UserInt32Error = "user_int32_error"(Long) -> Long,
    UserInt64Error = "user_int64_error"(Long) -> Long,
    UserUint8Error = "user_uint8_error"(Long) -> Long,
    UserUint16Error = "user_uint16_error"(Long) -> Long,
    UserUint32Error = "user_uint32_error"(Long) -> Long,
    UserUint64Error = "user_uint64_error"(Long) -> Long,
    // Guru mode: writes into the target's memory (a fault is an error).
    SetUserChar = "set_user_char"(Long, Long) -> Void,
    SetUserShort = "set_user_short"(Long, Long) -> Void,
    SetUserInt = "set_user_int"(Long, Long) -> Void,
    SetUserLong = "set_user_long"(Long, Long) -> Void,
    SetUserInt8 = "set_user_int8"(Long, Long) -> Void,
    SetUserInt16 = "set_user_int16"(Long, Long) -> Void,
    SetUserInt32 = "set_user_int32"(Long, Long) -> Void,
    SetUserInt64 = "set_user_int64"(Long, Long) -> Void,
    SetUserPointer = "set_user_pointer"(Long, Long) -> Void,
    // Stacks and symbols.
    Ubacktrace = "ubacktrace"() -> String,
    PrintUbacktrace = "print_ubacktrace"() -> Void,
    SprintUbacktrace = "sprint_ubacktrace"() -> String,
    Usymname = "usymname"(Long) -> String,
    Umodname = "umodname"(Long) -> String,
    Ucallers = "ucallers"(Long) -> String,
    SprintUsyms = "sprint_usyms"(String) -> String,
    PrintUsyms = "print_usyms"(String) -> Void,
    ErrnoStr = "errno_str"(Long) -> String,
    CmdlineStr = "cmdline_str"() -> String,
    // Strings.
    Strlen = "strlen"(String) -> Long,
    Substr = "substr"(String, Long, Long) -> String,
    Isinstr = "isinstr"(String, String) -> Long,
    Strpos = "strpos"(String, String) -> Long,
    StrReplace = "str_replace"(String, String, String) -> String,
    Strtol = "strtol"(String, Long) -> Long,
    Tokenize = "tokenize"(String, String) -> String,
    TextStr = "text_str"(String) -> String,
    TextStrn = "text_strn"(String, Long, Long) -> String,
    Stringat = "stringat"(String, Long) -> Long,
    Randint = "randint"(Long) -> Long,
    // Control.
    Exit = "exit"() -> Void,
    Error = "error"(String) -> Void,
    Warn = "warn"(String) -> Void,
    Assert = "assert"(Long) + String -> Void,
    ThreadIndent = "thread_indent"(Long) -> String,
    // Chrome trace output.
    TraceInstant = "trace_instant"(String) -> Void,
    TraceCounter = "trace_counter"(String, Long) -> Void,
    TraceSpanNamed = "trace_span"(String, Long) -> Void,
    FlightDump = "flight_dump"() -> Void,
    // Internal (not callable by name): the return side `--chrome` adds to
    // every probed function, span(entry clock), and its clock (TSC ticks).
    TraceSpan = "__telco_span"(Long) -> Void,
    TraceTicks = "__telco_ticks"() -> Long,
    // A duration in TSC ticks in ns (`codegen::durations_in_ticks`).
    TicksNs = "__telco_ticks_ns"(Long) -> Long,
    // The runtime error `msg` where a value is wanted (a variable's value
    // that none of the cases known gives).
    ErrorValue = "__telco_error_value"(String) -> Long,
}

pub fn lookup(name: &str) -> Option<&'static Signature> {
    BUILTINS.iter().find(|s| s.name == name && !s.name.starts_with("__telco"))
}

impl Builtin {
    pub fn signature(self) -> &'static Signature {
        // Every variant has exactly one entry, in declaration order.
        &BUILTINS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.signature().name
    }

    /// A read that faults as an error: (size in bytes, signed).
    pub fn user_read_error(self) -> Option<(i64, bool)> {
        use Builtin as B;
        Some(match self {
            B::UserCharError | B::UserInt8Error => (1, true),
            B::UserShortError | B::UserInt16Error => (2, true),
            B::UserIntError | B::UserInt32Error => (4, true),
            B::UserLongError | B::UserInt64Error | B::UserUint64Error => (8, true),
            B::UserUint8Error => (1, false),
            B::UserUint16Error => (2, false),
            B::UserUint32Error => (4, false),
            _ => return None,
        })
    }

    /// A guru-mode write into the target's memory: its size in bytes.
    pub fn user_write(self) -> Option<i64> {
        use Builtin as B;
        Some(match self {
            B::SetUserChar | B::SetUserInt8 => 1,
            B::SetUserShort | B::SetUserInt16 => 2,
            B::SetUserInt | B::SetUserInt32 => 4,
            B::SetUserLong | B::SetUserInt64 | B::SetUserPointer => 8,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_declaration_order() {
        for (i, s) in BUILTINS.iter().enumerate() {
            assert_eq!(s.builtin as usize, i, "{}", s.name);
        }
        assert_eq!(lookup("printf").map(|s| s.builtin), Some(Builtin::Printf));
        assert!(lookup("nope").is_none());
    }
}
