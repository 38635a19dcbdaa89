/*
 * The runtime library of compiled probe handlers.
 *
 * Compiled into position-independent machine code by compiler/build.rs and
 * linked by pass 4 into every blob, so it runs wherever the handlers run:
 * inside target threads (function probes) and in the tracer (begin, end,
 * timer probes). It follows the layout of the shared region defined once in
 * telco-abi (abi/src/region.rs); `abi.h` is generated from it.
 *
 * Rules for this file, checked by build.rs where possible:
 * - no libc, no static or global data (the blob is read-only code shared
 *   by every thread), no absolute addresses (everything is RIP-relative or
 *   an offset from the region base);
 * - every address or bound comes from the trusted mirror (TR) or from the
 *   compiled code, never from the region, which other processes of the
 *   session may write; every wait on a word of the region is bounded;
 * - never fault: target memory is read only through process_vm_readv;
 * - never block: shared structures use the atomic protocols documented on
 *   the types in abi/src/region.rs; every ordering below names its partner;
 * - general-purpose registers only (-mgeneral-regs-only), so trampolines need
 *   not save vector state.
 *
 * Strings are NUL-terminated byte arrays of at most `cap` bytes including
 * the NUL (cap = MAXSTRINGLEN); every write truncates, none overflows.
 */
#include "abi.h"

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;
typedef u64 usize;

#define EXPORT __attribute__((visibility("hidden"), used, noinline))
#define LOCAL static __attribute__((always_inline)) inline
#define AT(p, off, T) (*(T *)((u8 *)(p) + (off)))
/* The trusted mirror of a place in the region (abi/src/region.rs,
 * MIRROR_GAP): the same offset in the mapping below the region that no
 * process of the session can write. Every address and every bound this
 * file uses (the header's layout fields, the ring's geometry, an array's
 * geometry) comes from there; the region itself holds data only, which
 * another process sharing it may have forged, so nothing read from it
 * decides where a write or a read goes (INTERNALS.md, invariant 6). */
#define TR(p) ((u8 *)(p) - (i64)MIRROR_GAP)

/* The architecture's few lines: clock, thread pointer, system calls,
 * signal context (rt/arch/<arch>.h, chosen by build.rs). */
#include ARCH_HEADER

/* ---- memory primitives (the compiler may emit calls to these) ---- */

EXPORT void *memcpy(void *d, const void *s, usize n) {
    u8 *dp = d;
    const u8 *sp = s;
    while (n--) *dp++ = *sp++;
    return d;
}

EXPORT void *memmove(void *d, const void *s, usize n) {
    u8 *dp = d;
    const u8 *sp = s;
    if (dp == sp || n == 0) return d;
    if (dp < sp) {
        while (n--) *dp++ = *sp++;
    } else {
        dp += n;
        sp += n;
        while (n--) *--dp = *--sp;
    }
    return d;
}

EXPORT void *memset(void *d, int c, usize n) {
    u8 *dp = d;
    while (n--) *dp++ = (u8)c;
    return d;
}

LOCAL usize strnlen_(const char *s, usize max) {
    usize n = 0;
    while (n < max && s[n]) n++;
    return n;
}


/* ---- time ---- */

/* Nanoseconds of the realtime clock, from the TSC and the tracer's
 * calibration (header fields written once before handlers run). */
EXPORT i64 rt_now_ns(u8 *R) {
    /* From the mirror: the bounded waits below time themselves with this
     * clock, which a process writing the region must not stop. */
    u64 tsc = read_clock();
    u64 base = AT(TR(R), H_TSC_BASE, u64);
    u64 mult = AT(TR(R), H_TSC_MULT, u64);
    u32 shift = AT(TR(R), H_TSC_SHIFT, u32) & 63;
    u64 d = tsc - base;
    /* 128-bit product: the TSC delta times a 32.32 multiplier. */
    unsigned __int128 p = (unsigned __int128)d * mult;
    return (i64)(AT(TR(R), H_NS_BASE, u64) + (u64)(p >> shift));
}

/* The CPU this thread runs on: Linux keeps it in TSC_AUX. */
EXPORT i64 rt_cpu(void) { return current_cpu(); }

/* ---- strings ---- */

EXPORT void rt_strcpy(char *dst, const char *src, i64 cap) {
    usize n = strnlen_(src, (usize)cap - 1);
    memmove(dst, src, n);
    dst[n] = 0;
}

/* dst = a . b; dst may be a or b (or both). */
EXPORT void rt_concat(char *dst, const char *a, const char *b, i64 cap) {
    usize la = strnlen_(a, (usize)cap - 1);
    usize lb = strnlen_(b, (usize)cap - 1);
    if (lb > (usize)cap - 1 - la) lb = (usize)cap - 1 - la;
    memmove(dst + la, b, lb);
    memmove(dst, a, la);
    dst[la + lb] = 0;
}

EXPORT i64 rt_strcmp(const char *a, const char *b) {
    const u8 *x = (const u8 *)a, *y = (const u8 *)b;
    while (*x && *x == *y) {
        x++;
        y++;
    }
    return (i64)*x - (i64)*y;
}

EXPORT i64 rt_strlen(const char *s) { return (i64)strnlen_(s, (usize)-1); }

EXPORT void rt_substr(char *dst, const char *s, i64 start, i64 len, i64 cap) {
    i64 n = (i64)strnlen_(s, (usize)cap - 1);
    if (start < 0 || start >= n || len <= 0) {
        dst[0] = 0;
        return;
    }
    if (len > n - start) len = n - start;
    memmove(dst, s + start, (usize)len);
    dst[len] = 0;
}

/* Index of the first `sub` in `s`, or -1. */
EXPORT i64 rt_strpos(const char *s, const char *sub) {
    for (i64 i = 0;; i++) {
        i64 j = 0;
        while (sub[j] && s[i + j] == sub[j]) j++;
        if (!sub[j]) return i;
        if (!s[i]) return -1;
    }
}

/* dst (a buffer distinct from the inputs) = s with every `find` replaced. */
EXPORT void rt_str_replace(char *dst, const char *s, const char *find, const char *repl, i64 cap) {
    usize lf = strnlen_(find, (usize)cap), lr = strnlen_(repl, (usize)cap), o = 0, max = (usize)cap - 1;
    if (lf == 0) {
        rt_strcpy(dst, s, cap);
        return;
    }
    while (*s && o < max) {
        usize j = 0;
        while (j < lf && s[j] == find[j]) j++;
        if (j == lf) {
            for (usize k = 0; k < lr && o < max; k++) dst[o++] = repl[k];
            s += lf;
        } else {
            dst[o++] = *s++;
        }
    }
    dst[o] = 0;
}

/* Linux's simple_strtol, as SystemTap's strtol: optional '-', base 0
 * detects 0x and 0 prefixes, base 16 accepts 0x, stops at the first
 * invalid character; never an error. */
EXPORT i64 rt_strtol(const char *s, i64 base) {
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    if (base == 0) {
        if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && s[2]) {
            base = 16;
            s += 2;
        } else if (s[0] == '0') {
            base = 8;
        } else {
            base = 10;
        }
    } else if (base == 16 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        s += 2;
    }
    if (base < 2 || base > 36) return 0;
    u64 v = 0;
    for (;; s++) {
        int d;
        u8 c = (u8)*s;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
        else break;
        if (d >= base) break;
        v = v * (u64)base + (u64)d;
    }
    return neg ? -(i64)v : (i64)v;
}

/* tokenize(s, delim): a non-empty s restarts on a copy of s kept in the
 * context; "" continues. Empty tokens are skipped, "" when none are left. */
EXPORT void rt_tokenize(char *dst, const char *s, const char *delim, u8 *ctx, i64 cap) {
    char *saved = (char *)ctx + CTX_SIZE + cap;
    if (s[0]) {
        rt_strcpy(saved, s, cap);
        AT(ctx, C_TOK_POS, u64) = 0;
    }
    u64 pos = AT(ctx, C_TOK_POS, u64);
    if (pos >= (u64)cap) pos = (u64)cap - 1;
    for (;;) {
        if (!saved[pos]) {
            dst[0] = 0;
            AT(ctx, C_TOK_POS, u64) = pos;
            return;
        }
        u64 start = pos;
        while (saved[pos]) {
            int is_delim = 0;
            for (const char *d = delim; *d; d++)
                if (*d == saved[pos]) is_delim = 1;
            if (is_delim) break;
            pos++;
        }
        u64 end = pos;
        if (saved[pos]) pos++;
        if (end > start) {
            memmove(dst, saved + start, end - start);
            dst[end - start] = 0;
            AT(ctx, C_TOK_POS, u64) = pos;
            return;
        }
    }
}

LOCAL int put(char *dst, usize *o, usize max, const char *s, usize n) {
    if (*o + n > max) return 0;
    memcpy(dst + *o, s, n);
    *o += n;
    return 1;
}

/* One character of UTF-8 at s (at most `left` bytes): its code point and
 * length. A sequence that is not well-formed (overlong, a surrogate, past
 * U+10FFFF, a bad continuation, cut short) is its first byte alone. */
LOCAL usize utf8_char(const u8 *s, usize left, u32 *code) {
    u8 b = s[0];
    usize n;
    u32 c;
    if ((b & 0xe0) == 0xc0 && left >= 2) {
        n = 2;
        c = b & 0x1f;
    } else if ((b & 0xf0) == 0xe0 && left >= 3) {
        n = 3;
        c = b & 0x0f;
    } else if ((b & 0xf8) == 0xf0 && left >= 4) {
        n = 4;
        c = b & 0x07;
    } else {
        *code = b;
        return 1;
    }
    for (usize i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *code = b;
            return 1;
        }
        c = (c << 6) | (s[i] & 0x3f);
    }
    if ((c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff || c < 0x80 || (n == 3 && c < 0x800) ||
        (n == 4 && c < 0x10000)) {
        *code = b;
        return 1;
    }
    *code = c;
    return n;
}

/* text_strn(s, len, quoted), and text_str(s) as text_strn(s, 0, 0), as
 * SystemTap writes them: printable ASCII as it is; `"`, `\` and \a \b \f
 * \n \r \t \v as C escapes; UTF-8 as \uXXXX or \UXXXXXXXX; any other
 * byte as \ooo. At most `len` bytes (0 or out of range: the string size);
 * an escape that does not fit is left out whole. `quoted`: in double
 * quotes, and a string cut short ends `"...` (the cut moved back over an
 * escape it would split). */
EXPORT void rt_text_strn(char *dst, const char *src, i64 len, i64 quoted, i64 cap) {
    static const char hex[] = "0123456789ABCDEF";
    const u8 *s = (const u8 *)src;
    i64 max = cap - 1;
    i64 room = (len <= 0 || len > max) ? max : len;
    usize left = strnlen_(src, (usize)max);
    char *out = dst;
    char *esc = 0; /* the first escape a cut could split */
    i64 esc_len = 0;
    u32 c = 0;
    if (quoted) {
        room = (room < 5 ? 5 : room) - 2;
        *out++ = '"';
    }
    while (left > 0) {
        usize n = utf8_char(s, left, &c);
        i64 num = 1;
        if (c == 0 || room <= 0) break;
        if (n > 1) {
            num = c <= 0xffff ? 6 : 10;
        } else if (c >= 32 && c < 127 && c != '"' && c != '\\') {
            num = 1;
        } else {
            switch (c) {
            case '\a': case '\b': case '\f': case '\n': case '\r': case '\t': case '\v': case '"': case '\\':
                num = 2;
                break;
            default:
                num = 4;
            }
        }
        if (num > 1 && !esc && room - 3 < num) {
            esc = out;
            esc_len = num;
        }
        if (room < num) break;
        s += n;
        left -= n;
        if (n > 1) {
            *out++ = '\\';
            *out++ = c <= 0xffff ? 'u' : 'U';
            for (i64 i = num - 3; i >= 0; i--) *out++ = hex[(c >> (i * 4)) & 0xf];
        } else if (num == 1) {
            *out++ = (char)c;
        } else {
            *out++ = '\\';
            switch (c) {
            case '\a': *out++ = 'a'; break;
            case '\b': *out++ = 'b'; break;
            case '\f': *out++ = 'f'; break;
            case '\n': *out++ = 'n'; break;
            case '\r': *out++ = 'r'; break;
            case '\t': *out++ = 't'; break;
            case '\v': *out++ = 'v'; break;
            case '"': *out++ = '"'; break;
            case '\\': *out++ = '\\'; break;
            default:
                *out++ = (char)('0' + ((c >> 6) & 3));
                *out++ = (char)('0' + ((c >> 3) & 7));
                *out++ = (char)('0' + (c & 7));
            }
        }
        room -= num;
    }
    if (quoted) {
        if (c && left > 0) {
            char *cut = out - 3 + room;
            out = (esc && esc < cut && cut < esc + esc_len) ? esc : cut;
            *out++ = '"';
            *out++ = '.';
            *out++ = '.';
            *out++ = '.';
        } else {
            *out++ = '"';
        }
    }
    *out = 0;
}

/* randint(n): a number in [0, n), n at most 2^20 (else -1: the caller
 * raises SystemTap's "range too wide"). Not for cryptography: the clock
 * and the thread's context mixed (splitmix64). */
EXPORT i64 rt_randint(i64 n, i64 salt) {
    if ((u64)n > (1u << 20)) return -1;
    if (n == 0) return 0;
    u64 z = read_clock() + (u64)salt * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (i64)(z % (u64)n);
}

/* ---- formatting (printf, sprintf): SystemTap's conversions ---- */

struct out {
    char *buf;
    usize len, max;
};

LOCAL void out_c(struct out *o, char c) {
    if (o->len < o->max) o->buf[o->len] = c;
    o->len++;
}

LOCAL void out_pad(struct out *o, char c, i64 n) {
    while (n-- > 0) out_c(o, c);
}

static void fmt_number(struct out *o, i64 value, u8 kind, u8 flags, i64 width, i64 prec) {
    char digits[24];
    int nd = 0, base = 10, upper = 0;
    char sign = 0;
    const char *prefix = "";
    u64 v = (u64)value;
    if (kind == CONV_POINTER_LEGACY) {
        if (width < 0) width = 18;
        prec = width - 2;
        if (!(flags & FLAG_LEFT) && prec > 16) prec = 16;
        kind = CONV_POINTER;
    }
    if (kind == CONV_POINTER) {
        kind = CONV_HEX;
        flags |= FLAG_ALT;
    }
    if (kind == CONV_SIGNED) {
        if (value < 0) {
            sign = '-';
            v = 0 - (u64)value;
        } else if (flags & FLAG_PLUS) {
            sign = '+';
        } else if (flags & FLAG_SPACE) {
            sign = ' ';
        }
    } else if (kind == CONV_HEX || kind == CONV_HEX_UPPER) {
        base = 16;
        upper = kind == CONV_HEX_UPPER;
        if (flags & FLAG_ALT) prefix = upper ? "0X" : "0x";
    } else if (kind == CONV_OCTAL) {
        base = 8;
        if (flags & FLAG_ALT) prefix = "0";
    }
    do {
        u64 d = v % (u64)base;
        digits[nd++] = (char)(d < 10 ? '0' + d : (upper ? 'A' : 'a') + d - 10);
        v /= (u64)base;
    } while (v);
    if (prec < nd) prec = nd;
    i64 plen = 0;
    while (prefix[plen]) plen++;
    i64 pad = width - prec - plen - (sign ? 1 : 0);
    if (!(flags & (FLAG_LEFT | FLAG_ZERO))) out_pad(o, ' ', pad), pad = 0;
    if (sign) out_c(o, sign);
    for (i64 i = 0; i < plen; i++) out_c(o, prefix[i]);
    if (!(flags & FLAG_LEFT)) out_pad(o, '0', pad), pad = 0;
    out_pad(o, '0', prec - nd);
    while (nd) out_c(o, digits[--nd]);
    out_pad(o, ' ', pad);
}

LOCAL int i32_read(const u8 *p) { return (int)((u32)p[0] | (u32)p[1] << 8 | (u32)p[2] << 16 | (u32)p[3] << 24); }

/* Format `args` (longs, or pointers to NUL-terminated strings) by the
 * encoded format `fmt` into `out` (at most cap-1 bytes and a NUL). Returns
 * the length written. Widths and precisions from `*` arguments are clamped
 * to [0, cap] as SystemTap does. */
EXPORT i64 rt_format(char *buf, i64 cap, const u8 *fmt, const i64 *args, i64 nargs) {
    struct out o = {buf, 0, (usize)cap - 1};
    i64 ai = 0;
#define NEXT_ARG() (ai < nargs ? args[ai++] : 0)
    for (;;) {
        u8 tag = *fmt++;
        if (tag == FMT_TEXT) {
            u32 n = (u32)fmt[0] | (u32)fmt[1] << 8;
            fmt += 2;
            for (u32 i = 0; i < n; i++) out_c(&o, (char)fmt[i]);
            fmt += n;
        } else if (tag == FMT_CONV) {
            u8 kind = fmt[0], flags = fmt[1];
            i64 width = i32_read(fmt + 2), prec = i32_read(fmt + 6);
            fmt += 10;
            if (width == COUNT_ARG) {
                width = NEXT_ARG();
                if (width < 0) width = 0;
                if (width > cap) width = cap;
            }
            if (prec == COUNT_ARG) {
                prec = NEXT_ARG();
                if (prec < 0) prec = 0;
                if (prec > cap) prec = cap;
            }
            i64 a = NEXT_ARG();
            if (kind == CONV_STRING) {
                const char *s = (const char *)a;
                usize n = s ? strnlen_(s, prec >= 0 ? (usize)prec : (usize)-1) : 0;
                i64 pad = width - (i64)n;
                if (!(flags & FLAG_LEFT)) out_pad(&o, ' ', pad);
                for (usize i = 0; i < n; i++) out_c(&o, s[i]);
                if (flags & FLAG_LEFT) out_pad(&o, ' ', pad);
            } else if (kind == CONV_CHAR) {
                /* %#c escapes what is not printable ASCII, and ' and \. */
                char e[4];
                i64 n = 1;
                u8 c = (u8)a;
                e[0] = (char)c;
                if (flags & FLAG_ALT) {
                    char k = 0;
                    switch (c) {
                    case '\a': k = 'a'; break;
                    case '\b': k = 'b'; break;
                    case '\f': k = 'f'; break;
                    case '\n': k = 'n'; break;
                    case '\r': k = 'r'; break;
                    case '\t': k = 't'; break;
                    case '\v': k = 'v'; break;
                    case '\'': k = '\''; break;
                    case '\\': k = '\\'; break;
                    }
                    if (k) {
                        e[0] = '\\';
                        e[1] = k;
                        n = 2;
                    } else if (c < 32 || c >= 127) {
                        e[0] = '\\';
                        e[1] = (char)('0' + (c >> 6));
                        e[2] = (char)('0' + ((c >> 3) & 7));
                        e[3] = (char)('0' + (c & 7));
                        n = 4;
                    }
                }
                if (!(flags & FLAG_LEFT)) out_pad(&o, ' ', width - n);
                for (i64 i = 0; i < n; i++) out_c(&o, e[i]);
                if (flags & FLAG_LEFT) out_pad(&o, ' ', width - n);
            } else {
                fmt_number(&o, a, kind, flags, width, prec < 0 ? 0 : prec);
            }
        } else {
            break;
        }
    }
#undef NEXT_ARG
    usize n = o.len < o.max ? o.len : o.max;
    buf[n] = 0;
    return (i64)n;
}

/* ---- event ring (protocol: abi/src/region.rs, RingHeader) ---- */

LOCAL u8 *ring(u8 *R) { return R + AT(TR(R), H_RING_OFF, u64); }

/* Reserve `len` bytes (a multiple of 8) or return 0 and count a drop.
 * Tracer-side handlers (CTX_MAY_WAIT) wait for the consumer instead. */
static u8 *ring_reserve(u8 *R, u32 may_wait, u32 len) {
    u8 *rg = ring(R);
    u64 size = AT(TR(rg), R_SIZE, u64), mask = size - 1;
    u8 *data = R + AT(TR(rg), R_DATA_OFF, u64);
    u64 *headp = &AT(rg, R_HEAD, u64), *tailp = &AT(rg, R_TAIL, u64);
    if (len > size) goto drop;
    for (;;) {
        u64 head = __atomic_load_n(headp, __ATOMIC_RELAXED);
        /* Acquire: pairs with the consumer's Release store of tail, so the
         * bytes it freed (and zeroed) are visible before we write them. */
        u64 tail = __atomic_load_n(tailp, __ATOMIC_ACQUIRE);
        /* Masked by the mirror's size and aligned as records are: the
         * record and the padding before it stay in the data area whatever
         * head holds (a process sharing the region may have written it). */
        u64 off = head & mask & ~7ULL, contig = size - off, need = len;
        if (len > contig) need = contig + len;
        if (head + need - tail > size) {
            if (may_wait) {
                cpu_relax();
                continue;
            }
            goto drop;
        }
        /* AcqRel: orders our reservation with other producers'. */
        if (__atomic_compare_exchange_n(headp, &head, head + need, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            if (need != len) {
                /* Pad to the end of the data area; Release pairs with the
                 * consumer's Acquire load of the first word. */
                AT(data + off, E_KIND, u16) = EV_PAD;
                __atomic_store_n(&AT(data + off, E_SIZE, u32), (u32)contig | COMMITTED, __ATOMIC_RELEASE);
                off = 0;
            }
            return data + off;
        }
    }
drop:
    __atomic_fetch_add(&AT(R, H_DROPPED, u64), 1, __ATOMIC_RELAXED);
    return 0;
}

LOCAL void ring_commit(u8 *rec, u32 len) {
    /* Release: the record's contents before its committed size word; the
     * consumer loads the word with Acquire. */
    __atomic_store_n(&AT(rec, E_SIZE, u32), len | COMMITTED, __ATOMIC_RELEASE);
}

EXPORT i64 rt_tid(u8 *ctx);

static u8 *event_begin(u8 *R, u8 *ctx, u16 kind, u32 aux, u32 payload) {
    u32 len = (u32)((EV_HEADER_SIZE + payload + 7) & ~7ULL);
    u8 *rec = ring_reserve(R, AT(ctx, C_FLAGS, u32) & CTX_MAY_WAIT, len);
    if (!rec) return 0;
    AT(rec, E_KIND, u16) = kind;
    AT(rec, E_PROBE, u16) = (u16)AT(ctx, C_PROBE, u32);
    u8 *slot = (u8 *)AT(ctx, C_SLOT, u64);
    AT(rec, E_TID, u32) = slot ? AT(slot, TS_TID, u32) : (u32)rt_tid(ctx);
    AT(rec, E_AUX, u32) = aux;
    AT(rec, E_TS, u64) = (u64)rt_now_ns(R);
    return rec;
}

LOCAL u32 event_len(u32 payload) { return (u32)((EV_HEADER_SIZE + payload + 7) & ~7ULL); }

/* A string in a payload: u32 length, bytes, padded to 8. */
LOCAL u32 str_payload(const char *s, i64 cap) { return (u32)((4 + strnlen_(s, (usize)cap) + 7) & ~7ULL); }

LOCAL u8 *put_str(u8 *p, const char *s, i64 cap) {
    u32 n = (u32)strnlen_(s, (usize)cap);
    AT(p, 0, u32) = n;
    memcpy(p + 4, s, n);
    return p + ((4 + n + 7) & ~7U);
}

/* printf: the format id and the arguments; the tracer formats. */
EXPORT void rt_printf(u8 *R, u8 *ctx, i64 id, const u8 *kinds, const i64 *args, i64 nargs) {
    i64 cap = AT(TR(R), H_MAXSTRINGLEN, u32);
    u32 payload = 0;
    for (i64 i = 0; i < nargs; i++) payload += kinds[i] ? str_payload((const char *)args[i], cap) : 8;
    u8 *rec = event_begin(R, ctx, EV_PRINTF, (u32)id, payload);
    if (!rec) return;
    u8 *p = rec + EV_HEADER_SIZE;
    for (i64 i = 0; i < nargs; i++) {
        if (kinds[i]) {
            p = put_str(p, (const char *)args[i], cap);
        } else {
            AT(p, 0, i64) = args[i];
            p += 8;
        }
    }
    ring_commit(rec, event_len(payload));
}

static void emit_str(u8 *R, u8 *ctx, u16 kind, u32 aux, const char *s) {
    i64 cap = AT(TR(R), H_MAXSTRINGLEN, u32);
    u32 payload = str_payload(s, cap);
    u8 *rec = event_begin(R, ctx, kind, aux, payload);
    if (!rec) return;
    put_str(rec + EV_HEADER_SIZE, s, cap);
    ring_commit(rec, event_len(payload));
}

EXPORT void rt_warn(u8 *R, u8 *ctx, const char *msg) { emit_str(R, ctx, EV_WARN, 0, msg); }

EXPORT void rt_instant(u8 *R, u8 *ctx, const char *name) { emit_str(R, ctx, EV_INSTANT, 0, name); }

EXPORT void rt_counter(u8 *R, u8 *ctx, const char *name, i64 value) {
    i64 cap = AT(TR(R), H_MAXSTRINGLEN, u32);
    u32 payload = 8 + str_payload(name, cap);
    u8 *rec = event_begin(R, ctx, EV_COUNTER, 0, payload);
    if (!rec) return;
    AT(rec, EV_HEADER_SIZE, i64) = value;
    put_str(rec + EV_HEADER_SIZE + 8, name, cap);
    ring_commit(rec, event_len(payload));
}

/* trace_span(name, start_ns): a slice named by the script on the
 * thread's track, from start_ns (a gettimeofday_ns() value) to now,
 * unless shorter than --min-dur; the tracer turns the times into the
 * ticks calls are in. */
EXPORT void rt_trace_span(u8 *R, u8 *ctx, const char *name, i64 start_ns) {
    i64 now = rt_now_ns(R);
    if (start_ns > now) start_ns = now;
    unsigned __int128 min = (unsigned __int128)AT(TR(R), H_SPAN_MIN_TICKS, u64) * AT(TR(R), H_TSC_MULT, u64);
    if ((unsigned __int128)(now - start_ns) < (min >> (AT(TR(R), H_TSC_SHIFT, u32) & 63))) return;
    i64 cap = AT(TR(R), H_MAXSTRINGLEN, u32);
    u32 payload = 8 + str_payload(name, cap);
    u8 *rec = event_begin(R, ctx, EV_NAMED_SPAN, 0, payload);
    if (!rec) return;
    AT(rec, E_TS, u64) = (u64)now;
    AT(rec, EV_HEADER_SIZE, i64) = start_ns;
    put_str(rec + EV_HEADER_SIZE + 8, name, cap);
    ring_commit(rec, event_len(payload));
}

/* The TSC (--chrome spans are in ticks; the tracer converts). */
EXPORT i64 rt_ticks(void) { return (i64)read_clock(); }

/* Slot's span stage, full with `n` calls, goes into the ring as one
 * EV_SPANS record (or counts `n` drops); the stage is emptied. */
LOCAL void span_send(u8 *R, u8 *slot, u8 *st, u32 n) {
    u32 bytes = n * SPAN_ENTRY_SIZE;
    u32 chunks = AT(TR(R), H_FLIGHT_CHUNKS, u32);
    if (chunks) {
        /* Before the entries are overwritten (the flight recorder's
         * reader of a live stage checks `sent` after copying them). */
        AT(st, SG_SENT, u32) += 1;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        /* --flight-recorder: into the history's next chunk, the oldest
         * (taken in turn: one atomic add per stage), nothing sent. The
         * chunk is odd while written, even once whole (FlightChunk).
         * While a dump is due, one more stage a thread (its calls up to
         * the trigger), and the others dropped. */
        u64 hold = __atomic_load_n(&AT(R, H_FLIGHT_HOLD, u64), __ATOMIC_RELAXED);
        if (hold) {
            if (AT(slot, TS_FLIGHT_HOLD, u64) == hold) {
                __atomic_fetch_add(&AT(R, H_FLIGHT_UNKEPT, u64), n, __ATOMIC_RELAXED);
                AT(st, SG_COUNT, u32) = 0;
                return;
            }
            AT(slot, TS_FLIGHT_HOLD, u64) = hold;
        }
        u64 k = __atomic_fetch_add(&AT(R, H_FLIGHT_NEXT, u64), 1, __ATOMIC_RELAXED);
        u8 *c = R + AT(TR(R), H_FLIGHT_OFF, u64) + (k % chunks) * AT(TR(R), H_FLIGHT_STRIDE, u32);
        /* Claimed from even to odd: a thread still writing this chunk
         * (the history went round while it was preempted) keeps it, and
         * these calls are counted instead of mixed into its. */
        u64 was = __atomic_load_n(&AT(c, FC_SEQ, u64), __ATOMIC_RELAXED);
        if ((was & 1) || !__atomic_compare_exchange_n(&AT(c, FC_SEQ, u64), &was, 2 * k + 1, 0, __ATOMIC_ACQUIRE,
                                                      __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&AT(R, H_FLIGHT_UNKEPT, u64), n, __ATOMIC_RELAXED);
            AT(st, SG_COUNT, u32) = 0;
            return;
        }
        __atomic_thread_fence(__ATOMIC_RELEASE);
        AT(c, FC_TID, u32) = AT(slot, TS_TID, u32);
        AT(c, FC_COUNT, u32) = n;
        u64 *to = (u64 *)(c + FLIGHT_CHUNK_HEADER);
        const u64 *from = (const u64 *)(st + SPAN_STAGE_HEADER);
        for (u32 i = 0; i < bytes / 8; i++) to[i] = from[i];
        __atomic_store_n(&AT(c, FC_SEQ, u64), 2 * k + 2, __ATOMIC_RELEASE);
        AT(st, SG_COUNT, u32) = 0;
        return;
    }
    u8 *rec = ring_reserve(R, 0, EV_HEADER_SIZE + bytes);
    if (rec) {
        AT(rec, E_KIND, u16) = EV_SPANS;
        AT(rec, E_PROBE, u16) = 0;
        AT(rec, E_TID, u32) = AT(slot, TS_TID, u32);
        AT(rec, E_AUX, u32) = n;
        AT(rec, E_TS, u64) = AT(st, SPAN_STAGE_HEADER + SE_TS, u64);
        u64 *to = (u64 *)(rec + EV_HEADER_SIZE);
        const u64 *from = (const u64 *)(st + SPAN_STAGE_HEADER);
        for (u32 i = 0; i < bytes / 8; i++) to[i] = from[i];
        ring_commit(rec, EV_HEADER_SIZE + bytes);
        /* The next batch most likely goes right after this one: ask for
         * its lines now (for writing), so that copying it does not wait
         * for them. A prefetch never faults; past the data area it is
         * simply useless. */
        u8 *next = rec + EV_HEADER_SIZE + bytes;
        for (u32 i = 0; i < EV_HEADER_SIZE + bytes; i += 64) prefetch_for_write(&next[i]);
    } else {
        /* One record, `n` events: the drop count counts events. */
        __atomic_fetch_add(&AT(R, H_DROPPED, u64), n - 1, __ATOMIC_RELAXED);
    }
    AT(st, SG_COUNT, u32) = 0;
}

LOCAL u8 *span_stage(u8 *R, u8 *slot) {
    return R + AT(TR(R), H_SPANS_OFF, u64) + (u64)AT(slot, TS_INDEX, u32) * AT(TR(R), H_SPAN_STRIDE, u32);
}

/* A trampoline that records calls inline filled its thread's stage. */
EXPORT void rt_span_flush(u8 *R, u8 *slot) { span_send(R, slot, span_stage(R, slot), AT(TR(R), H_SPAN_BATCH, u32)); }

/* A probed function's call returns (--chrome): one call from `start`
 * (its entry's TSC) to now on the slot's thread, unless shorter than
 * H_SPAN_MIN_TICKS. No context: lean return trampolines leave most of it
 * unset. Lean trampolines do the same inline (trampoline.rs, `span_*`). */
EXPORT void rt_span(u8 *R, u8 *slot, i64 probe, i64 start) {
    i64 dur = (i64)read_clock() - start;
    if (dur < AT(TR(R), H_SPAN_MIN_TICKS, i64)) return;
    u32 batch = AT(TR(R), H_SPAN_BATCH, u32);
    if (slot && batch) {
        /* Staged in this thread's own stage (plain stores: only this
         * thread writes it while the session runs); a full stage goes
         * into the ring as one record. */
        u8 *st = span_stage(R, slot);
        u32 n = AT(st, SG_COUNT, u32);
        /* Never past the stage, whatever it holds (a forked child shares
         * its parent's slots). */
        if (n >= batch) n = 0;
        u8 *e = st + SPAN_STAGE_HEADER + (u64)n * SPAN_ENTRY_SIZE;
        AT(e, SE_TID, u32) = AT(slot, TS_TID, u32);
        AT(e, SE_PROBE, u32) = (u32)(u16)probe;
        AT(e, SE_TS, u64) = (u64)start;
        AT(e, SE_DUR, u64) = (u64)dur;
        if (++n < batch) {
            /* Release: the entry before the count that covers it (the
             * flight recorder reads a live stage). */
            __atomic_store_n(&AT(st, SG_COUNT, u32), n, __ATOMIC_RELEASE);
            return;
        }
        span_send(R, slot, st, n);
        return;
    }
    u32 len = EV_HEADER_SIZE + 8;
    u8 *rec = ring_reserve(R, 0, len);
    if (!rec) return;
    AT(rec, E_KIND, u16) = EV_SPAN;
    AT(rec, E_PROBE, u16) = (u16)probe;
    AT(rec, E_TID, u32) = slot ? AT(slot, TS_TID, u32) : 0;
    AT(rec, E_AUX, u32) = 0;
    AT(rec, E_TS, u64) = (u64)start;
    AT(rec, EV_HEADER_SIZE, i64) = dur;
    ring_commit(rec, len);
}

/* The flight recorder's history is kept as it is until the tracer has
 * read it (Header::flight_hold). */
LOCAL void flight_hold(u8 *R) {
    if (!AT(TR(R), H_FLIGHT_CHUNKS, u32)) return;
    __atomic_store_n(&AT(R, H_FLIGHT_AT, u64), read_clock(), __ATOMIC_RELAXED);
    u64 gen = __atomic_add_fetch(&AT(R, H_FLIGHT_GENS, u64), 1, __ATOMIC_RELAXED);
    __atomic_store_n(&AT(R, H_FLIGHT_HOLD, u64), gen ? gen : 1, __ATOMIC_RELEASE);
}

/* flight_dump(): the tracer writes the flight recorder's history (it
 * sees the count grow; the thread goes on at once). */
EXPORT void rt_flight_dump(u8 *R) {
    flight_hold(R);
    __atomic_fetch_add(&AT(R, H_FLIGHT_ASKS, u64), 1, __ATOMIC_RELEASE);
}

/* exit(): no handler starts after it returns, in any thread of any
 * process of the session (those already running finish), as in
 * SystemTap; the tracer runs the end probes once the targets' hooks are
 * out (it enables the region again for them). Release: pairs with the
 * handlers' Acquire load of `enabled` at entry. In the tracer's own
 * probes (CTX_MAY_WAIT) the tracer stops the targets' handlers itself,
 * and the other end probes still run after an exit() in one. */
EXPORT void rt_exit(u8 *R, u8 *ctx) {
    if (!(AT(ctx, C_FLAGS, u32) & CTX_MAY_WAIT)) __atomic_store_n(&AT(R, H_ENABLED, u32), 0, __ATOMIC_RELEASE);
    __atomic_store_n(&AT(R, H_EXIT, u32), 1, __ATOMIC_RELAXED);
    u8 *rec = event_begin(R, ctx, EV_EXIT, 0, 0);
    if (rec) ring_commit(rec, event_len(0));
}

/* ---- errors ---- */

/* error(msg) / assert: a user error with its message. */
EXPORT void rt_user_error(u8 *ctx, const char *msg, i64 loc, i64 cap) {
    if (AT(ctx, C_ERROR, u32)) return;
    rt_strcpy((char *)ctx + CTX_SIZE, msg, cap);
    AT(ctx, C_ERROR, u32) = ERR_USER;
    AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
}

/* The message a `catch (msg)` receives. */
EXPORT void rt_error_message(char *dst, u8 *ctx, i64 cap) {
    u32 code = AT(ctx, C_ERROR, u32);
    const char *m;
    switch (code) {
    case ERR_DIV0: m = "division by 0"; break;
    case ERR_MAXACTION: m = "MAXACTION exceeded"; break;
    case ERR_OVERFLOW: m = "Array overflow, check MAXMAPENTRIES"; break;
    case ERR_NESTING: m = "MAXNESTING exceeded"; break;
    case ERR_EMPTY_AGG: m = "empty aggregate"; break;
    case ERR_CORRUPT: m = "statistic damaged"; break;
    default: m = (const char *)ctx + CTX_SIZE; break;
    }
    rt_strcpy(dst, m, cap);
}

/* At the end of a handler with a pending error: count it and tell the tracer. */
EXPORT void rt_report(u8 *R, u8 *ctx) {
    u32 code = AT(ctx, C_ERROR, u32);
    if (!code) return;
    u64 errors = __atomic_add_fetch(&AT(R, H_ERRORS, u64), 1, __ATOMIC_RELAXED);
    /* Past MAXERRORS the session is over: stop every handler now (Release
     * pairs with the handlers' Acquire load of `enabled`). The tracer turns
     * it back on for its own error probes. */
    if (errors > AT(TR(R), H_MAXERRORS, u32)) __atomic_store_n(&AT(R, H_ENABLED, u32), 0, __ATOMIC_RELEASE);
    i64 cap = AT(TR(R), H_MAXSTRINGLEN, u32);
    const char *msg = (code == ERR_USER || code == ERR_FAULT) ? (const char *)ctx + CTX_SIZE : "";
    u32 payload = 4 + str_payload(msg, cap);
    u8 *rec = event_begin(R, ctx, EV_ERROR, AT(ctx, C_ERROR_LOC, u32), payload);
    if (!rec) return;
    AT(rec, EV_HEADER_SIZE, u32) = code;
    put_str(rec + EV_HEADER_SIZE + 4, msg, cap);
    ring_commit(rec, event_len(payload));
}

/* ---- string globals (LockedStr protocol) ---- */

/* Spins before a wait on a word of the region gives up: another process
 * sharing it may hold the word for ever. Far longer than any real holder:
 * an array's lock is held for a walk of the array (SPIN_LIMIT), a
 * string's sequence word for a copy of at most MAXSTRINGLEN bytes
 * (STR_SPIN_LIMIT). */
#define SPIN_LIMIT (1u << 24)
#define STR_SPIN_LIMIT (1u << 16)

EXPORT void rt_gstr_load(char *dst, u8 *g, i64 cap) {
    u32 *seqp = &AT(g, 0, u32);
    for (u32 tries = 0;; tries++) {
        /* Acquire: pairs with the writer's Release store of the even seq. */
        u32 s1 = __atomic_load_n(seqp, __ATOMIC_ACQUIRE);
        if ((s1 & 1) && tries < STR_SPIN_LIMIT) {
            cpu_relax();
            continue;
        }
        if (tries >= STR_SPIN_LIMIT) {
            /* Held for ever: the bytes as they are (a string, bounded). */
            rt_strcpy(dst, (const char *)g + LOCKED_STR_HEADER, cap);
            return;
        }
        rt_strcpy(dst, (const char *)g + LOCKED_STR_HEADER, cap);
        /* Acquire fence: the copy happens before the second load. */
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seqp, __ATOMIC_RELAXED) == s1) return;
    }
}

LOCAL u32 seq_lock(u32 *seqp) {
    for (u32 tries = 0;; tries++) {
        u32 s = __atomic_load_n(seqp, __ATOMIC_RELAXED);
        /* Acquire on success: pairs with the previous writer's Release. */
        if (!(s & 1) && __atomic_compare_exchange_n(seqp, &s, s + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return s + 1;
        /* Held for ever (an odd word another process wrote): write
         * anyway, as the holder of an odd sequence would. */
        if (tries >= STR_SPIN_LIMIT) return s | 1;
        cpu_relax();
    }
}

LOCAL void seq_unlock(u32 *seqp, u32 s) {
    /* Release: the new bytes before the even seq readers check. */
    __atomic_store_n(seqp, s + 1, __ATOMIC_RELEASE);
}

EXPORT void rt_gstr_store(u8 *g, const char *src, i64 cap) {
    u32 *seqp = &AT(g, 0, u32);
    u32 s = seq_lock(seqp);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    rt_strcpy((char *)g + LOCKED_STR_HEADER, src, cap);
    seq_unlock(seqp, s);
}

/* ---- statistics ---- */

LOCAL i64 log_bucket(i64 v) {
    if (v == 0) return HIST_LOG_BUCKET0;
    if (v == (i64)0x8000000000000000ULL) return 0;
    u64 a = v < 0 ? (u64)-v : (u64)v;
    i64 k = 63 - __builtin_clzll(a);
    i64 b = HIST_LOG_BUCKET0 + 1 + k;
    return v < 0 ? (i64)HIST_LOG_BUCKETS - b : b;
}

/* The bucket of v in histogram h (a HistSpec). */
LOCAL i64 hist_bucket(const u8 *h, i64 v) {
    if (AT(h, HS_KIND, u32) == HIST_LOG) return log_bucket(v);
    i64 lo = AT(h, HS_LO, i64), step = AT(h, HS_STEP, i64), nb = AT(h, HS_NBUCKETS, u32);
    if (v < lo) return 0;
    u64 q = ((u64)v - (u64)lo) / (u64)step + 1;
    return q >= (u64)(nb - 1) ? nb - 1 : (i64)q;
}

/* @variance as SystemTap computes it (runtime/stat-common.c): each copy
 * of a statistic (here: the shared one and each thread's; there: each
 * CPU's) keeps a running mean, truncated, and a sum of squared
 * differences, updated by Welford's algorithm with the difference in a
 * 32-bit int; a read combines the copies (rt_stat_merge, rt_stat_get).
 * `n` is the count before v. Wrapping arithmetic: the target may have
 * written anything here. */
LOCAL void welford(u8 *st, i64 n, i64 v, const u8 *desc) {
    u64 vs = (u64)v << (AT(desc, SD_SHIFT, u32) & 63);
    if (n <= 0) {
        AT(st, S_AVG_S, i64) = (i64)vs;
        AT(st, S_M2, i64) = 0;
        return;
    }
    i64 cnt = n + 1, avg = AT(st, S_AVG_S, i64);
    i64 delta = (i64)(int)(u32)(vs - (u64)avg);
    avg = (i64)((u64)avg + (u64)(delta / cnt));
    AT(st, S_AVG_S, i64) = avg;
    AT(st, S_M2, i64) = (i64)((u64)AT(st, S_M2, i64) + (u64)delta * (vs - (u64)avg));
}

/* The lock of a statistic that keeps the running state. Bounded: if the
 * target wrote the word, the add goes on without it after a while rather
 * than spin forever. */
LOCAL int stat_lock(u8 *st) {
    u32 *l = &AT(st, S_LOCK, u32);
    for (u32 i = 0; i < (1u << 20); i++) {
        u32 z = 0;
        if (__atomic_compare_exchange_n(l, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 1;
        cpu_relax();
    }
    return 0;
}

EXPORT void rt_stat_add(u8 *st, i64 v, const u8 *desc) {
    if (AT(desc, SD_VARIANCE, u32)) {
        /* The running state is one read-modify-write: under the lock. */
        int locked = stat_lock(st);
        i64 n = AT(st, S_COUNT, i64);
        __atomic_store_n(&AT(st, S_COUNT, i64), n + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&AT(st, S_SUM, i64), (i64)((u64)AT(st, S_SUM, i64) + (u64)v), __ATOMIC_RELAXED);
        if (n <= 0 || v < AT(st, S_MIN, i64)) __atomic_store_n(&AT(st, S_MIN, i64), v, __ATOMIC_RELAXED);
        if (n <= 0 || v > AT(st, S_MAX, i64)) __atomic_store_n(&AT(st, S_MAX, i64), v, __ATOMIC_RELAXED);
        welford(st, n, v, desc);
        u32 nh = AT(desc, SD_NHISTS, u32);
        for (u32 i = 0; i < nh; i++) {
            const u8 *h = desc + SD_HISTS + i * HS_SIZE;
            i64 b = hist_bucket(h, v);
            __atomic_fetch_add(&AT(st, AT(h, HS_OFFSET, u32) + 8 * b, i64), 1, __ATOMIC_RELAXED);
        }
        if (locked) __atomic_store_n(&AT(st, S_LOCK, u32), 0, __ATOMIC_RELEASE);
        return;
    }
    /* Relaxed everywhere: totals and extremes, read after the fact. */
    i64 n = __atomic_fetch_add(&AT(st, S_COUNT, i64), 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&AT(st, S_SUM, i64), v, __ATOMIC_RELAXED);
    i64 *minp = &AT(st, S_MIN, i64), *maxp = &AT(st, S_MAX, i64);
    if (n == 0) {
        /* The first value: min and max start from it. A concurrent second
         * value may race; the CAS loops below settle the extremes. */
        __atomic_store_n(minp, v, __ATOMIC_RELAXED);
        __atomic_store_n(maxp, v, __ATOMIC_RELAXED);
    }
    i64 cur = __atomic_load_n(minp, __ATOMIC_RELAXED);
    while (v < cur && !__atomic_compare_exchange_n(minp, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    cur = __atomic_load_n(maxp, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(maxp, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    u32 nh = AT(desc, SD_NHISTS, u32);
    for (u32 i = 0; i < nh; i++) {
        const u8 *h = desc + SD_HISTS + i * HS_SIZE;
        i64 b = hist_bucket(h, v);
        __atomic_fetch_add(&AT(st, AT(h, HS_OFFSET, u32) + 8 * b, i64), 1, __ATOMIC_RELAXED);
    }
}

EXPORT void rt_stat_clear(u8 *st, const u8 *desc) {
    u32 size = AT(desc, 4, u32);
    for (u32 i = 0; i < size; i += 8) __atomic_store_n(&AT(st, i, i64), 0, __ATOMIC_RELAXED);
}

/* @count(0) @sum(1) @min(2) @max(3) @avg(4) @variance(5) of a statistic
 * (st = 0: an absent array element, i.e. empty). */
EXPORT i64 rt_stat_get(u8 *ctx, const u8 *st, i64 op, i64 loc) {
    i64 n = st ? __atomic_load_n(&AT(st, S_COUNT, i64), __ATOMIC_RELAXED) : 0;
    /* In begin/end/error probes (no handler adds to it then: a racing
     * first value can show min > max for an instant), a statistic the
     * target overwrote into an impossible state is an error, not a value. */
    if ((AT(ctx, C_FLAGS, u32) & CTX_INTERRUPTIBLE) && (n < 0 || (n > 0 && AT(st, S_MIN, i64) > AT(st, S_MAX, i64)))) {
        if (!AT(ctx, C_ERROR, u32)) {
            AT(ctx, C_ERROR, u32) = ERR_CORRUPT;
            AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
        }
        return 0;
    }
    if (op == 0) return n;
    if (op == 1) return st ? __atomic_load_n(&AT(st, S_SUM, i64), __ATOMIC_RELAXED) : 0;
    if (n == 0) {
        if (!AT(ctx, C_ERROR, u32)) {
            AT(ctx, C_ERROR, u32) = ERR_EMPTY_AGG;
            AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
        }
        return 0;
    }
    i64 sum = AT(st, S_SUM, i64);
    switch (op) {
    case 2: return AT(st, S_MIN, i64);
    case 3: return AT(st, S_MAX, i64);
    case 4: return sum / n;
    default: {
        /* @variance, op 5 | shift << 8 (a scalar) or 6 | shift << 8 (an
         * array's element), from the running state. SystemTap combines
         * a scalar's copies (_stp_stat_get): each copy's running mean
         * against the mean of the sums, plus its squares; an element's
         * one copy (map.c) is its own variance as it stands. */
        if (n < 2) return 0;
        u32 shift = (u32)(op >> 8) & 63;
        i64 var_s = AT(st, S_M2, i64) / (n - 1);
        if ((op & 0xff) == 5) {
            i64 mean = (i64)((u64)sum << shift) / n;
            u64 d = (u64)AT(st, S_AVG_S, i64) - (u64)mean;
            u64 s12 = (u64)n * d * d + (u64)(n - 1) * (u64)var_s;
            var_s = (i64)s12 / (n - 1);
        }
        return var_s >> (2 * shift > 63 ? 63 : 2 * shift);
    }
    }
}

/* Histogram `which` of a statistic's descriptor; 0 with the error `empty
   aggregate` (as SystemTap) when the statistic holds nothing. */
LOCAL const u8 *hist_of(u8 *ctx, const u8 *st, const u8 *desc, i64 which, i64 loc) {
    if (st && AT(st, S_COUNT, i64) != 0) return desc + SD_HISTS + (u64)which * HS_SIZE;
    if (!AT(ctx, C_ERROR, u32)) {
        AT(ctx, C_ERROR, u32) = ERR_EMPTY_AGG;
        AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
    }
    return 0;
}

/* print(@hist_*(s)): a snapshot of one histogram, formatted by the tracer. */
EXPORT void rt_hist_print(u8 *R, u8 *ctx, const u8 *st, const u8 *desc, i64 which, i64 loc) {
    const u8 *h = hist_of(ctx, st, desc, which, loc);
    if (!h) return;
    i64 n = AT(st, S_COUNT, i64);
    u32 nb = AT(h, HS_NBUCKETS, u32), kind = AT(h, HS_KIND, u32);
    u32 payload = (u32)HIST_EVENT_SIZE + 8 * nb;
    u8 *rec = event_begin(R, ctx, EV_HIST, kind, payload);
    if (!rec) return;
    u8 *p = rec + EV_HEADER_SIZE;
    AT(p, 0, i64) = n;
    AT(p, 8, i64) = AT(h, HS_LO, i64);
    AT(p, 16, i64) = AT(h, HS_HI, i64);
    AT(p, 24, i64) = AT(h, HS_STEP, i64);
    AT(p, 32, u32) = nb;
    AT(p, 36, u32) = 0;
    for (u32 i = 0; i < nb; i++)
        AT(p, HIST_EVENT_SIZE + 8 * i, i64) =
            __atomic_load_n(&AT(st, AT(h, HS_OFFSET, u32) + 8 * i, i64), __ATOMIC_RELAXED);
    ring_commit(rec, event_len(payload));
}

/* @hist_*(s)[i]: the count in bucket i (log buckets 0..127 with 64 for
   0; linear ones with the underflow bucket first and the overflow one
   last). An empty statistic and an index out of range are errors, as in
   SystemTap. */
EXPORT i64 rt_hist_bucket(u8 *ctx, const u8 *st, const u8 *desc, i64 which, i64 i, i64 loc) {
    if (AT(ctx, C_ERROR, u32)) return 0;
    const u8 *h = hist_of(ctx, st, desc, which, loc);
    if (!h) return 0;
    u32 nb = AT(h, HS_NBUCKETS, u32);
    if (i < 0 || i >= (i64)nb) {
        rt_strcpy((char *)ctx + CTX_SIZE, "histogram index out of range", 64);
        AT(ctx, C_ERROR, u32) = ERR_USER;
        AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
        return 0;
    }
    return __atomic_load_n(&AT(st, AT(h, HS_OFFSET, u32) + 8 * (u64)i, i64), __ATOMIC_RELAXED);
}

/* A signed 128-bit number in decimal into d (at least 41 bytes); its length. */
LOCAL int dec128(char *d, __int128 v) {
    char t[41];
    int n = 0, len = 0;
    unsigned __int128 u = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v : (unsigned __int128)v;
    do {
        t[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    if (v < 0) d[len++] = '-';
    while (n) d[len++] = t[--n];
    return len;
}

/* The row label of bucket i: its lowest value (log), or the linear
   bucket's lowest value with "<" and ">" on the underflow and overflow
   buckets. */
LOCAL int hist_label(char *d, u32 kind, i64 lo, i64 step, u32 nb, u32 i) {
    if (kind == HIST_LOG) {
        if (i == HIST_LOG_BUCKET0) return dec128(d, 0);
        if (i > HIST_LOG_BUCKET0) return dec128(d, (__int128)1 << (i - HIST_LOG_BUCKET0 - 1));
        return dec128(d, -((__int128)1 << (HIST_LOG_BUCKET0 - 1 - i)));
    }
    if (i == 0) {
        d[0] = '<';
        return 1 + dec128(d + 1, lo);
    }
    if (i == nb - 1) {
        d[0] = '>';
        return 1 + dec128(d + 1, (__int128)lo + (__int128)((i64)nb - 3) * step);
    }
    return dec128(d, (__int128)lo + (__int128)((i64)i - 1) * step);
}

/* sprint(@hist_*(s)): the text print() writes (runtime/src/render.rs,
   SystemTap's _stp_stat_print_histogram), into buf (cap bytes with the
   NUL), cut at the string limit as every string is. The two are compared
   by tests/run/hist_sprint.tp. */
EXPORT void rt_hist_sprint(char *buf, i64 cap, u8 *ctx, const u8 *st, const u8 *desc, i64 which, i64 loc) {
    struct out o = {buf, 0, (usize)cap - 1};
    buf[0] = 0;
    const u8 *h = hist_of(ctx, st, desc, which, loc);
    if (!h) return;
    u32 nb = AT(h, HS_NBUCKETS, u32), kind = AT(h, HS_KIND, u32);
    i64 lo = AT(h, HS_LO, i64), step = AT(h, HS_STEP, i64);
    const i64 *c = (const i64 *)(st + AT(h, HS_OFFSET, u32));
#define CNT(i) __atomic_load_n(&c[i], __ATOMIC_RELAXED)
    i64 first = -1, last = -1;
    for (u32 i = 0; i < nb; i++)
        if (CNT(i) != 0) {
            if (first < 0) first = i;
            last = i;
        }
    if (first < 0) {
        buf[0] = 0;
        return;
    }
    i64 low = first, high = last;
    for (int k = 0; k < 2; k++) {
        if (kind == HIST_LOG) {
            if (low != HIST_LOG_BUCKET0 && low > 0) low--;
        } else if (low > 0) {
            low--;
        }
        if (high + 1 < (i64)nb) high++;
    }
    if (kind != HIST_LOG) {
        if (low == 0 && CNT(0) == 0) low = 1;
        if (high == (i64)nb - 1 && CNT(nb - 1) == 0 && high > 0) high--;
    }
    char lab[48];
    i64 valmax = 0, val_space = 5;
    for (i64 i = low; i <= high; i++) {
        if (CNT(i) > valmax) valmax = CNT(i);
        i64 n = hist_label(lab, kind, lo, step, nb, (u32)i);
        if (n > val_space) val_space = n;
    }
    if (kind != HIST_LOG) {
        i64 n = dec128(lab, (__int128)lo + (__int128)step * high);
        if (n > val_space) val_space = n;
    }
    i64 cnt_space = dec128(lab, valmax);
    i64 scale = valmax <= 50 ? 1 : (valmax + 49) / 50;
    out_pad(&o, ' ', val_space - 5);
    for (const char *s = "value |"; *s; s++) out_c(&o, *s);
    out_pad(&o, '-', 50);
    for (const char *s = " count\n"; *s; s++) out_c(&o, *s);
    int skipped = 0;
    for (i64 i = low; i <= high; i++) {
        i64 a = i - 2 < low ? low : i - 2, b = i + 2 > high ? high : i + 2, any = 0;
        for (i64 k = a; k <= b; k++) any |= CNT(k) != 0;
        if (!any) {
            skipped = 1;
            continue;
        }
        if (skipped) {
            out_pad(&o, ' ', val_space);
            out_c(&o, ' ');
            out_c(&o, '~');
            out_c(&o, '\n');
            skipped = 0;
        }
        i64 n = hist_label(lab, kind, lo, step, nb, (u32)i);
        out_pad(&o, ' ', val_space - n);
        for (i64 k = 0; k < n; k++) out_c(&o, lab[k]);
        out_c(&o, ' ');
        out_c(&o, '|');
        i64 v = CNT(i) / scale;
        if (v < 0) v = 0;
        if (v > 50) v = 50;
        out_pad(&o, '@', v);
        n = dec128(lab, CNT(i));
        out_pad(&o, ' ', 50 - v + 1 + cnt_space - n);
        for (i64 k = 0; k < n; k++) out_c(&o, lab[k]);
        out_c(&o, '\n');
    }
    out_c(&o, '\n');
#undef CNT
    usize n = o.len < o.max ? o.len : o.max;
    buf[n] = 0;
}

/* ---- associative arrays (protocol: abi/src/region.rs, TableHeader) ---- */

LOCAL u8 *slot_at(u8 *tab, u64 i) { return tab + TABLE_HEADER_SIZE + i * AT(TR(tab), T_SLOT_SIZE, u32); }

LOCAL u64 mix(u64 h, u64 x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

static u64 hash_keys(u8 *tab, const i64 *keys) {
    u32 nk = AT(TR(tab), T_NKEYS, u32);
    u64 h = 0x243f6a8885a308d3ULL;
    for (u32 i = 0; i < nk; i++) {
        if (AT(TR(tab), T_KEY_KINDS + i, u8) == KIND_STRING) {
            u64 f = 0xcbf29ce484222325ULL;
            for (const u8 *s = (const u8 *)keys[i]; *s; s++) f = (f ^ *s) * 0x100000001b3ULL;
            h = mix(h, f);
        } else {
            h = mix(h, (u64)keys[i]);
        }
    }
    return h;
}

static int keys_equal(u8 *tab, u8 *slot, const i64 *keys) {
    u32 nk = AT(TR(tab), T_NKEYS, u32);
    i64 cap = AT(TR(tab), T_MAXSTRINGLEN, u32);
    for (u32 i = 0; i < nk; i++) {
        u8 *k = slot + AT(TR(tab), T_KEY_OFF + 4 * i, u32);
        if (AT(TR(tab), T_KEY_KINDS + i, u8) == KIND_STRING) {
            const char *a = (const char *)k, *b = (const char *)keys[i];
            i64 j = 0;
            while (j < cap - 1 && a[j] && a[j] == b[j]) j++;
            if (j < cap - 1 && a[j] != b[j]) return 0;
        } else if (AT(k, 0, i64) != keys[i]) {
            return 0;
        }
    }
    return 1;
}

LOCAL void tab_lock(u8 *tab) {
    u32 *l = &AT(tab, T_LOCK, u32);
    /* Once a wait gave up, the lock is not waited for again: a word held
     * for ever would otherwise cost every later call the whole wait. */
    u32 limit = __atomic_load_n(&AT(tab, T_STOLEN, u32), __ATOMIC_RELAXED) ? 1 : SPIN_LIMIT;
    for (u32 tries = 0; tries < limit; tries++) {
        u32 z = 0;
        /* Acquire: pairs with tab_unlock's Release. */
        if (__atomic_compare_exchange_n(l, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
        cpu_relax();
    }
    /* Held for ever (a word another process wrote): go on, as if we held
     * it, and count it (the tracer reports it as the target's damage).
     * Every index below is bounded by the mirror's geometry, so the
     * worst is a torn element, never a write out of the array. */
    __atomic_fetch_add(&AT(tab, T_STOLEN, u32), 1, __ATOMIC_RELAXED);
}

LOCAL void tab_unlock(u8 *tab) { __atomic_store_n(&AT(tab, T_LOCK, u32), 0, __ATOMIC_RELEASE); }

/* Start changing a slot: readers that see an odd seq skip it. */
LOCAL u32 slot_write_begin(u8 *slot) {
    u32 s = AT(slot, SL_SEQ, u32) + 1;
    __atomic_store_n(&AT(slot, SL_SEQ, u32), s, __ATOMIC_RELAXED);
    /* Release fence: the odd seq is visible before the changes below. */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return s;
}

LOCAL void slot_write_end(u8 *slot, u32 s) {
    /* Release: the changes before the even seq (readers Acquire it). */
    __atomic_store_n(&AT(slot, SL_SEQ, u32), s + 1, __ATOMIC_RELEASE);
}

/* The value of the entry with these keys (an array of longs and string
 * pointers). Absent: 0, or with `create` a new zeroed entry; (u8 *)1 when
 * the array is full. */
EXPORT u8 *rt_map_find(u8 *tab, const i64 *keys, i64 create) {
    u64 nslots = AT(TR(tab), T_NSLOTS, u32), mask = nslots - 1;
    u64 h = hash_keys(tab, keys);
    u32 voff = AT(TR(tab), T_VALUE_OFF, u32);
    u32 retries = 0;
retry:
    for (u64 i = 0; i < nslots; i++) {
        u8 *slot = slot_at(tab, (h + i) & mask);
        /* Acquire: pairs with slot_write_end's Release. */
        u32 s1 = __atomic_load_n(&AT(slot, SL_SEQ, u32), __ATOMIC_ACQUIRE);
        if (s1 & 1) continue; /* being changed: as if not there yet */
        u32 st = __atomic_load_n(&AT(slot, SL_STATE, u32), __ATOMIC_RELAXED);
        if (st == SLOT_EMPTY) break;
        if (st != SLOT_LIVE || !keys_equal(tab, slot, keys)) continue;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&AT(slot, SL_SEQ, u32), __ATOMIC_RELAXED) != s1 && ++retries < SPIN_LIMIT) goto retry;
        return slot + voff;
    }
    if (!create) return 0;
    tab_lock(tab);
    u8 *free = 0;
    for (u64 i = 0; i < nslots; i++) {
        u8 *slot = slot_at(tab, (h + i) & mask);
        u32 st = AT(slot, SL_STATE, u32);
        if (st == SLOT_LIVE) {
            if (keys_equal(tab, slot, keys)) {
                tab_unlock(tab);
                return slot + voff;
            }
            continue;
        }
        if (!free) free = slot;
        if (st == SLOT_EMPTY) break;
    }
    if (free && AT(tab, T_COUNT, u32) >= AT(TR(tab), T_CAPACITY, u32) && AT(TR(tab), T_WRAP, u8)) {
        /* `global a%`: full, the oldest element makes room (SystemTap's
         * wrapping arrays). */
        u8 *oldest = 0;
        for (u64 i = 0; i < nslots; i++) {
            u8 *slot = slot_at(tab, i);
            if (AT(slot, SL_STATE, u32) == SLOT_LIVE && (!oldest || AT(slot, SL_ORDER, u64) < AT(oldest, SL_ORDER, u64)))
                oldest = slot;
        }
        if (oldest) {
            u32 s = slot_write_begin(oldest);
            AT(oldest, SL_STATE, u32) = SLOT_DEAD;
            slot_write_end(oldest, s);
            AT(tab, T_COUNT, u32)--;
        }
    }
    if (!free || AT(tab, T_COUNT, u32) >= AT(TR(tab), T_CAPACITY, u32)) {
        tab_unlock(tab);
        return (u8 *)1;
    }
    u32 s = slot_write_begin(free);
    u32 nk = AT(TR(tab), T_NKEYS, u32);
    i64 cap = AT(TR(tab), T_MAXSTRINGLEN, u32);
    for (u32 i = 0; i < nk; i++) {
        u8 *k = free + AT(TR(tab), T_KEY_OFF + 4 * i, u32);
        if (AT(TR(tab), T_KEY_KINDS + i, u8) == KIND_STRING) rt_strcpy((char *)k, (const char *)keys[i], cap);
        else AT(k, 0, i64) = keys[i];
    }
    memset(free + voff, 0, AT(TR(tab), T_SLOT_SIZE, u32) - voff);
    AT(free, SL_ORDER, u64) = AT(tab, T_ORDER, u64)++;
    AT(free, SL_STATE, u32) = SLOT_LIVE;
    slot_write_end(free, s);
    AT(tab, T_COUNT, u32)++;
    tab_unlock(tab);
    return free + voff;
}

EXPORT void rt_map_delete(u8 *tab, const i64 *keys) {
    u64 nslots = AT(TR(tab), T_NSLOTS, u32), mask = nslots - 1;
    u64 h = hash_keys(tab, keys);
    tab_lock(tab);
    for (u64 i = 0; i < nslots; i++) {
        u8 *slot = slot_at(tab, (h + i) & mask);
        u32 st = AT(slot, SL_STATE, u32);
        if (st == SLOT_EMPTY) break;
        if (st == SLOT_LIVE && keys_equal(tab, slot, keys)) {
            u32 s = slot_write_begin(slot);
            AT(slot, SL_STATE, u32) = SLOT_DEAD;
            slot_write_end(slot, s);
            AT(tab, T_COUNT, u32)--;
            break;
        }
    }
    tab_unlock(tab);
}

EXPORT void rt_map_clear(u8 *tab) {
    u64 nslots = AT(TR(tab), T_NSLOTS, u32);
    tab_lock(tab);
    for (u64 i = 0; i < nslots; i++) {
        u8 *slot = slot_at(tab, i);
        if (AT(slot, SL_STATE, u32) != SLOT_EMPTY) {
            u32 s = slot_write_begin(slot);
            AT(slot, SL_STATE, u32) = SLOT_EMPTY;
            slot_write_end(slot, s);
        }
    }
    AT(tab, T_COUNT, u32) = 0;
    tab_unlock(tab);
}

/* Comparison for foreach: by key column (col >= 0) or by value (col < 0;
 * statistics by @count), then by insertion order so equal elements keep
 * it (SystemTap's sort is stable over its insertion-ordered list). */
static i64 cmp_slots(u8 *tab, u8 *a, u8 *b, i64 col, i64 desc) {
    i64 c = 0;
    if (col <= -3) {
        /* A statistic's aggregate: -3 @sum, -4 @min, -5 @max, -6 @avg. */
        u32 off = AT(TR(tab), T_VALUE_OFF, u32);
        i64 na = AT(a + off, S_COUNT, i64), nb = AT(b + off, S_COUNT, i64), x, y;
        switch (col) {
        case -3: x = AT(a + off, S_SUM, i64), y = AT(b + off, S_SUM, i64); break;
        case -4: x = AT(a + off, S_MIN, i64), y = AT(b + off, S_MIN, i64); break;
        case -5: x = AT(a + off, S_MAX, i64), y = AT(b + off, S_MAX, i64); break;
        default:
            x = na > 0 ? AT(a + off, S_SUM, i64) / na : 0;
            y = nb > 0 ? AT(b + off, S_SUM, i64) / nb : 0;
        }
        c = x < y ? -1 : x > y;
        if (desc) c = -c;
    } else if (col != -2) {
        u8 kind;
        u32 off;
        if (col >= 0) {
            kind = AT(TR(tab), T_KEY_KINDS + col, u8);
            off = AT(TR(tab), T_KEY_OFF + 4 * col, u32);
        } else {
            kind = AT(TR(tab), T_VALUE_KIND, u8);
            off = AT(TR(tab), T_VALUE_OFF, u32);
            if (kind == KIND_STRING) off += LOCKED_STR_HEADER;
        }
        if (kind == KIND_STRING) {
            c = rt_strcmp((const char *)a + off, (const char *)b + off);
        } else {
            i64 x = AT(a, off, i64), y = AT(b, off, i64); /* a stat's @count is its first word */
            c = x < y ? -1 : x > y;
        }
        if (desc) c = -c;
    }
    if (c) return c;
    u64 oa = AT(a, SL_ORDER, u64), ob = AT(b, SL_ORDER, u64);
    return oa < ob ? -1 : oa > ob;
}

static void sift(u8 *tab, u32 *v, i64 root, i64 n, i64 col, i64 desc) {
    for (;;) {
        i64 child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && cmp_slots(tab, slot_at(tab, v[child]), slot_at(tab, v[child + 1]), col, desc) < 0) child++;
        if (cmp_slots(tab, slot_at(tab, v[root]), slot_at(tab, v[child]), col, desc) >= 0) return;
        u32 t = v[root];
        v[root] = v[child];
        v[child] = t;
        root = child;
    }
}

/* Fill `out` (room for the array's capacity) with the live slots in
 * iteration order: col = key index, -1 = by value, -2 = insertion order.
 * Returns how many, at most `limit` when limit >= 0. Under the table lock,
 * so the snapshot is consistent. */
EXPORT i64 rt_map_collect(u8 *tab, u32 *out, i64 col, i64 desc, i64 limit) {
    u64 nslots = AT(TR(tab), T_NSLOTS, u32);
    u32 cap = AT(TR(tab), T_CAPACITY, u32);
    i64 n = 0;
    tab_lock(tab);
    for (u64 i = 0; i < nslots && n < cap; i++)
        if (AT(slot_at(tab, i), SL_STATE, u32) == SLOT_LIVE) out[n++] = (u32)i;
    /* Heapsort: no recursion, no extra memory; the comparison is total. */
    for (i64 i = n / 2 - 1; i >= 0; i--) sift(tab, out, i, n, col, desc);
    for (i64 end = n - 1; end > 0; end--) {
        u32 t = out[0];
        out[0] = out[end];
        out[end] = t;
        sift(tab, out, 0, end, col, desc);
    }
    /* SystemTap sorts its element list in place: a later unsorted foreach
     * visits the elements in the last sorted order. Renumber them so. */
    if (col != -2) {
        u64 base = AT(tab, T_ORDER, u64);
        for (i64 i = 0; i < n; i++) AT(slot_at(tab, out[i]), SL_ORDER, u64) = base + (u64)i;
        AT(tab, T_ORDER, u64) = base + (u64)n;
    }
    tab_unlock(tab);
    if (limit >= 0 && n > limit) n = limit;
    return n;
}

/* The slot of an index from rt_map_collect if it is still live, else 0. */
EXPORT u8 *rt_map_slot(u8 *tab, i64 i) {
    if ((u64)i >= AT(TR(tab), T_NSLOTS, u32)) return 0;
    u8 *slot = slot_at(tab, (u64)i);
    return __atomic_load_n(&AT(slot, SL_STATE, u32), __ATOMIC_ACQUIRE) == SLOT_LIVE ? slot : 0;
}

/* ---- target memory, fault-safe ---- */

/* The process whose memory probes read and write. In a target thread,
 * its own process (a child the target forked or exec'd is not the
 * region's); in the tracer's probes, which run in its sandbox (a child of
 * the tracer), the region's. The sandbox's seccomp filter lets it name
 * only the process the tracer serves, whatever the region says. */
LOCAL i64 served_pid(u8 *R) {
    i64 pid = sys6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    u64 tracer = AT(TR(R), H_TRACER, u64);
    if ((u64)pid != AT(TR(R), H_PID, u64) && ((u64)pid == tracer || (u64)sys6(SYS_getppid, 0, 0, 0, 0, 0, 0) == tracer))
        pid = (i64)AT(TR(R), H_PID, u64);
    return pid;
}

/* Copy n bytes between here and the served process (process_vm_readv or
 * _writev: EFAULT instead of SIGSEGV); returns the number copied. */
LOCAL i64 user_copy(u8 *R, i64 nr, void *here, u64 there, i64 n) {
    struct {
        u64 base, len;
    } local = {(u64)here, (u64)n}, remote = {there, (u64)n};
    i64 r = sys6(nr, served_pid(R), (i64)&local, 1, (i64)&remote, 1, 0);
    return r < 0 ? 0 : r;
}

/* Copy n bytes of the served process's memory; returns the number copied. */
EXPORT i64 rt_read_user(u8 *R, void *dst, u64 addr, i64 n) {
    return user_copy(R, SYS_process_vm_readv, dst, addr, n);
}

/* `size` bytes at addr (1 to 8), sign-extended when `sign`, into *out;
 * false on a fault. */
LOCAL int user_sized(u8 *R, u64 addr, i64 size, i64 sign, i64 *out) {
    u64 v = 0;
    if (size < 1 || size > 8 || rt_read_user(R, &v, addr, size) != size) return 0;
    if (sign && size < 8) {
        int sh = 64 - 8 * (int)size;
        *out = ((i64)(v << sh)) >> sh;
    } else {
        *out = (i64)v;
    }
    return 1;
}

/* user_int and friends: size in bytes, sign-extended when `sign`; 0 on fault. */
EXPORT i64 rt_user_int(u8 *R, u64 addr, i64 size, i64 sign) {
    i64 v = 0;
    return user_sized(R, addr, size, sign, &v) ? v : 0;
}

static void hex_message(char *dst, const char *text, u64 addr, i64 cap);

/* A fault at addr is the probe's error ("read fault at 0x..."), unless
 * one is already set. */
static void fault_error(u8 *ctx, const char *what, u64 addr, i64 loc, i64 cap) {
    if (AT(ctx, C_ERROR, u32)) return;
    hex_message((char *)ctx + CTX_SIZE, what, addr, cap);
    AT(ctx, C_ERROR, u32) = ERR_FAULT;
    AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
}

/* user_int_error and friends, and what `$p->field` reads: as rt_user_int,
 * but a fault is the probe's error ("read fault at 0x..."). */
EXPORT i64 rt_user_int_error(u8 *R, u8 *ctx, u64 addr, i64 size, i64 sign, i64 loc, i64 cap) {
    i64 v = 0;
    if (user_sized(R, addr, size, sign, &v)) return v;
    fault_error(ctx, "read fault at ", addr, loc, cap);
    return 0;
}

/* Guru mode: set_user_int and friends, and `$p->field = v`: write the low
 * `size` bytes of v at addr in the served process, fault-safe (a fault is
 * the probe's error, "write fault at 0x..."). */
EXPORT void rt_set_user_int(u8 *R, u8 *ctx, u64 addr, i64 size, i64 v, i64 loc, i64 cap) {
    if (size < 1 || size > 8 || user_copy(R, SYS_process_vm_writev, &v, addr, size) != size)
        fault_error(ctx, "write fault at ", addr, loc, cap);
}

/* Append s (NUL-terminated) to dst at *o, within cap (NUL kept). */
LOCAL void put_s(char *dst, usize *o, i64 cap, const char *s) {
    while (*s && *o + 1 < (usize)cap) dst[(*o)++] = *s++;
    dst[*o] = 0;
}

LOCAL void put_hex(char *dst, usize *o, i64 cap, u64 v, int digits) {
    char b[24];
    usize k = 0;
    b[k++] = '0';
    b[k++] = 'x';
    int started = 0;
    for (int sh = 60; sh >= 0; sh -= 4) {
        u32 d = (v >> sh) & 15;
        if (d || started || sh < 4 * digits) {
            b[k++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
            started = 1;
        }
    }
    b[k] = 0;
    put_s(dst, o, cap, b);
}

static void hex_message(char *dst, const char *text, u64 addr, i64 cap) {
    usize o = 0;
    dst[0] = 0;
    put_s(dst, &o, cap, text);
    put_hex(dst, &o, cap, addr, 1);
}

/* user_string(addr[, err]) and user_string_n(addr, n[, err]): read up to
 * n bytes (and the NUL) page by page. On a fault at the first byte: the
 * default `err` if given, else an error. */
EXPORT void rt_user_string(u8 *R, u8 *ctx, char *dst, u64 addr, i64 n, const char *err, i64 loc, i64 cap) {
    if (n < 0 || n > cap - 1) n = cap - 1;
    i64 got = 0;
    while (got < n) {
        i64 chunk = (i64)(4096 - ((addr + (u64)got) & 4095));
        if (chunk > n - got) chunk = n - got;
        i64 r = rt_read_user(R, dst + got, addr + (u64)got, chunk);
        i64 z = 0;
        while (z < r && dst[got + z]) z++;
        if (z < r) {
            got += z;
            dst[got] = 0;
            return;
        }
        got += r;
        if (r < chunk) break;
    }
    if (got == 0 && n > 0) {
        if (err) {
            rt_strcpy(dst, err, cap);
        } else {
            dst[0] = 0;
            fault_error(ctx, "user string copy fault at ", addr, loc, cap);
        }
        return;
    }
    dst[got] = 0;
}

/* The probe's error, `code` (ERR_USER, ERR_FAULT) with the message
 * `msg`, unless one is pending already (the first error is the one
 * reported). */
LOCAL void probe_error(u8 *ctx, u32 code, const char *msg, i64 loc, i64 cap) {
    if (AT(ctx, C_ERROR, u32)) return;
    usize o = 0;
    put_s((char *)ctx + CTX_SIZE, &o, cap, msg);
    AT(ctx, C_ERROR, u32) = code;
    AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
}

/* Code point c as UTF-8 at dst[*len], within cap (a NUL kept): 1 when
 * written, 0 when it does not fit (the string ends before it, as
 * SystemTap truncates), -1 when c is no character (a surrogate, or past
 * U+10FFFF). */
LOCAL int utf8_put(char *dst, i64 *len, i64 cap, u32 c) {
    u8 b[4];
    i64 n;
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) return -1;
    if (c < 0x80) {
        b[0] = (u8)c;
        n = 1;
    } else if (c < 0x800) {
        b[0] = (u8)(0xC0 | c >> 6);
        b[1] = (u8)(0x80 | (c & 0x3F));
        n = 2;
    } else if (c < 0x10000) {
        b[0] = (u8)(0xE0 | c >> 12);
        b[1] = (u8)(0x80 | (c >> 6 & 0x3F));
        b[2] = (u8)(0x80 | (c & 0x3F));
        n = 3;
    } else {
        b[0] = (u8)(0xF0 | c >> 18);
        b[1] = (u8)(0x80 | (c >> 12 & 0x3F));
        b[2] = (u8)(0x80 | (c >> 6 & 0x3F));
        b[3] = (u8)(0x80 | (c & 0x3F));
        n = 4;
    }
    if (*len + n > cap - 1) return 0;
    for (i64 i = 0; i < n; i++) dst[(*len)++] = (char)b[i];
    return 1;
}

/* user_string_utf16 and user_string_utf32 (`width` 2 or 4): the
 * NUL-terminated string of 16- or 32-bit units at addr as UTF-8 (a UTF-16
 * surrogate pair is one character), cut before the first character that
 * does not fit. A fault, or a unit that is no character, is the probe's
 * error, or gives `err` when there is one (SystemTap's messages). */
EXPORT void rt_user_string_utf(u8 *R, u8 *ctx, char *dst, u64 addr, i64 width, const char *err, i64 loc,
                               i64 cap) {
    i64 len = 0;
    u64 p = addr;
    dst[0] = 0;
    for (;;) {
        u32 c = 0, lo = 0;
        u64 at = p;
        if (rt_read_user(R, &c, p, width) != width) goto fault;
        if (!c) break;
        p += (u64)width;
        if (width == 2 && c >= 0xD800 && c <= 0xDBFF) {
            if (rt_read_user(R, &lo, p, 2) != 2) goto fault;
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                p += 2;
            }
        }
        int r = utf8_put(dst, &len, cap, c);
        if (r == 0) break;
        if (r < 0) {
            if (err) {
                rt_strcpy(dst, err, cap);
                return;
            }
            if (AT(ctx, C_ERROR, u32)) return;
            char *m = (char *)ctx + CTX_SIZE;
            usize o = 0;
            put_s(m, &o, cap, width == 2 ? "invalid UTF-16 character U+" : "invalid UTF-32 character U+");
            char h[9];
            int k = 0;
            for (int sh = 28; sh >= 0; sh -= 4)
                if ((c >> sh) || sh == 0 || k) h[k++] = "0123456789ABCDEF"[(c >> sh) & 15];
            h[k] = 0;
            put_s(m, &o, cap, h);
            put_s(m, &o, cap, " at ");
            put_hex(m, &o, cap, at, 1);
            AT(ctx, C_ERROR, u32) = ERR_FAULT;
            AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
            dst[0] = 0;
            return;
        }
    }
    dst[len] = 0;
    return;
fault:
    if (err) {
        rt_strcpy(dst, err, cap);
    } else {
        dst[0] = 0;
        fault_error(ctx, "user string copy fault at ", p, loc, cap);
    }
}

/* The load bias, in this process, of module `idx` of the probe table's
 * (one a script function's `@var(..., "module")` names): the calling
 * probe's address less its link-time one, when the probe is in that
 * module; else the probe's error. */
EXPORT i64 rt_module_bias(u8 *R, u8 *ctx, i64 idx, i64 loc, i64 cap) {
    u32 p = AT(ctx, C_PROBE, u32);
    u64 at = AT(TR(R), H_PROBES_OFF, u64) + (u64)p * PROBE_ROW_SIZE;
    u64 addr = AT(ctx, C_ADDR, u64);
    if (at + PROBE_ROW_SIZE <= AT(TR(R), H_REGION_SIZE, u64) && addr && AT(TR(R) + at, 24, u32) == (u32)idx)
        return (i64)(addr - AT(TR(R) + at, 16, u64));
    probe_error(ctx, ERR_FAULT, "@var of another module in a function: the probe that called it is not in that module",
                loc, cap);
    return 0;
}

/* ---- floating point (SystemTap's floatingpoint tapset) ---- */

/* IEEE 754 binary64 arithmetic on the integer registers (the runtime
 * library uses no floating-point register: a target thread's would be
 * clobbered), correctly rounded to nearest, ties to even, as Berkeley
 * SoftFloat computes it (SystemTap's runtime/softfloat.c): a value is its
 * 64 bits in a long. The layout of a significand under rounding follows
 * SoftFloat's: its leading 1 at bit 62, ten bits below the result's. */

#define F64_SIGN(a) ((a) >> 63)
#define F64_EXP(a) ((i64)(((a) >> 52) & 0x7FF))
#define F64_FRAC(a) ((a) & 0x000FFFFFFFFFFFFFULL)
#define F64_NAN 0x7FF8000000000000ULL
#define F64_PACK(s, e, sig) (((u64)(s) << 63) + ((u64)(e) << 52) + (sig))

LOCAL int clz64(u64 a) { return a ? __builtin_clzll(a) : 64; }

/* u in decimal into buf (at least 21 bytes). */
LOCAL void u64_dec(char *buf, u64 u) {
    char t[21];
    int n = 0;
    do {
        t[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    for (int i = 0; i < n; i++) buf[i] = t[n - 1 - i];
    buf[n] = 0;
}

LOCAL u64 shift_right_jam(u64 a, i64 dist) {
    return dist < 63 ? a >> dist | ((a << (-dist & 63)) != 0) : (a != 0);
}

LOCAL u64 round_pack(u64 sign, i64 exp, u64 sig) {
    u64 round_bits = sig & 0x3FF;
    if ((u64)exp >= 0x7FD) {
        if (exp < 0) {
            sig = shift_right_jam(sig, -exp);
            exp = 0;
            round_bits = sig & 0x3FF;
        } else if (exp > 0x7FD || sig + 0x200 >= 0x8000000000000000ULL) {
            return F64_PACK(sign, 0x7FF, 0);
        }
    }
    sig = (sig + 0x200) >> 10;
    if (round_bits == 0x200) sig &= ~1ULL;
    if (!sig) exp = 0;
    return F64_PACK(sign, exp, sig);
}

LOCAL u64 norm_round_pack(u64 sign, i64 exp, u64 sig) {
    int shift = clz64(sig) - 1;
    exp -= shift;
    if (shift >= 10 && (u64)exp < 0x7FD) return F64_PACK(sign, sig ? exp : 0, sig << (shift - 10));
    return round_pack(sign, exp, sig << shift);
}

/* A subnormal's significand made normal: its exponent and significand. */
LOCAL u64 norm_subnormal(u64 sig, i64 *exp) {
    int shift = clz64(sig) - 11;
    *exp = 1 - shift;
    return sig << shift;
}

LOCAL int f64_is_nan(u64 a) { return F64_EXP(a) == 0x7FF && F64_FRAC(a); }

LOCAL u64 f64_from_i64(i64 a) {
    u64 sign = a < 0;
    if (!(a & 0x7FFFFFFFFFFFFFFFLL)) return sign ? F64_PACK(1, 0x43E, 0) : 0;
    u64 abs = sign ? -(u64)a : (u64)a;
    return norm_round_pack(sign, 0x43C, abs);
}

LOCAL u64 add_mags(u64 a, u64 b, u64 sign) {
    i64 ea = F64_EXP(a), eb = F64_EXP(b), ez;
    u64 sa = F64_FRAC(a), sb = F64_FRAC(b), sz;
    i64 d = ea - eb;
    if (!d) {
        if (!ea) return a + sb;
        if (ea == 0x7FF) return (sa | sb) ? F64_NAN : a;
        ez = ea;
        sz = (0x0020000000000000ULL + sa + sb) << 9;
    } else {
        sa <<= 9;
        sb <<= 9;
        if (d < 0) {
            if (eb == 0x7FF) return sb ? F64_NAN : F64_PACK(sign, 0x7FF, 0);
            ez = eb;
            sa = ea ? sa + 0x2000000000000000ULL : sa << 1;
            sa = shift_right_jam(sa, -d);
        } else {
            if (ea == 0x7FF) return sa ? F64_NAN : a;
            ez = ea;
            sb = eb ? sb + 0x2000000000000000ULL : sb << 1;
            sb = shift_right_jam(sb, d);
        }
        sz = 0x2000000000000000ULL + sa + sb;
        if (sz < 0x4000000000000000ULL) {
            ez--;
            sz <<= 1;
        }
    }
    return round_pack(sign, ez, sz);
}

LOCAL u64 sub_mags(u64 a, u64 b, u64 sign) {
    i64 ea = F64_EXP(a), eb = F64_EXP(b), ez;
    u64 sa = F64_FRAC(a), sb = F64_FRAC(b), sz;
    i64 d = ea - eb;
    if (!d) {
        if (ea == 0x7FF) return F64_NAN;
        i64 diff = (i64)(sa - sb);
        if (!diff) return 0;
        if (ea) ea--;
        if (diff < 0) {
            sign ^= 1;
            diff = -diff;
        }
        int shift = clz64((u64)diff) - 11;
        ez = ea - shift;
        if (ez < 0) {
            shift = (int)ea;
            ez = 0;
        }
        return F64_PACK(sign, ez, (u64)diff << shift);
    }
    sa <<= 10;
    sb <<= 10;
    if (d < 0) {
        sign ^= 1;
        if (eb == 0x7FF) return sb ? F64_NAN : F64_PACK(sign, 0x7FF, 0);
        sa += ea ? 0x4000000000000000ULL : sa;
        sa = shift_right_jam(sa, -d);
        sb |= 0x4000000000000000ULL;
        ez = eb;
        sz = sb - sa;
    } else {
        if (ea == 0x7FF) return sa ? F64_NAN : a;
        sb += eb ? 0x4000000000000000ULL : sb;
        sb = shift_right_jam(sb, d);
        sa |= 0x4000000000000000ULL;
        ez = ea;
        sz = sa - sb;
    }
    return norm_round_pack(sign, ez - 1, sz);
}

LOCAL u64 f64_add_(u64 a, u64 b) {
    if (f64_is_nan(a) || f64_is_nan(b)) return F64_NAN;
    return F64_SIGN(a) == F64_SIGN(b) ? add_mags(a, b, F64_SIGN(a)) : sub_mags(a, b, F64_SIGN(a));
}

LOCAL u64 f64_sub_(u64 a, u64 b) {
    if (f64_is_nan(a) || f64_is_nan(b)) return F64_NAN;
    return F64_SIGN(a) == F64_SIGN(b) ? sub_mags(a, b, F64_SIGN(a)) : add_mags(a, b, F64_SIGN(a));
}

LOCAL u64 f64_mul_(u64 a, u64 b) {
    u64 sign = F64_SIGN(a) ^ F64_SIGN(b);
    i64 ea = F64_EXP(a), eb = F64_EXP(b);
    u64 sa = F64_FRAC(a), sb = F64_FRAC(b);
    if (f64_is_nan(a) || f64_is_nan(b)) return F64_NAN;
    if (ea == 0x7FF) return (eb | sb) ? F64_PACK(sign, 0x7FF, 0) : F64_NAN;
    if (eb == 0x7FF) return (ea | sa) ? F64_PACK(sign, 0x7FF, 0) : F64_NAN;
    if (!ea) {
        if (!sa) return F64_PACK(sign, 0, 0);
        sa = norm_subnormal(sa, &ea);
    }
    if (!eb) {
        if (!sb) return F64_PACK(sign, 0, 0);
        sb = norm_subnormal(sb, &eb);
    }
    i64 ez = ea + eb - 0x3FF;
    sa = (sa | 0x0010000000000000ULL) << 10;
    sb = (sb | 0x0010000000000000ULL) << 11;
    unsigned __int128 p = (unsigned __int128)sa * sb;
    u64 sz = (u64)(p >> 64) | ((u64)p != 0);
    if (sz < 0x4000000000000000ULL) {
        ez--;
        sz <<= 1;
    }
    return round_pack(sign, ez, sz);
}

LOCAL u64 f64_div_(u64 a, u64 b) {
    u64 sign = F64_SIGN(a) ^ F64_SIGN(b);
    i64 ea = F64_EXP(a), eb = F64_EXP(b);
    u64 sa = F64_FRAC(a), sb = F64_FRAC(b);
    if (f64_is_nan(a) || f64_is_nan(b)) return F64_NAN;
    if (ea == 0x7FF) return eb == 0x7FF ? F64_NAN : F64_PACK(sign, 0x7FF, 0);
    if (eb == 0x7FF) return F64_PACK(sign, 0, 0);
    if (!eb) {
        if (!sb) return (ea | sa) ? F64_PACK(sign, 0x7FF, 0) : F64_NAN;
        sb = norm_subnormal(sb, &eb);
    }
    if (!ea) {
        if (!sa) return F64_PACK(sign, 0, 0);
        sa = norm_subnormal(sa, &ea);
    }
    i64 ez = ea - eb + 0x3FE;
    sa |= 0x0010000000000000ULL;
    sb |= 0x0010000000000000ULL;
    if (sa < sb) {
        ez--;
        sa <<= 1;
    }
    /* The quotient's 63 bits, its leading 1 at bit 62; a remainder left
     * is the sticky bit. */
    u64 q = 0, r = sa;
    for (int i = 62; i >= 0; i--) {
        if (r >= sb) {
            r -= sb;
            q |= 1ULL << i;
        }
        r <<= 1;
    }
    return round_pack(sign, ez, q | (r != 0));
}

/* IEEE remainder: a - n*b, n the integer nearest a/b (ties to even). */
LOCAL u64 f64_rem_(u64 a, u64 b) {
    u64 sign = F64_SIGN(a);
    i64 ea = F64_EXP(a), eb = F64_EXP(b);
    u64 sa = F64_FRAC(a), sb = F64_FRAC(b);
    if (f64_is_nan(a) || f64_is_nan(b) || ea == 0x7FF) return F64_NAN;
    if (eb == 0x7FF) return a;
    if (!eb) {
        if (!sb) return F64_NAN;
        sb = norm_subnormal(sb, &eb);
    }
    if (!ea) {
        if (!sa) return a;
        sa = norm_subnormal(sa, &ea);
    }
    sa |= 0x0010000000000000ULL;
    sb |= 0x0010000000000000ULL;
    i64 d = ea - eb;
    if (d < -1) return a;
    /* r: a's significand reduced modulo b's, at b's exponent (one bit
     * lower when a is half of b's scale, d = -1: everything doubled). */
    u64 r, q = 0, m = sb;
    i64 base = eb;
    if (d == -1) {
        r = sa;
        m = sb << 1;
        base = eb - 1;
        if (r >= m) {
            r -= m;
            q = 1;
        }
    } else {
        r = sa;
        if (r >= m) {
            r -= m;
            q = 1;
        }
        for (i64 i = 0; i < d; i++) {
            r <<= 1;
            q = q << 1;
            if (r >= m) {
                r -= m;
                q |= 1;
            }
        }
    }
    /* Nearest: past half of b, or half with n odd, takes one b more. */
    if (2 * r > m || (2 * r == m && (q & 1))) {
        r = m - r;
        sign ^= 1;
    }
    if (!r) return F64_PACK(sign, 0, 0);
    /* r * 2^(base - 0x3FF - 52): exact. */
    return norm_round_pack(sign, base - 1 + 10, r);
}

LOCAL u64 f64_sqrt_(u64 a) {
    i64 e = F64_EXP(a);
    u64 s = F64_FRAC(a);
    if (f64_is_nan(a)) return F64_NAN;
    if (F64_SIGN(a)) return (e | s) ? F64_NAN : a;
    if (e == 0x7FF) return a;
    if (!e) {
        if (!s) return a;
        s = norm_subnormal(s, &e);
    }
    s |= 0x0010000000000000ULL;
    /* a = s * 2^E, E = e - 0x3FF - 52, made even. */
    i64 E = e - 0x3FF - 52;
    if (E & 1) {
        s <<= 1;
        E--;
    }
    unsigned __int128 m = (unsigned __int128)s << 72, root = 0, bit = (unsigned __int128)1 << 126;
    while (bit > m) bit >>= 2;
    while (bit) {
        if (m >= root + bit) {
            m -= root + bit;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    /* root in [2^62, 2^63): the value root * 2^(E/2 - 36). */
    return round_pack(0, 0x3FE + 62 + E / 2 - 36, (u64)root | (m != 0));
}

LOCAL int f64_eq_(u64 a, u64 b) {
    if (f64_is_nan(a) || f64_is_nan(b)) return 0;
    return a == b || !((a | b) & 0x7FFFFFFFFFFFFFFFULL);
}

LOCAL int f64_le_(u64 a, u64 b) {
    if (f64_is_nan(a) || f64_is_nan(b)) return 0;
    if (F64_SIGN(a) != F64_SIGN(b)) return F64_SIGN(a) || !((a | b) & 0x7FFFFFFFFFFFFFFFULL);
    return a == b || (F64_SIGN(a) ^ (a < b));
}

LOCAL int f64_lt_(u64 a, u64 b) {
    if (f64_is_nan(a) || f64_is_nan(b)) return 0;
    if (F64_SIGN(a) != F64_SIGN(b)) return F64_SIGN(a) && ((a | b) & 0x7FFFFFFFFFFFFFFFULL);
    return a != b && (F64_SIGN(a) ^ (a < b));
}

/* To a long, rounded as `mode` says: 0 to nearest (ties even), 1 toward
 * zero, 2 down, 3 up, 4 to nearest (ties away); out of range, SoftFloat's
 * (the largest or smallest long). */
LOCAL i64 f64_to_i64_(u64 a, i64 mode) {
    u64 sign = F64_SIGN(a), s = F64_FRAC(a);
    i64 e = F64_EXP(a);
    if (e == 0x7FF && s) return 0x7FFFFFFFFFFFFFFFLL;
    if (e) s |= 0x0010000000000000ULL;
    i64 shift = 0x433 - e;
    u64 abs, frac;
    if (shift <= 0) {
        if (shift < -10) {
            if (a == F64_PACK(1, 0x43E, 0)) return (i64)0x8000000000000000ULL;
            return sign ? (i64)0x8000000000000000ULL : 0x7FFFFFFFFFFFFFFFLL;
        }
        abs = s << -shift;
        frac = 0;
    } else if (shift < 64) {
        abs = s >> shift;
        frac = s << (64 - shift);
    } else {
        abs = 0;
        frac = s != 0; /* below a half */
    }
    if (frac) {
        u64 half = 0x8000000000000000ULL;
        int up = 0;
        switch (mode) {
        case 0: up = frac > half || (frac == half && (abs & 1)); break;
        case 2: up = sign; break;
        case 3: up = !sign; break;
        case 4: up = frac >= half; break;
        default: break;
        }
        abs += (u64)up;
    }
    if (!sign && abs > 0x7FFFFFFFFFFFFFFFULL) return 0x7FFFFFFFFFFFFFFFLL;
    if (sign && abs > 0x8000000000000000ULL) return (i64)0x8000000000000000ULL;
    return sign ? (i64)(0 - abs) : (i64)abs;
}

/* binary32 (its 32 bits in a long) to binary64: exact. */
LOCAL u64 f32_to_f64_(u64 a) {
    u64 sign = (a >> 31) & 1, s = a & 0x7FFFFF;
    i64 e = (a >> 23) & 0xFF;
    if (e == 0xFF) return s ? F64_NAN : F64_PACK(sign, 0x7FF, 0);
    if (!e) {
        if (!s) return F64_PACK(sign, 0, 0);
        int shift = clz64(s) - 40;
        e = 1 - shift;
        s = (s << shift) & 0x7FFFFF;
    }
    return F64_PACK(sign, e + 0x380, s << 29);
}

/* The floating-point tapset's operations: `op` (FP_* in the tapset) on a
 * and b (c: fp_to_long's rounding mode). */
EXPORT i64 rt_fp(i64 op, i64 a, i64 b, i64 c) {
    (void)c;
    u64 x = (u64)a, y = (u64)b;
    switch (op) {
    case 0: return (i64)f64_add_(x, y);
    case 1: return (i64)f64_sub_(x, y);
    case 2: return (i64)f64_mul_(x, y);
    case 3: return (i64)f64_div_(x, y);
    case 4: return (i64)f64_rem_(x, y);
    case 5: return (i64)f64_sqrt_(x);
    case 6: return f64_eq_(x, y);
    case 7: return f64_le_(x, y);
    case 8: return f64_lt_(x, y);
    case 9: return (i64)f64_from_i64(a);
    case 10: return f64_to_i64_(x, b);
    case 11: return (i64)f32_to_f64_(x);
    default: return 0;
    }
}

/* fp_to_string(fp, precision), as SystemTap writes it: below 1e18 the
 * integer part, a point and `precision` digits (the last rounded from the
 * next); from 1e18 on, divided by ten until it is not, the number of
 * divisions after an `e`. */
EXPORT void rt_fp_to_string(char *dst, i64 a, i64 precision, i64 cap) {
    u64 x = (u64)a;
    usize o = 0;
    dst[0] = 0;
    if (F64_EXP(x) == 0x7FF) {
        put_s(dst, &o, cap, F64_FRAC(x) ? "NaN" : F64_SIGN(x) ? "-Infinity" : "Infinity");
        return;
    }
    if (F64_SIGN(x)) put_s(dst, &o, cap, "-");
    x &= 0x7FFFFFFFFFFFFFFFULL;
    u64 ten = f64_from_i64(10), limit = f64_from_i64(1000000000000000000LL);
    i64 e10 = 0;
    while (f64_le_(limit, x)) {
        x = f64_div_(x, ten);
        e10++;
    }
    char buf[24];
    i64 ipart = f64_to_i64_(x, 1);
    u64 fpart = f64_sub_(x, f64_from_i64(ipart));
    u64_dec(buf, (u64)ipart);
    put_s(dst, &o, cap, buf);
    if (precision > 0) {
        put_s(dst, &o, cap, ".");
        for (i64 i = 0; i < precision - 1; i++) {
            fpart = f64_mul_(fpart, ten);
            i64 d = f64_to_i64_(fpart, 1);
            u64_dec(buf, (u64)d);
            put_s(dst, &o, cap, buf);
            fpart = f64_sub_(fpart, f64_from_i64(d));
        }
        fpart = f64_mul_(fpart, ten);
        i64 last = f64_to_i64_(fpart, 1);
        fpart = f64_sub_(fpart, f64_from_i64(last));
        fpart = f64_mul_(fpart, ten);
        if (f64_to_i64_(fpart, 1) >= 5) last++;
        u64_dec(buf, (u64)last);
        put_s(dst, &o, cap, buf);
    }
    if (e10) {
        put_s(dst, &o, cap, "e");
        u64_dec(buf, (u64)e10);
        put_s(dst, &o, cap, buf);
    }
}

/* string_to_fp(text), as SystemTap reads it (its runtime's str_to_f64):
 * the digits before and after a point into one value, each step rounded,
 * a power of ten for the point and the exponent, then sign * (value /
 * power); text that is not such a number is the probe's error ("invalid
 * format"). */
EXPORT i64 rt_string_to_fp(u8 *ctx, const char *s, i64 loc, i64 cap) {
    u64 one = f64_from_i64(1), ten = f64_from_i64(10);
    usize i = 0;
    u64 sign = f64_from_i64(s[0] == '-' ? -1 : 1);
    if (s[i] == '-' || s[i] == '+') i++;
    u64 value = 0, power = one;
    for (; s[i] >= '0' && s[i] <= '9'; i++) value = f64_add_(f64_mul_(value, ten), f64_from_i64(s[i] - '0'));
    if (s[i] == '.') i++;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        value = f64_add_(f64_mul_(value, ten), f64_from_i64(s[i] - '0'));
        power = f64_mul_(power, ten);
    }
    if (s[i] == 'e' || s[i] == 'E') {
        i++;
        int negative = s[i] == '-';
        if (s[i] == '-' || s[i] == '+') i++;
        u64 power2 = 0;
        for (; s[i] >= '0' && s[i] <= '9'; i++) power2 = f64_add_(f64_mul_(power2, ten), f64_from_i64(s[i] - '0'));
        /* One step a unit of the exponent (bounded: past 400 the power is
         * 0 or infinite and stays so). */
        i64 n = f64_to_i64_(power2, 1);
        for (i64 k = 0; k < n && k < 400; k++) power = negative ? f64_mul_(power, ten) : f64_div_(power, ten);
    }
    if (s[i]) {
        probe_error(ctx, ERR_USER, "invalid format", loc, cap);
        return 0;
    }
    return (i64)f64_mul_(sign, f64_div_(value, power));
}

/* ---- context ---- */

EXPORT void rt_execname(u8 *R, u8 *slot, char *dst, i64 cap) {
    char name[17];
    if (slot && AT(slot, TS_PID, u32) != (u32)AT(TR(R), H_PID, u64)) {
        /* Another process than the region's (a child it forked, maybe
         * running another program): its own name. */
        name[0] = 0;
        sys6(SYS_prctl, 16 /* PR_GET_NAME */, (i64)name, 0, 0, 0, 0);
    } else {
        memcpy(name, R + H_EXECNAME, 16);
    }
    name[16] = 0;
    rt_strcpy(dst, name, cap);
}

/* thread_indent(delta), as SystemTap's indent.stp: "%6d %s(%d):%-*s" with
 * microseconds since the thread's depth was 0, the process name and tid,
 * and the depth in spaces. */
EXPORT void rt_thread_indent(u8 *R, u8 *ctx, char *dst, i64 delta, i64 cap) {
    /* The thread's slot has its tid (a lean trampoline fills no context
     * tid); in the tracer, the system call's. */
    u8 *ts = (u8 *)AT(ctx, C_SLOT, u64);
    u64 tid = ts && AT(ts, TS_TID, u32) ? (u64)AT(ts, TS_TID, u32) : (u64)rt_tid(ctx);
    u8 *tabp = R + AT(TR(R), H_INDENT_OFF, u64);
    u8 *slot = 0;
    for (u64 i = 0; i < INDENT_SLOTS; i++) {
        u8 *s = tabp + ((tid + i) % INDENT_SLOTS) * IS_SIZE;
        u64 cur = __atomic_load_n(&AT(s, 0, u64), __ATOMIC_ACQUIRE);
        if (cur == tid) {
            slot = s;
            break;
        }
        u64 z = 0;
        if (cur == 0 && __atomic_compare_exchange_n(&AT(s, 0, u64), &z, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            slot = s;
            break;
        }
    }
    i64 now = rt_now_ns(R);
    i64 depth = 0, elapsed = 0;
    if (slot) {
        i64 counter = AT(slot, 8, i64);
        if (counter <= 0) AT(slot, 16, u64) = (u64)now;
        i64 x = counter + (delta > 0 ? delta : 0);
        AT(slot, 8, i64) = counter + delta;
        depth = x > 0 ? x - 1 : 0;
        elapsed = (now - (i64)AT(slot, 16, u64)) / 1000;
    }
    char name[17];
    memcpy(name, R + H_EXECNAME, 16);
    name[16] = 0;
    /* %6d %s(%d):%-*s */
    u8 fmt[64];
    usize o = 0;
#define CONV(k, f, w)                                                                                                  \
    do {                                                                                                               \
        fmt[o++] = FMT_CONV;                                                                                           \
        fmt[o++] = (k);                                                                                                \
        fmt[o++] = (f);                                                                                                \
        i64 w_ = (w);                                                                                                  \
        for (int b = 0; b < 4; b++) fmt[o++] = (u8)((u64)w_ >> (8 * b));                                             \
        for (int b = 0; b < 4; b++) fmt[o++] = 0xff;                                                                   \
    } while (0)
#define TEXT(c)                                                                                                        \
    do {                                                                                                               \
        fmt[o++] = FMT_TEXT;                                                                                           \
        fmt[o++] = 1;                                                                                                  \
        fmt[o++] = 0;                                                                                                  \
        fmt[o++] = (c);                                                                                                \
    } while (0)
    CONV(CONV_SIGNED, 0, 6);
    TEXT(' ');
    CONV(CONV_STRING, 0, COUNT_NONE);
    TEXT('(');
    CONV(CONV_SIGNED, 0, COUNT_NONE);
    TEXT(')');
    TEXT(':');
    CONV(CONV_STRING, FLAG_LEFT, COUNT_ARG);
    fmt[o++] = FMT_END;
#undef CONV
#undef TEXT
    i64 args[5] = {elapsed, (i64)name, (i64)tid, depth, (i64)""};
    rt_format(dst, cap, fmt, args, 5);
}

/* The saved word of argument register n (1-based, n <= NARG_REGS). */
LOCAL i64 *arg_reg(u8 *regs, i64 n) {
    static const u8 arg_regs[NARG_REGS] = ARG_REG_OFFSETS;
    return &AT(regs, arg_regs[n - 1], i64);
}

/* In a probe on a Go function (its context names the goid's place),
 * argument words follow Go's register ABI: the saved word of its
 * register n (1-based), or 0 past them (Go puts the arguments that do not
 * fit in registers on the stack whole, so word n has no fixed place). */
LOCAL int go_arg(u8 *ctx, u8 *regs, i64 n, i64 **at) {
    static const u8 go_regs[NGO_ARG_REGS] = GO_ARG_REG_OFFSETS;
    if (!AT(ctx, C_GO_GOID, u32)) return 0;
    *at = n >= 1 && n <= NGO_ARG_REGS ? &AT(regs, go_regs[n - 1], i64) : 0;
    return 1;
}

/* $argN (1-based: the ABI's argument registers, then the stack from the
 * entry's stack pointer, past the return address on x86_64:
 * STACK_ARGS_AT), $return and register("...") of a function probe; 0
 * elsewhere. */
EXPORT i64 rt_arg(u8 *R, u8 *ctx, i64 n) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    if (!regs || n < 1) return 0;
    i64 *go;
    if (go_arg(ctx, regs, n, &go)) return go ? *go : 0;
    if (n <= NARG_REGS) return *arg_reg(regs, n);
    i64 v = 0;
    rt_read_user(R, &v, AT(regs, REG_SP, u64) + STACK_ARGS_AT + 8 * (u64)(n - NARG_REGS - 1), 8);
    return v;
}

/* Guru mode: `$argN = v` (n >= 1) and `$return = v` (n = 0). The
 * registers are the trampoline's saved copies, which it loads back before
 * the function goes on (or returns to its caller); argument n > 6 is the
 * stack slot the caller passed it in. Outside a function probe, nothing. */
EXPORT void rt_set_arg(u8 *ctx, i64 n, i64 v) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    if (!regs || n < 0) return;
    i64 *go;
    if (n > 0 && go_arg(ctx, regs, n, &go)) {
        if (go) *go = v;
        return;
    }
    if (n == 0)
        AT(regs, REG_RETURN, i64) = v;
    else if (n <= NARG_REGS)
        *arg_reg(regs, n) = v;
    else {
        /* Fault-safe: a write into this process that cannot fault it. */
        struct {
            u64 base, len;
        } local = {(u64)&v, 8}, remote = {AT(regs, REG_SP, u64) + STACK_ARGS_AT + 8 * (u64)(n - NARG_REGS - 1), 8};
        sys6(SYS_process_vm_writev, sys6(SYS_getpid, 0, 0, 0, 0, 0, 0), (i64)&local, 1, (i64)&remote, 1, 0);
    }
}

/* Guru mode: a register's saved copy, which the trampoline loads back
 * (every general-purpose register but the stack pointer, on the full
 * path that handlers using registers take). */
EXPORT void rt_set_register(u8 *ctx, i64 index, i64 v) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    if (regs && index >= 0 && index < NREGS && index != (i64)(REG_SP / 8) && index != (i64)(REG_PC / 8))
        AT(regs, 8 * index, i64) = v;
}

EXPORT i64 rt_register(u8 *ctx, i64 index) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    return regs ? AT(regs, 8 * index, i64) : 0;
}

/* ubacktrace(): the return addresses of the probed thread's frame-pointer
 * chain, as "0x… 0x…" (read fault-safe). "" outside function probes. */
LOCAL u8 *shadow_frame(u8 *R, u8 *slot, u32 i);

/* Where a shadow frame's function keeps the return address it replaced:
 * what the unwinder reads (its slot, or on aarch64 where the prologue
 * saved x30: SF_SAVED bytes from it, less its low bits). */
LOCAL u64 *saved_return(u8 *f) {
    return (u64 *)(AT(f, SF_SP, u64) + (u64)(i64)(AT(f, SF_SAVED, i32) & ~SAVED_SIGNED));
}

/* A return address as the program put it: where a return probe's
 * trampoline took the slot over (the slot at `at` holds the trampoline's
 * address, and a frame of this thread's shadow stack says so), the
 * original one. */
LOCAL u64 real_return(u8 *R, u8 *slot, u64 at, u64 pc) {
    if (!slot) return pc;
    for (u32 d = AT(slot, TS_DEPTH, u32); d > 0; d--) {
        u8 *f = shadow_frame(R, slot, d - 1);
        /* At the frame's slot (x86_64; aarch64's link register at the
         * entry, which the trampoline's slot stands for) or where the
         * function saved it. */
        if ((AT(f, SF_SP, u64) == at || (u64)saved_return(f) == at) && AT(f, SF_TRAMP, u64) == pc)
            return AT(f, SF_RET, u64) & PC_MASK;
    }
    return pc;
}

/* A program counter in a trampoline's copy of a probed function's first
 * instructions, at the same offset in the original (symbol table `tab`). */
LOCAL u64 unrelocate(const u8 *tab, u64 pc) {
    if (!tab) return pc;
    /* Acquire: pairs with the tracer's Release store of the count. */
    u32 n = __atomic_load_n(&AT(tab, ST_NRELOCS, u32), __ATOMIC_ACQUIRE);
    const u8 *r = tab + AT(tab, ST_RELOCS, u32);
    for (u32 i = 0; i < n; i++, r += SYM_RELOC_SIZE) {
        u64 d = pc - AT(r, SR_COPY, u64);
        if (d < AT(r, SR_COPY_LEN, u32)) {
            u32 ol = AT(r, SR_ORIG_LEN, u32);
            return AT(r, SR_ORIG, u64) + (d < ol ? d : ol);
        }
    }
    return pc;
}

/* The module slots of symbol table `tab` in use: pass 2's modules, then
 * the libraries loaded later that the tracer has added so far. */
LOCAL u32 sym_modules(const u8 *tab) {
    /* Acquire: pairs with the tracer's Release store of the count, after
     * the slots and their entries, rows and names. */
    u32 late = __atomic_load_n(&AT(tab, ST_LATE_USED, u32), __ATOMIC_ACQUIRE);
    u32 cap = AT(tab, ST_LATE_CAP, u32);
    return AT(tab, ST_NMODULES, u32) + (late < cap ? late : cap);
}

/* The unwind rule for `pc` (a lookup address: a return address minus
 * one) from its module's rows in symbol table `tab`; UNW_NONE when no
 * module with rows holds it. */
LOCAL u32 unwind_rule_at(const u8 *tab, u64 pc) {
    if (!tab) return UNW_NONE;
    u32 nm = sym_modules(tab);
    for (u32 m = 0; m < nm; m++) {
        const u8 *md = tab + SYM_TABLE_HEADER + (u64)m * SYM_MODULE_SIZE;
        /* Acquire: pairs with the tracer's Release store after the bias. */
        if (!__atomic_load_n(&AT(md, SM_MAPPED, u32), __ATOMIC_ACQUIRE)) continue;
        u32 count = AT(md, SM_UNWIND_COUNT, u32);
        if (!count) continue;
        const u8 *rows = tab + AT(md, SM_UNWIND, u32);
        u64 v = pc - AT(md, SM_BIAS, u64);
        /* Inside the module's rows: from the first to the last (a gap
         * marker at the end of its last function). */
        if (v < AT(rows, UW_ADDR, u64) || v >= AT(rows + (u64)(count - 1) * UNWIND_ROW_SIZE, UW_ADDR, u64)) continue;
        u32 lo = 0, hi = count;
        while (lo < hi) {
            u32 mid = lo + (hi - lo) / 2;
            if (AT(rows + (u64)mid * UNWIND_ROW_SIZE, UW_ADDR, u64) <= v)
                lo = mid + 1;
            else
                hi = mid;
        }
        return AT(rows + (u64)(lo - 1) * UNWIND_ROW_SIZE, UW_RULE, u32);
    }
    return UNW_NONE;
}

/* The probed thread's stack: up to `max` program counters, the probe
 * point's first. Each frame steps to its caller by its module's CFI rows
 * (the CFA from the stack or frame pointer, the return address below it,
 * the caller's frame pointer where the frame saved it), or where there is
 * no row, by the frame-pointer chain. Return addresses our return probes
 * replaced and relocated copies map back (with `tab`, when given). */
LOCAL u32 backtrace(u8 *R, u8 *ctx, const u8 *tab, u64 *pcs, u32 max) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    if (!regs) return 0;
    u32 n = 0;
    if (AT(ctx, C_FLAGS, u32) & CTX_SAMPLE) {
        /* A sample: the tracer unwound the stack with the modules' CFI
         * when it was taken (the thread has moved on since). */
        u64 k = AT(regs, SAMPLE_FRAMES_AT, u64);
        if (k > SAMPLE_FRAMES) k = SAMPLE_FRAMES;
        for (; n < max && n < k; n++) pcs[n] = AT(regs, SAMPLE_PCS_AT + 8 * (u64)n, u64);
        return n;
    }
    u8 *slot = (u8 *)AT(ctx, C_SLOT, u64);
    u64 pc = AT(regs, REG_PC, u64), fp = AT(regs, REG_FP, u64), sp = AT(regs, REG_SP, u64);
    int first = 1;
    int entry = pc && pc == AT(ctx, C_ADDR, u64);
#ifdef REG_RA
    /* A return probe's pc is the return address, which the link register
     * holds too: not a function's entry. */
    if ((AT(regs, REG_RA, u64) & PC_MASK) == pc) entry = 0;
#endif
    if (entry && n < max && unwind_rule_at(tab, pc) == UNW_NONE) {
        /* At a function's entry (before its prologue) with no CFI: its
         * caller's return address is on top of the stack (x86_64) or in
         * the link register (aarch64, whose trampolines name entry sp - 8
         * its slot), and the frame pointer is still the caller's. */
        pcs[n++] = pc;
        u64 ret;
#ifdef REG_RA
        ret = AT(regs, REG_RA, u64) & PC_MASK;
        pc = unrelocate(tab, real_return(R, slot, sp - 8, ret));
#else
        if (rt_read_user(R, &ret, sp, 8) != 8) return n;
        pc = unrelocate(tab, real_return(R, slot, sp, ret));
        sp += 8;
#endif
        first = 0;
    }
    while (n < max && pc) {
        pcs[n++] = pc;
        u32 rule = unwind_rule_at(tab, first ? pc : pc - 1);
        u32 kind = rule & 3;
        first = 0;
        if (kind == UNW_END) break;
        if (kind == UNW_NONE) {
            u64 frame[2];
            if (!fp || rt_read_user(R, frame, fp, 16) != 16 || frame[0] <= fp) break;
            pc = unrelocate(tab, real_return(R, slot, fp + 8, frame[1] & PC_MASK));
            sp = fp + 16;
            fp = frame[0];
            continue;
        }
        u64 cfa = (kind == UNW_CFA_SP ? sp : fp) + 8 * (u64)((rule >> 3) & 0x1fff), ret;
        if (cfa <= sp || rt_read_user(R, &ret, cfa - 8, 8) != 8) break;
        if (rule & 4) {
            i64 off = 8 * (i64)(short)(rule >> 16);
            if (rt_read_user(R, &fp, cfa + (u64)off, 8) != 8) break;
        }
        pc = unrelocate(tab, real_return(R, slot, cfa - 8, ret & PC_MASK));
        sp = cfa;
    }
    return n;
}

EXPORT void rt_ubacktrace(u8 *R, u8 *ctx, const u8 *tab, char *dst, i64 cap) {
    u64 pcs[64];
    u32 n = backtrace(R, ctx, tab, pcs, 64);
    usize o = 0;
    dst[0] = 0;
    for (u32 i = 0; i < n; i++) {
        /* Whole addresses only: one that does not fit ends the list. */
        char num[24];
        usize k = 0;
        put_hex(num, &k, sizeof num, pcs[i], 1);
        if (o + k + (o ? 1 : 0) > (usize)cap - 1) break;
        if (o) put_s(dst, &o, cap, " ");
        put_s(dst, &o, cap, num);
    }
}

/* The function containing `addr` in symbol table `tab` (SymTable) and its
 * module, or 0. */
LOCAL const u8 *sym_find(const u8 *tab, u64 addr, const u8 **mod) {
    u32 nm = sym_modules(tab);
    for (u32 m = 0; m < nm; m++) {
        const u8 *md = tab + SYM_TABLE_HEADER + (u64)m * SYM_MODULE_SIZE;
        /* Acquire: pairs with the tracer's Release store after the bias. */
        if (!__atomic_load_n(&AT(md, SM_MAPPED, u32), __ATOMIC_ACQUIRE)) continue;
        u64 v = addr - AT(md, SM_BIAS, u64);
        const u8 *e = tab + AT(md, SM_ENTRIES, u32);
        /* The last entry at or below v. */
        u32 lo = 0, hi = AT(md, SM_COUNT, u32);
        while (lo < hi) {
            u32 mid = lo + (hi - lo) / 2;
            if (AT(e + (u64)mid * SYM_ENTRY_SIZE, SY_ADDR, u64) <= v)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (!lo) continue;
        const u8 *f = e + (u64)(lo - 1) * SYM_ENTRY_SIZE;
        if (v - AT(f, SY_ADDR, u64) < AT(f, SY_SIZE, u32)) {
            *mod = md;
            return f;
        }
    }
    return 0;
}

/* usymname(addr): the name of the function containing addr, or addr in
 * hex when no probed module has it. */
EXPORT void rt_usymname(const u8 *tab, i64 addr, char *dst, i64 cap) {
    const u8 *mod;
    const u8 *f = sym_find(tab, (u64)addr, &mod);
    usize o = 0;
    dst[0] = 0;
    if (f)
        put_s(dst, &o, cap, (const char *)tab + AT(f, SY_NAME, u32));
    else
        put_hex(dst, &o, cap, (u64)addr, 1);
}

/* "name+0xoff": `pc` in function `f` of module `md` (symbol table `tab`). */
LOCAL void put_sym_off(char *dst, usize *o, i64 cap, const u8 *tab, const u8 *md, const u8 *f, u64 pc) {
    put_s(dst, o, cap, (const char *)tab + AT(f, SY_NAME, u32));
    put_s(dst, o, cap, "+");
    put_hex(dst, o, cap, pc - AT(md, SM_BIAS, u64) - AT(f, SY_ADDR, u64), 1);
}

/* One frame of sprint_ubacktrace's form into `line` (`cap` bytes): "sym+0xoff
 * [module]\n" with the module's base name, or the address in hex. */
LOCAL void put_frame_simple(char *line, usize *k, i64 cap, const u8 *tab, u64 pc) {
    const u8 *md;
    const u8 *f = sym_find(tab, pc, &md);
    if (f) {
        put_sym_off(line, k, cap, tab, md, f, pc);
        put_s(line, k, cap, " [");
        const char *path = (const char *)tab + AT(md, SM_PATH, u32), *base = path;
        for (const char *p = path; *p; p++)
            if (*p == '/') base = p + 1;
        put_s(line, k, cap, base);
        put_s(line, k, cap, "]");
    } else {
        put_hex(line, k, cap, pc, 1);
    }
    put_s(line, k, cap, "\n");
}

/* Frames `pcs` (n of them) in sprint_ubacktrace's form; whole lines only. */
LOCAL void put_frames_simple(char *dst, i64 cap, const u8 *tab, const u64 *pcs, u32 n) {
    usize o = 0;
    dst[0] = 0;
    for (u32 i = 0; i < n; i++) {
        char line[320];
        usize k = 0;
        line[0] = 0;
        put_frame_simple(line, &k, sizeof line, tab, pcs[i]);
        if (o + k > (usize)cap - 1) break;
        put_s(dst, &o, cap, line);
    }
}

/* sprint_ubacktrace(): one line per frame, as SystemTap's string form
 * (_STP_SYM_SIMPLE): "sym+0xoff [module]\n" with the module's base name,
 * or the address in hex; whole lines only. */
EXPORT void rt_sprint_ubacktrace(u8 *R, u8 *ctx, const u8 *tab, char *dst, i64 cap) {
    u64 pcs[64];
    u32 n = backtrace(R, ctx, tab, pcs, 64);
    put_frames_simple(dst, cap, tab, pcs, n);
}

/* The addresses of a string of them ("0x5f3a 0x5e10 ..." as ubacktrace
 * and ucallers give them, hex with or without 0x, any spaces between):
 * at most `max`. */
LOCAL u32 parse_addrs(const char *s, u64 *pcs, u32 max) {
    u32 n = 0;
    while (*s && n < max) {
        while (*s == ' ' || *s == '\n' || *s == '\t') s++;
        if (!*s) break;
        if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
        u64 v = 0;
        int digits = 0;
        for (;; s++) {
            char c = *s;
            u32 d = c >= '0' && c <= '9' ? (u32)(c - '0')
                    : c >= 'a' && c <= 'f' ? (u32)(c - 'a' + 10)
                    : c >= 'A' && c <= 'F' ? (u32)(c - 'A' + 10)
                                           : 16;
            if (d == 16) break;
            v = v << 4 | d;
            digits++;
        }
        if (!digits) {
            /* Not an address: skip the word. */
            while (*s && *s != ' ' && *s != '\n' && *s != '\t') s++;
            continue;
        }
        pcs[n++] = v;
    }
    return n;
}

/* sprint_usyms(callers): the addresses of `callers` in sprint_ubacktrace's
 * form. */
EXPORT void rt_sprint_usyms(const u8 *tab, const char *callers, char *dst, i64 cap) {
    u64 pcs[64];
    u32 n = parse_addrs(callers, pcs, 64);
    put_frames_simple(dst, cap, tab, pcs, n);
}

/* ucallers(n): the probed thread's callers (the probe point's own frame
 * left out), at most n (all for n < 0), as ubacktrace gives them. */
EXPORT void rt_ucallers(u8 *R, u8 *ctx, const u8 *tab, i64 want, char *dst, i64 cap) {
    u64 pcs[64];
    u32 n = backtrace(R, ctx, tab, pcs, 64);
    usize o = 0;
    dst[0] = 0;
    for (u32 i = 1; i < n && (want < 0 || (i64)i <= want); i++) {
        char num[24];
        usize k = 0;
        put_hex(num, &k, sizeof num, pcs[i], 1);
        if (o + k + (o ? 1 : 0) > (usize)cap - 1) break;
        if (o) put_s(dst, &o, cap, " ");
        put_s(dst, &o, cap, num);
    }
}

/* umodname(addr): the path of the module holding addr (from its first
 * function's start to its last one's end); an error when no module of
 * the symbol table has it. */
EXPORT void rt_umodname(u8 *ctx, const u8 *tab, i64 addr, char *dst, i64 loc, i64 cap) {
    u32 nm = sym_modules(tab);
    dst[0] = 0;
    for (u32 m = 0; m < nm; m++) {
        const u8 *md = tab + SYM_TABLE_HEADER + (u64)m * SYM_MODULE_SIZE;
        u32 count = AT(md, SM_COUNT, u32);
        if (!__atomic_load_n(&AT(md, SM_MAPPED, u32), __ATOMIC_ACQUIRE) || !count) continue;
        u64 v = (u64)addr - AT(md, SM_BIAS, u64);
        const u8 *e = tab + AT(md, SM_ENTRIES, u32);
        const u8 *last = e + (u64)(count - 1) * SYM_ENTRY_SIZE;
        if (v >= AT(e, SY_ADDR, u64) && v < AT(last, SY_ADDR, u64) + AT(last, SY_SIZE, u32)) {
            usize o = 0;
            put_s(dst, &o, cap, (const char *)tab + AT(md, SM_PATH, u32));
            return;
        }
    }
    if (AT(ctx, C_ERROR, u32)) return;
    char *msg = (char *)ctx + CTX_SIZE;
    usize o = 0;
    put_s(msg, &o, cap, "umodname: ");
    put_hex(msg, &o, cap, (u64)addr, 1);
    put_s(msg, &o, cap, " is in no module the session knows");
    AT(ctx, C_ERROR, u32) = ERR_USER;
    AT(ctx, C_ERROR_LOC, u32) = (u32)loc;
}

/* cmdline_str(): the probed process's command line, its arguments
 * separated by spaces (cut at cap - 1 bytes). In a target, its own
 * (/proc/self/cmdline); in the tracer's probes, the region's process's,
 * read from its memory where the tracer found it (no file is opened
 * there). */
EXPORT void rt_cmdline_str(u8 *R, u8 *ctx, char *dst, i64 cap) {
    dst[0] = 0;
    if (cap < 2) return;
    i64 n = 0;
    if (AT(ctx, C_FLAGS, u32) & CTX_MAY_WAIT) {
        u64 a = AT(TR(R), H_ARG_START, u64), e = AT(TR(R), H_ARG_END, u64);
        if (!a || e <= a) return;
        u64 len = e - a < (u64)cap - 1 ? e - a : (u64)cap - 1;
        n = rt_read_user(R, dst, a, len);
    } else {
        i64 fd = sys6(SYS_openat, (u64)-100 /* AT_FDCWD */, (u64) "/proc/self/cmdline", 0x80000 /* O_CLOEXEC */, 0,
                      0, 0);
        if (fd < 0) return;
        n = sys6(SYS_read, (u64)fd, (u64)dst, (u64)cap - 1, 0, 0, 0);
        sys6(SYS_close, (u64)fd, 0, 0, 0, 0, 0);
    }
    if (n <= 0) {
        dst[0] = 0;
        return;
    }
    for (i64 i = 0; i < n; i++)
        if (!dst[i]) dst[i] = ' ';
    while (n > 0 && dst[n - 1] == ' ') n--;
    dst[n] = 0;
}

/* errno_str(err): the name of error number err (or -err), as Linux
 * numbers them on x86_64 and aarch64; "E#N" for one without a name. */
EXPORT void rt_errno_str(i64 err, char *dst, i64 cap) {
    /* Word e of this list (0 and Linux's unused numbers: "-"); constants
     * only, no table of pointers (the library must need no relocation). */
    static const char names[] =
        "- EPERM ENOENT ESRCH EINTR EIO ENXIO E2BIG ENOEXEC EBADF ECHILD EAGAIN ENOMEM EACCES EFAULT ENOTBLK "
        "EBUSY EEXIST EXDEV ENODEV ENOTDIR EISDIR EINVAL ENFILE EMFILE ENOTTY ETXTBSY EFBIG ENOSPC ESPIPE "
        "EROFS EMLINK EPIPE EDOM ERANGE EDEADLK ENAMETOOLONG ENOLCK ENOSYS ENOTEMPTY ELOOP - ENOMSG EIDRM "
        "ECHRNG EL2NSYNC EL3HLT EL3RST ELNRNG EUNATCH ENOCSI EL2HLT EBADE EBADR EXFULL ENOANO EBADRQC "
        "EBADSLT - EBFONT ENOSTR ENODATA ETIME ENOSR ENONET ENOPKG EREMOTE ENOLINK EADV ESRMNT ECOMM EPROTO "
        "EMULTIHOP EDOTDOT EBADMSG EOVERFLOW ENOTUNIQ EBADFD EREMCHG ELIBACC ELIBBAD ELIBSCN ELIBMAX "
        "ELIBEXEC EILSEQ ERESTART ESTRPIPE EUSERS ENOTSOCK EDESTADDRREQ EMSGSIZE EPROTOTYPE ENOPROTOOPT "
        "EPROTONOSUPPORT ESOCKTNOSUPPORT EOPNOTSUPP EPFNOSUPPORT EAFNOSUPPORT EADDRINUSE EADDRNOTAVAIL "
        "ENETDOWN ENETUNREACH ENETRESET ECONNABORTED ECONNRESET ENOBUFS EISCONN ENOTCONN ESHUTDOWN "
        "ETOOMANYREFS ETIMEDOUT ECONNREFUSED EHOSTDOWN EHOSTUNREACH EALREADY EINPROGRESS ESTALE EUCLEAN "
        "ENOTNAM ENAVAIL EISNAM EREMOTEIO EDQUOT ENOMEDIUM EMEDIUMTYPE ECANCELED ENOKEY EKEYEXPIRED "
        "EKEYREVOKED EKEYREJECTED EOWNERDEAD ENOTRECOVERABLE ERFKILL EHWPOISON ";
    u64 e = err < 0 ? (u64)0 - (u64)err : (u64)err;
    usize o = 0;
    dst[0] = 0;
    const char *w = names;
    for (u64 k = 0; k < e && *w; k++) {
        while (*w && *w != ' ') w++;
        if (*w) w++;
    }
    if (*w && *w != '-') {
        while (*w && *w != ' ' && o + 1 < (usize)cap) dst[o++] = *w++;
        dst[o] = 0;
    } else {
        put_s(dst, &o, cap, "E#");
        char num[24];
        usize k = 0;
        do num[k++] = (char)('0' + e % 10); while ((e /= 10) && k < sizeof num);
        while (k) {
            char c[2] = {num[--k], 0};
            put_s(dst, &o, cap, c);
        }
    }
}

/* print_ubacktrace(): one line per frame, as SystemTap prints them:
 * " 0x000055d0c0a0f149 : leaf+0x9/0x10 [/path/to/program]", each a printf
 * of format `id` ("%s%s%s\n", argument kinds `kinds`). */
/* Frames `pcs` (n of them) as print_ubacktrace prints them. */
LOCAL void print_frames(u8 *R, u8 *ctx, const u8 *tab, i64 id, const u8 *kinds, const u64 *pcs, u32 n) {
    for (u32 i = 0; i < n; i++) {
        char at[32], sym[256], mod[256];
        usize a = 0, s = 0, m = 0;
        put_s(at, &a, sizeof at, " ");
        put_hex(at, &a, sizeof at, pcs[i], 16);
        put_s(at, &a, sizeof at, " : ");
        sym[0] = mod[0] = 0;
        const u8 *md;
        const u8 *f = sym_find(tab, pcs[i], &md);
        if (f) {
            put_sym_off(sym, &s, sizeof sym, tab, md, f, pcs[i]);
            put_s(sym, &s, sizeof sym, "/");
            put_hex(sym, &s, sizeof sym, AT(f, SY_SIZE, u32), 1);
            put_s(mod, &m, sizeof mod, " [");
            put_s(mod, &m, sizeof mod, (const char *)tab + AT(md, SM_PATH, u32));
            put_s(mod, &m, sizeof mod, "]");
        } else {
            put_hex(sym, &s, sizeof sym, pcs[i], 1);
        }
        i64 args[3] = {(i64)at, (i64)sym, (i64)mod};
        rt_printf(R, ctx, id, kinds, args, 3);
    }
}

/* print_usyms(callers): the addresses of `callers` printed as
 * print_ubacktrace prints frames. */
EXPORT void rt_print_usyms(u8 *R, u8 *ctx, const u8 *tab, const char *callers, i64 id, const u8 *kinds) {
    u64 pcs[64];
    u32 n = parse_addrs(callers, pcs, 64);
    print_frames(R, ctx, tab, id, kinds, pcs, n);
}

EXPORT void rt_print_ubacktrace(u8 *R, u8 *ctx, const u8 *tab, i64 id, const u8 *kinds) {
    u64 pcs[20];
    u32 n = backtrace(R, ctx, tab, pcs, 20);
    print_frames(R, ctx, tab, id, kinds, pcs, n);
}

/* tid(): the context's, or the kernel's (once per handler run; pass 5 will
 * cache it in the thread's slot). */
EXPORT i64 rt_tid(u8 *ctx) {
    i64 t = (i64)AT(ctx, C_TID, u64);
    if (!t) {
        t = sys6(SYS_gettid, 0, 0, 0, 0, 0, 0);
        AT(ctx, C_TID, u64) = (u64)t;
    }
    return t;
}

/* Whether a target thread's process is another than the region's (a
 * child it forked, or one that exec'd): its slot's pid says. */
LOCAL int other_process(u8 *R, u8 *ctx) {
    u8 *slot = (u8 *)AT(ctx, C_SLOT, u64);
    return slot && AT(slot, TS_PID, u32) != (u32)AT(TR(R), H_PID, u64);
}

/* ppid() and uid(): the region's process's (the header), or the kernel's
 * for another process. */
EXPORT i64 rt_ppid(u8 *R, u8 *ctx) {
    return other_process(R, ctx) ? sys6(SYS_getppid, 0, 0, 0, 0, 0, 0) : (i64)AT(R, H_PPID, u64);
}

EXPORT i64 rt_uid(u8 *R, u8 *ctx) {
    return other_process(R, ctx) ? sys6(SYS_getuid, 0, 0, 0, 0, 0, 0) : (i64)AT(R, H_UID, u32);
}

/* ---- return probes: per-thread shadow stacks ---- */

/* Give slot s its own row of the shared per-thread shards and span stages
 * (rows are shared by every process, slots are private); none left: the
 * slot stays busy, and its thread's hits are skipped and counted. */
LOCAL void take_row(u8 *R, u8 *s, u64 n, u32 pid) {
    u32 *owners = (u32 *)(R + AT(TR(R), H_ROW_OWNERS_OFF, u64));
    u32 row = __atomic_fetch_add(&AT(R, H_ROWS_NEXT, u32), 1, __ATOMIC_RELAXED);
    if (row >= n) {
        /* Every row is taken: one the tracer found its process gone from
         * is free again (ROW_FREE; a session that follows many short-lived
         * processes). What it holds stays: shards and statistics add up,
         * whoever adds. */
        row = (u32)n;
        for (u32 r = 0; r < n && row == n; r++) {
            u32 o = ROW_FREE;
            if (__atomic_compare_exchange_n(&owners[r], &o, pid, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) row = r;
        }
    } else {
        __atomic_store_n(&owners[row], pid, __ATOMIC_RELEASE);
    }
    AT(s, TS_INDEX, u32) = row < n ? row : (u32)n;
    AT(s, TS_BUSY, u32) = row >= n;
}

/* Slot s has its thread now: the tracer hears which process it belongs
 * to (EV_THREAD), before any event of that thread. */
LOCAL void thread_event(u8 *R, u8 *s) {
    u8 *rec = ring_reserve(R, 0, EV_HEADER_SIZE);
    if (!rec) return;
    AT(rec, E_KIND, u16) = EV_THREAD;
    AT(rec, E_PROBE, u16) = 0;
    AT(rec, E_TID, u32) = AT(s, TS_TID, u32);
    AT(rec, E_AUX, u32) = AT(s, TS_PID, u32);
    AT(rec, E_TS, u64) = 0;
    ring_commit(rec, EV_HEADER_SIZE);
}

/* A thread's first place among the n slots. n is a power of two
 * (layout.rs): a mask, not a division. The top log2(n) bits of the thread
 * pointer's low half times 0x9e3779b9 (the trampolines compute it inline:
 * find_slot in runtime/src/arch/x86_64/trampoline.rs). */
LOCAL u64 slot_home(u64 tp, u64 n) { return ((u64)((u32)tp * 0x9e3779b9u) << __builtin_ctzll(n)) >> 32; }

/* The calling thread's slot under key `tp` (its thread id `me`, 0 when
 * unknown), claimed on first use; 0 when all are taken. The slots are
 * private to the process (Header::threads_at): a forked child has a copy. */
static u8 *keyed_slot(u8 *R, u64 tp, u32 me) {
    u64 n = AT(TR(R), H_NTHREADS, u32);
    if (!tp || !n) return 0;
    u8 *slots = (u8 *)AT(TR(R), H_THREADS_AT, u64);
    u64 h = slot_home(tp, n);
    for (u64 i = 0; i < n; i++) {
        u8 *s = slots + ((h + i) & (n - 1)) * TS_SIZE;
        u64 key = __atomic_load_n(&AT(s, TS_KEY, u64), __ATOMIC_ACQUIRE);
        if (key == 0) {
            u64 z = 0;
            /* AcqRel: the slot is ours before we touch its fields. */
            if (!__atomic_compare_exchange_n(&AT(s, TS_KEY, u64), &z, tp, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (z != tp) continue;
                key = z;
            } else {
                /* Events name their thread from here (EV_SPAN, and
                 * events of handlers that never asked tid()). */
                AT(s, TS_TID, u32) = me ? me : (u32)sys6(SYS_gettid, 0, 0, 0, 0, 0, 0);
                AT(s, TS_PID, u32) = (u32)sys6(SYS_getpid, 0, 0, 0, 0, 0, 0);
                AT(s, TS_DEPTH, u32) = 0;
                take_row(R, s, n, AT(s, TS_PID, u32));
                thread_event(R, s);
                return s;
            }
        }
        if (key != tp) continue;
        if (!me || AT(s, TS_TID, u32) == me) return s;
        /* Another thread with this thread pointer had the slot. One of
         * ours that exited (its control block reused): its frames are
         * stale. Or, in a forked child, the thread this one was copied
         * from: the frames are this thread's own (copies, like its
         * stack; frames a copied slot of another parent thread holds lie
         * on the stack the new thread reuses, and are dropped as it
         * grows). Nobody is inside a handler on this slot either way. */
        u32 pid = (u32)sys6(SYS_getpid, 0, 0, 0, 0, 0, 0);
        if (AT(s, TS_PID, u32) == pid) {
            AT(s, TS_DEPTH, u32) = 0;
            /* The row stays (its old thread is gone); busy unless it had none. */
            AT(s, TS_BUSY, u32) = AT(s, TS_INDEX, u32) >= n;
        } else {
            /* A child's own row: the parent's thread goes on using the
             * copied one. */
            take_row(R, s, n, pid);
        }
        AT(s, TS_PID, u32) = pid;
        AT(s, TS_TID, u32) = me;
        thread_event(R, s);
        return s;
    }
    return 0;
}

/* The calling thread's slot, keyed by its thread pointer. */
static u8 *thread_slot(u8 *R) {
    u64 tp = thread_pointer();
    /* The thread's id as its C library keeps it (no system call), when
     * the tracer found where. */
    u32 off = AT(TR(R), H_TCB_TID_OFF, u32);
    /* Signed: below the thread pointer on aarch64. */
    u32 me = tp && off ? *(u32 *)(tp + (u64)(i64)(int)off) : 0;
    return keyed_slot(R, tp, me);
}

LOCAL u8 *shadow_frame(u8 *R, u8 *slot, u32 i) {
    return (u8 *)AT(slot, TS_FRAMES, u64) + (u64)i * AT(TR(R), H_FRAME_SIZE, u32);
}

/* A hit that did not run its handler: counted, and by reason (`why`,
 * one of the H_SKIPPED_* counters), for the end-of-session summary. */
LOCAL void skip(u8 *R, u64 why) {
    __atomic_fetch_add(&AT(R, H_SKIPPED, u64), 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&AT(R, why, u64), 1, __ATOMIC_RELAXED);
}

/* Frames dropped without their return probe running (the calls were left
 * by longjmp or an exception): counted and reported, never lost silently. */
LOCAL void lost_returns(u8 *R, u32 n) {
    if (n) __atomic_fetch_add(&AT(R, H_UNRETURNED, u64), n, __ATOMIC_RELAXED);
}

/* At a return probe's function entry: remember the return address stored
 * at `ret_slot` and replace it with `tramp`. Returns the frame's @entry save
 * area, or 0 (no slot, stack full: the hit is skipped and counted). */
EXPORT u8 *rt_ret_push(u8 *R, u8 *ctx, u64 ret_slot, u64 tramp, i64 probe) {
    /* The trampoline found (and marked) the thread's slot with rt_enter. */
    u8 *slot = (u8 *)AT(ctx, C_SLOT, u64);
    u32 depth = slot ? AT(slot, TS_DEPTH, u32) : 0;
    /* Frames at or below this call's return slot belong to calls that
     * longjmp (or an exception) left: their stack is being reused. But a
     * frame at this very slot whose trampoline is still there is this
     * call's own: another return probe on the same function. */
    u32 was = depth;
    while (depth > 0) {
        u8 *f = shadow_frame(R, slot, depth - 1);
        u64 fsp = AT(f, SF_SP, u64);
        if (fsp > ret_slot || (fsp == ret_slot && *(u64 *)ret_slot == AT(f, SF_TRAMP, u64))) break;
        depth--;
    }
    if (slot) AT(slot, TS_DEPTH, u32) = depth;
    lost_returns(R, was - depth);
    if (!slot || depth >= AT(TR(R), H_SHADOW_DEPTH, u32)) {
        skip(R, slot ? H_SKIPPED_DEEP : H_SKIPPED_NOSLOT);
        return 0;
    }
    u8 *f = shadow_frame(R, slot, depth);
    AT(f, SF_RET, u64) = *(u64 *)ret_slot;
    AT(f, SF_SP, u64) = ret_slot;
    AT(f, SF_PROBE, u32) = (u32)probe;
    AT(f, SF_SAVED, i32) = 0; /* aarch64's trampoline sets it (the CFI's place) */
    AT(f, SF_TRAMP, u64) = tramp;
    AT(slot, TS_DEPTH, u32) = depth + 1;
    *(u64 *)ret_slot = tramp;
    return f + SHADOW_FRAME_HEADER;
}

/* In the return trampoline, with the stack pointer `sp` just after the
 * return: pop this call's frame (dropping frames that longjmp skipped),
 * point the context at its probe and @entry saves, and give the original
 * return address (0 if there is no frame: cannot happen). Also does
 * rt_enter's work with the slot it found: `ctx.slot` is the slot, marked
 * busy, or 0 when the handler must be skipped (already inside one). */
EXPORT u64 rt_ret_pop(u8 *R, u8 *ctx, u64 sp) {
    u8 *slot = thread_slot(R);
    AT(ctx, C_SLOT, u64) = 0;
    if (!slot) return 0;
    if (AT(slot, TS_BUSY, u32)) {
        skip(R, AT(slot, TS_INDEX, u32) >= AT(TR(R), H_NTHREADS, u32) ? H_SKIPPED_NOSLOT : H_SKIPPED_BUSY);
    } else {
        AT(slot, TS_BUSY, u32) = 1;
        __asm__ volatile("" ::: "memory");
        AT(ctx, C_SLOT, u64) = (u64)slot;
    }
    u32 depth = AT(slot, TS_DEPTH, u32);
    while (depth > 0) {
        u8 *f = shadow_frame(R, slot, depth - 1);
        u64 fsp = AT(f, SF_SP, u64);
        if (fsp + 8 == sp) {
            AT(slot, TS_DEPTH, u32) = depth - 1;
            AT(ctx, C_PROBE, u32) = AT(f, SF_PROBE, u32);
            AT(ctx, C_ENTRY, u64) = (u64)(f + SHADOW_FRAME_HEADER);
            return AT(f, SF_RET, u64);
        }
        if (fsp + 8 > sp) break; /* a frame of a call still running: keep it */
        depth--;                  /* below the stack pointer: longjmp skipped it */
        lost_returns(R, 1);
    }
    AT(slot, TS_DEPTH, u32) = depth;
    return 0;
}

/* rt_enter's work on the slot found (0: none). */
LOCAL u8 *enter_slot(u8 *R, u8 *slot) {
    if (!slot || AT(slot, TS_BUSY, u32)) {
        skip(R, !slot || AT(slot, TS_INDEX, u32) >= AT(TR(R), H_NTHREADS, u32) ? H_SKIPPED_NOSLOT : H_SKIPPED_BUSY);
        return 0;
    }
    AT(slot, TS_BUSY, u32) = 1;
    /* A signal handler on this thread sees busy set before anything the
     * handler does (same thread: a compiler barrier is enough). */
    __asm__ volatile("" ::: "memory");
    return slot;
}

/* Around every handler run in a target thread: the thread's slot, marked
 * busy, or 0 when the thread is already inside a handler (a signal handler
 * that calls a probed function while a handler holds a lock) or has no
 * slot. Such a hit is skipped and counted, never nested. */
EXPORT u8 *rt_enter(u8 *R) { return enter_slot(R, thread_slot(R)); }

/* rt_enter at a Go function's entry: the slot keyed by the thread's Go
 * `m` (a Go program without cgo leaves the thread pointer to Go, which
 * keeps nothing at its word 0), its thread id `tid` (`m.procid`). */
EXPORT u8 *rt_enter_go(u8 *R, u64 m, u64 tid) { return enter_slot(R, keyed_slot(R, m, (u32)tid)); }

/* goid(): the goroutine id in a probe on a Go function (its `g` is the
 * saved Go register, the id at C_GO_GOID in it); 0 elsewhere. */
EXPORT i64 rt_goid(u8 *R, u8 *ctx) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    u32 off = AT(ctx, C_GO_GOID, u32);
    if (!regs || !off || (AT(ctx, C_FLAGS, u32) & CTX_SAMPLE)) return 0;
    i64 v = 0;
    rt_read_user(R, &v, AT(regs, REG_GO_G, u64) + off, 8);
    return v;
}

/* Return probes on Go functions keep their calls by goroutine, not by
 * thread: Go moves a waiting goroutine to another thread (GoCalls in
 * abi/src/region.rs). A call is known by its depth in its goroutine's
 * stack, g.stack.hi minus the stack pointer at the entry, which Go keeps
 * when it copies the stack to grow it; the return probe runs at the
 * epilogue's end, where the stack pointer is back there. The records'
 * place and number come from the mirror; a record is touched only by its
 * owner while its state is odd. */
#define GO_CALLS_LOOK 32 /* records a goroutine looks at from its first */

/* Frames a record keeps (region.rs's go_calls_size). */
LOCAL u32 go_depth(u8 *R) {
    u32 d = AT(TR(R), H_SHADOW_DEPTH, u32);
    return d < GO_CALLS_DEPTH ? d : GO_CALLS_DEPTH;
}

LOCAL u8 *go_record(u8 *R, u64 i) {
    u64 size = GO_CALLS_HEADER + (u64)go_depth(R) * AT(TR(R), H_FRAME_SIZE, u32);
    return (u8 *)AT(TR(R), H_THREADS_AT, u64) + AT(TR(R), H_GO_CALLS_OFF, u64) + i * size;
}

LOCAL u8 *go_frame(u8 *R, u8 *c, u32 i) {
    return c + GO_CALLS_HEADER + (u64)i * AT(TR(R), H_FRAME_SIZE, u32);
}

/* The record of goroutine `goid` (its `g`) while it has frames; with
 * `claim`, one taken for it when it has none: its own idle one, a free
 * one, another goroutine's idle one, or that of a goroutine that ended
 * inside a call (its `g` runs another goroutine now: its frames are
 * counted as calls that never returned). 0: none (all taken). */
static u8 *go_calls(u8 *R, u64 g, u64 goid, u32 goid_off, int claim) {
    u64 n = AT(TR(R), H_GO_CALLS, u32);
    if (!n || !goid || (n & (n - 1))) return 0;
    u64 mine = goid << 1, h = (goid * 0x9e3779b97f4a7c15ull) >> 32, look = n < GO_CALLS_LOOK ? n : GO_CALLS_LOOK;
    u8 *spare = 0;
    u64 spare_was = 0;
    for (u64 k = 0; k < look; k++) {
        u8 *c = go_record(R, (h + k) & (n - 1));
        u64 st = __atomic_load_n(&AT(c, GC_STATE, u64), __ATOMIC_ACQUIRE);
        if (st == (mine | 1)) return c;
        if (!claim) continue;
        if (st == mine) {
            /* Its own, idle: taken back unless another took it first. */
            if (__atomic_compare_exchange_n(&AT(c, GC_STATE, u64), &st, mine | 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                AT(c, GC_G, u64) = g;
                AT(c, GC_DEPTH, u32) = 0;
                return c;
            }
            continue;
        }
        if (!spare && !(st & 1)) spare = c, spare_was = st;
    }
    /* None free or idle: one whose owner ended (its g names another
     * goroutine now). Read fault-safe, a system call each: only here,
     * off the path of a goroutine that has its record. */
    for (u64 k = 0; claim && !spare && k < look; k++) {
        u8 *c = go_record(R, (h + k) & (n - 1));
        u64 st = __atomic_load_n(&AT(c, GC_STATE, u64), __ATOMIC_ACQUIRE), id = 0;
        if ((st & 1) && rt_read_user(R, &id, AT(c, GC_G, u64) + goid_off, 8) == 8 && id != st >> 1)
            spare = c, spare_was = st;
    }
    if (!spare) return 0;
    u64 st = spare_was;
    if (!__atomic_compare_exchange_n(&AT(spare, GC_STATE, u64), &st, mine | 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 0;
    if (st & 1) lost_returns(R, AT(spare, GC_DEPTH, u32));
    AT(spare, GC_G, u64) = g;
    AT(spare, GC_DEPTH, u32) = 0;
    return spare;
}

/* The calling goroutine's `g`, id and call depth from the saved registers
 * (its trampoline proved `g` is the goroutine its thread runs, with the
 * stack pointer inside its stack). */
LOCAL u64 go_call(u8 *ctx, u64 *g, u64 *goid) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    *g = AT(regs, REG_GO_G, u64);
    *goid = *(u64 *)(*g + AT(ctx, C_GO_GOID, u32));
    return *(u64 *)(*g + 8) - AT(regs, REG_SP, u64);
}

/* A record left without frames is idle: any goroutine may take it. */
LOCAL void go_idle(u8 *c, u32 depth, u64 goid) {
    AT(c, GC_DEPTH, u32) = depth;
    if (!depth) __atomic_store_n(&AT(c, GC_STATE, u64), goid << 1, __ATOMIC_RELEASE);
}

/* At the entry of a Go function with return probe `probe` (its probes
 * pushed in increasing order): a frame for this call in its goroutine's
 * record, after dropping what calls a panic unwound left (frames as deep
 * or deeper, but this call's own earlier probes). Returns the frame's
 * @entry save area, or 0 (skipped and counted: too deep, or no record). */
EXPORT u8 *rt_go_push(u8 *R, u8 *ctx, i64 probe) {
    u64 g, goid, key = go_call(ctx, &g, &goid);
    u8 *c = go_calls(R, g, goid, AT(ctx, C_GO_GOID, u32), 1);
    if (!c) {
        skip(R, H_SKIPPED_DEEP);
        return 0;
    }
    u32 depth = AT(c, GC_DEPTH, u32), was = depth;
    while (depth > 0) {
        u8 *f = go_frame(R, c, depth - 1);
        u64 fk = AT(f, SF_SP, u64);
        if (fk < key || (fk == key && AT(f, SF_PROBE, u32) < (u32)probe)) break;
        depth--;
    }
    lost_returns(R, was - depth);
    if (depth >= go_depth(R)) {
        go_idle(c, depth, goid);
        skip(R, H_SKIPPED_DEEP);
        return 0;
    }
    u8 *f = go_frame(R, c, depth);
    AT(f, SF_RET, u64) = 0;
    AT(f, SF_SP, u64) = key;
    AT(f, SF_PROBE, u32) = (u32)probe;
    AT(f, SF_SAVED, i32) = 0;
    AT(f, SF_TRAMP, u64) = 0;
    AT(c, GC_DEPTH, u32) = depth + 1;
    return f + SHADOW_FRAME_HEADER;
}

/* At a return of a Go function, for its return probe `probe` (popped in
 * decreasing order): this call's frame, its @entry saves copied to `buf`
 * (frame_size bytes on the trampoline's stack: once the record is idle,
 * another goroutine may take it) and the context pointed at them; deeper
 * frames, of calls a panic unwound, dropped and counted. 0: no frame (its
 * entry was skipped, and counted, or came before the probe was placed):
 * the handler does not run. */
EXPORT u64 rt_go_pop(u8 *R, u8 *ctx, i64 probe, u8 *buf) {
    u64 g, goid, key = go_call(ctx, &g, &goid);
    u8 *c = go_calls(R, g, goid, AT(ctx, C_GO_GOID, u32), 0);
    if (!c) return 0;
    u32 depth = AT(c, GC_DEPTH, u32), lost = 0;
    u64 found = 0;
    while (depth > 0) {
        u8 *f = go_frame(R, c, depth - 1);
        u64 fk = AT(f, SF_SP, u64);
        u32 fp = AT(f, SF_PROBE, u32);
        if (fk < key || (fk == key && fp < (u32)probe)) break; /* an outer call's */
        depth--;
        if (fk == key && fp == (u32)probe) {
            memcpy(buf, f + SHADOW_FRAME_HEADER, AT(TR(R), H_FRAME_SIZE, u32) - SHADOW_FRAME_HEADER);
            AT(ctx, C_PROBE, u32) = fp;
            AT(ctx, C_ENTRY, u64) = (u64)buf;
            found = 1;
            break;
        }
        lost++;
    }
    lost_returns(R, lost);
    go_idle(c, depth, goid);
    return found;
}

/* One step of a thread's wait for the tracer (rt_dlnotify,
 * rt_execnotify): spin, yielding every 64 steps; 0 once the wait must
 * end (the `deadline` passed, or the session is over). */
LOCAL int wait_step(u8 *R, u64 i, i64 deadline) {
    if (!__atomic_load_n(&AT(R, H_ENABLED, u32), __ATOMIC_ACQUIRE)) return 0;
    if ((i & 63) == 63) {
        if (rt_now_ns(R) > deadline) return 0;
        sys6(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
    } else {
        cpu_relax();
    }
    return 1;
}

/* Hooked on the dynamic loader's r_brk (called around every dlopen and
 * dlclose): when probes wait for a library, or the symbol table takes the
 * libraries loaded later, let the tracer hook it and add its symbols
 * before this thread goes on, so no call into it is missed and no
 * backtrace through it goes unnamed. Bounded: after 2 s,
 * or when the session ends, the thread continues regardless. */
EXPORT void rt_dlnotify(u8 *R, u8 *ctx) {
    (void)ctx;
    if (!__atomic_load_n(&AT(R, H_DL_WAIT, u32), __ATOMIC_ACQUIRE)) return;
    /* AcqRel: the tracer's Acquire load of dl_gen sees this thread's
     * notification. */
    u64 g = __atomic_add_fetch(&AT(R, H_DL_GEN, u64), 1, __ATOMIC_ACQ_REL);
    /* Wake the tracer's watcher, which waits on the counter's low word (a
     * futex shared through the memfd: FUTEX_WAKE, not private), so the
     * answer comes at once rather than at the session's next 10 ms poll. */
    sys6(SYS_futex, (i64)&AT(R, H_DL_GEN, u64), 1 /* FUTEX_WAKE */, 1, 0, 0, 0);
    i64 deadline = rt_now_ns(R) + 2000000000LL;
    /* Acquire: pairs with the tracer's Release store of dl_ack, after it
     * has written the new hooks. */
    for (u64 i = 0; __atomic_load_n(&AT(R, H_DL_ACK, u64), __ATOMIC_ACQUIRE) < g; i++)
        if (!wait_step(R, i, deadline)) return;
}

/* Hooked on the C library's execve and execveat: tell the tracer that
 * this thread is about to exec (Header::exec_req) and wait until it has
 * attached (exec_ack), so the new program stops at its start and gets its
 * probes. Bounded: after 10 s (a tracer on a loaded machine answers well
 * before), or when the session ends, the exec goes on without. */
EXPORT void rt_execnotify(u8 *R, u8 *ctx) {
    (void)ctx;
    if (!__atomic_load_n(&AT(R, H_ENABLED, u32), __ATOMIC_ACQUIRE)) return;
    u64 me = (u64)sys6(SYS_getpid, 0, 0, 0, 0, 0, 0) << 32 | (u32)sys6(SYS_gettid, 0, 0, 0, 0, 0, 0);
    i64 deadline = rt_now_ns(R) + 10000000000LL;
    int asked = 0;
    for (u64 i = 0;; i++) {
        if (!asked) {
            u64 z = 0;
            /* AcqRel: the request is ours before the tracer sees it. */
            asked = __atomic_compare_exchange_n(&AT(R, H_EXEC_REQ, u64), &z, me, 0, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE);
        }
        /* Acquire: pairs with the tracer's Release store after attaching. */
        if (asked && __atomic_load_n(&AT(R, H_EXEC_ACK, u64), __ATOMIC_ACQUIRE) == me) break;
        if (!wait_step(R, i, deadline)) {
            /* Not answered in time: the program runs unprobed; said at the
             * end. (The end of the session lets every exec go on: that is
             * no missed answer.) */
            if (__atomic_load_n(&AT(R, H_ENABLED, u32), __ATOMIC_ACQUIRE))
                __atomic_add_fetch(&AT(R, H_UNFOLLOWED_EXECS, u64), 1, __ATOMIC_RELAXED);
            break;
        }
    }
    if (asked) {
        /* The request first: an answer cleared after it cannot be
         * repeated for it (a stale answer would let this thread's next
         * exec go on unattached). */
        __atomic_store_n(&AT(R, H_EXEC_REQ, u64), 0, __ATOMIC_RELEASE);
        __atomic_store_n(&AT(R, H_EXEC_ACK, u64), 0, __ATOMIC_RELEASE);
    }
}

/* ---- fatal signals: where a process of the session died ---- */

/* The signals whose default action ends a process with a core, and that a
 * program's own fault mostly raises. rt_crash_install takes over those the
 * program left at their default action (never one it handles or ignores). */
static const int crash_signals[] = {11 /* SIGSEGV */, 7 /* SIGBUS */, 4 /* SIGILL */, 8 /* SIGFPE */,
                                    6 /* SIGABRT */};
#define NCRASH_SIGNALS (sizeof crash_signals / sizeof crash_signals[0])

/* The kernel's struct sigaction for rt_sigaction (with sa_restorer, as on
 * x86_64 and aarch64). */
struct k_sigaction {
    u64 handler, flags, restorer, mask;
};
#define SIG_DFL_ 0
#define SA_SIGINFO_ 0x4ULL
#define SA_ONSTACK_ 0x08000000ULL
#define SA_RESTORER_ 0x04000000ULL
#define SA_RESETHAND_ 0x80000000ULL

/* Called by the tracer (a remote call, every thread stopped) at attach:
 * `stub` is the handler it built in the code region (it loads the region
 * into the fourth argument and jumps to rt_crash), `restorer` its
 * sigreturn. Returns a bit per signal of crash_signals taken over. */
EXPORT i64 rt_crash_install(u8 *R, u64 stub, u64 restorer) {
    (void)R;
    i64 taken = 0;
    for (u64 i = 0; i < NCRASH_SIGNALS; i++) {
        struct k_sigaction old = {0, 0, 0, 0};
        if (sys6(SYS_rt_sigaction, crash_signals[i], 0, (i64)&old, 8, 0, 0) != 0) continue;
        if (old.handler != SIG_DFL_) continue;
        /* SA_RESETHAND: the handler runs once, and the signal's default
         * action is back while it runs. */
        struct k_sigaction sa = {stub, SA_SIGINFO_ | SA_ONSTACK_ | SA_RESTORER_ | SA_RESETHAND_, restorer, 0};
        if (sys6(SYS_rt_sigaction, crash_signals[i], (i64)&sa, 0, 8, 0, 0) == 0) taken |= 1 << i;
    }
    return taken;
}

/* The end of a session (a remote call, every thread stopped): the signals
 * whose handler is still `stub` get their default action back. */
EXPORT i64 rt_crash_uninstall(u8 *R, u64 stub) {
    (void)R;
    i64 given = 0;
    for (u64 i = 0; i < NCRASH_SIGNALS; i++) {
        struct k_sigaction old = {0, 0, 0, 0};
        if (sys6(SYS_rt_sigaction, crash_signals[i], 0, (i64)&old, 8, 0, 0) != 0) continue;
        if (old.handler != stub) continue;
        struct k_sigaction sa = {SIG_DFL_, 0, 0, 0};
        if (sys6(SYS_rt_sigaction, crash_signals[i], (i64)&sa, 0, 8, 0, 0) == 0) given |= 1 << i;
    }
    return given;
}

/* Whether the calling thread is inside a probe handler: its slot, looked
 * up without claiming one (a thread without a slot ran no handler). */
LOCAL u32 in_probe(u8 *R, u32 me) {
    /* The thread pointer from the kernel: the thread's own may be unset (a
     * static program's start) or smashed (the fault being reported). */
    u64 tp = kernel_thread_pointer();
    u64 n = AT(TR(R), H_NTHREADS, u32);
    u8 *slots = (u8 *)AT(TR(R), H_THREADS_AT, u64);
    if (!tp || !n || !slots) return 0;
    u64 h = slot_home(tp, n);
    for (u64 i = 0; i < n; i++) {
        u8 *s = slots + ((h + i) & (n - 1)) * TS_SIZE;
        u64 key = __atomic_load_n(&AT(s, TS_KEY, u64), __ATOMIC_ACQUIRE);
        if (key == 0) return 0;
        if (key != tp) continue;
        if (me && AT(s, TS_TID, u32) != me) return 0;
        /* Busy without a row is a slot that never runs handlers. */
        return AT(s, TS_BUSY, u32) && AT(s, TS_INDEX, u32) < n;
    }
    return 0;
}

/* The handler of rt_crash_install's signals, reached through the tracer's
 * stub with the region as fourth argument. It records where the thread
 * was (Header::crash_*), waits (bounded, 2 s) until the tracer has read
 * the record and the process's maps, and returns: the signal's default
 * action is back (SA_RESETHAND), so a fault happens again and ends the
 * process as it would have, with its core; a signal sent by kill(),
 * raise() or abort() is sent again, and delivered once this returns. */
EXPORT void rt_crash(i64 sig, u8 *info, u8 *uc, u8 *R) {
    int code = AT(info, 8, int); /* si_code */
    u64 pid = (u64)sys6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    u64 tid = (u64)sys6(SYS_gettid, 0, 0, 0, 0, 0, 0);
    if (__atomic_load_n(&AT(R, H_ENABLED, u32), __ATOMIC_ACQUIRE)) {
        u64 me = pid << 32 | (u32)tid;
        u64 z = 0;
        /* AcqRel: the record is this thread's before it writes it (another
         * thread, or process, crashing at once gives up its report). */
        if (__atomic_compare_exchange_n(&AT(R, H_CRASH_WHO, u64), &z, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            /* The history up to the fault, kept until the tracer has it
             * (only for a record it will answer). */
            flight_hold(R);
            AT(R, H_CRASH_SIG, u32) = (u32)sig;
            AT(R, H_CRASH_CODE, int) = code;
            /* si_addr, for the signals that have one (0 otherwise). */
            AT(R, H_CRASH_ADDR, u64) = code > 0 ? AT(info, 16, u64) : 0;
            AT(R, H_CRASH_PC, u64) = UC_PC(uc);
            AT(R, H_CRASH_SP, u64) = UC_SP(uc);
            AT(R, H_CRASH_IN_PROBE, u32) = in_probe(R, (u32)tid);
            /* Release: the record is written before the tracer sees it. */
            __atomic_store_n(&AT(R, H_CRASH_REQ, u64), me, __ATOMIC_RELEASE);
            i64 deadline = rt_now_ns(R) + 2000000000LL;
            int answered = 0;
            for (u64 i = 0;; i++) {
                /* Acquire: pairs with the tracer's Release store. */
                if (__atomic_load_n(&AT(R, H_CRASH_ACK, u64), __ATOMIC_ACQUIRE) == me) {
                    answered = 1;
                    break;
                }
                if (!wait_step(R, i, deadline)) break;
            }
            if (answered) {
                /* The record is free for the next process of the session
                 * (a forked child that crashes later). Unanswered, it
                 * stays for the tracer to find at the end. */
                __atomic_store_n(&AT(R, H_CRASH_REQ, u64), 0, __ATOMIC_RELEASE);
                __atomic_store_n(&AT(R, H_CRASH_ACK, u64), 0, __ATOMIC_RELEASE);
                __atomic_store_n(&AT(R, H_CRASH_WHO, u64), 0, __ATOMIC_RELEASE);
            }
        }
    }
    /* si_code <= 0: sent by a process (kill, tgkill, sigqueue), not
     * raised by an instruction that will fault again; nor is an
     * asynchronous memory error (SIGBUS, BUS_MCEERR_AO). */
    if (code <= 0 || (sig == 7 && code == 5)) sys6(SYS_tgkill, (i64)pid, (i64)tid, sig, 0, 0, 0);
}

/* ---- trap probes: a one-byte trap where no jump fits ---- */

/* A probe placed with a trap (`int3`; `brk` on aarch64) goes to the same
 * trampoline a jump would: SIGTRAP's handler is rt_trap (through a stub of
 * the tracer's that passes the process's trap area, TrapArea in
 * abi/src/region.rs), which finds the trap's site in the area's table and
 * returns into the trampoline with every register as at the site. The
 * program keeps its own view of SIGTRAP: its `sigaction` is hooked
 * (rt_trap_sigaction) and what it set is kept in the area, and a trap that
 * is not ours goes to its handler, or ends the process as it would have.
 * A thread must never block SIGTRAP (the kernel ends a process whose
 * thread traps with the signal blocked): the masks a program sets are
 * hooked (rt_trap_sigmask) and a handler's sa_mask loses the bit. */

#define SIGTRAP_ 5
#define SIGTRAP_BIT (1ULL << (SIGTRAP_ - 1))
#define SIG_IGN_ 1
#define SA_NODEFER_ 0x40000000ULL

/* n bytes between here and `there` in this process (process_vm_readv or
 * _writev: EFAULT instead of SIGSEGV); whether all were copied. */
LOCAL int self_copy(i64 nr, void *here, u64 there, u64 n) {
    struct {
        u64 base, len;
    } local = {(u64)here, n}, remote = {there, n};
    return sys6(nr, sys6(SYS_getpid, 0, 0, 0, 0, 0, 0), (i64)&local, 1, (i64)&remote, 1, 0) == (i64)n;
}

/* A SIGTRAP that is not a trap probe's: what the program asked for. Its
 * handler runs with its sa_mask (but never SIGTRAP) blocked; ignored, a
 * sent signal is dropped; by default (or a trap under SIG_IGN, which the
 * kernel would force), the process ends by the signal as it would have. */
LOCAL void not_our_trap(i64 sig, u8 *info, u8 *uc, u8 *T, int code) {
    u64 h = AT(T, TA_HANDLER, u64), flags = AT(T, TA_FLAGS, u64);
    if (h == SIG_IGN_ && code <= 0) return;
    if (h > SIG_IGN_) {
        if (flags & SA_RESETHAND_) AT(T, TA_HANDLER, u64) = SIG_DFL_;
        u64 mask = AT(T, TA_MASK, u64) & ~SIGTRAP_BIT, old = 0;
        sys6(SYS_rt_sigprocmask, 0 /* SIG_BLOCK */, (i64)&mask, (i64)&old, 8, 0, 0);
        if (flags & SA_SIGINFO_)
            ((void (*)(int, void *, void *))h)((int)sig, info, uc);
        else
            ((void (*)(int))h)((int)sig);
        sys6(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, (i64)&old, 0, 8, 0, 0);
        return;
    }
    struct k_sigaction dfl = {SIG_DFL_, 0, 0, 0};
    sys6(SYS_rt_sigaction, SIGTRAP_, (i64)&dfl, 0, 8, 0, 0);
    sys6(SYS_tgkill, sys6(SYS_getpid, 0, 0, 0, 0, 0, 0), sys6(SYS_gettid, 0, 0, 0, 0, 0, 0), SIGTRAP_, 0, 0, 0);
}

/* SIGTRAP's handler (SA_NODEFER: a trap in a handler of the program's
 * that this calls still works). A trap at one of the table's sites
 * (si_code > 0: raised by the instruction, not sent) resumes at its
 * trampoline; counted. The table is the target's own memory: a bad entry
 * can only misdirect the target itself. */
EXPORT void rt_trap(i64 sig, u8 *info, u8 *uc, u8 *T) {
    int code = AT(info, 8, int);
    if (code > 0) {
        u64 site = UC_PC(uc) - TRAP_PC_ADJ;
        /* Acquire: the table is written before the tracer names it. */
        u64 act = __atomic_load_n(&AT(T, TA_ACTIVE, u64), __ATOMIC_ACQUIRE) & 1;
        u64 n = AT(T, TA_COUNT + 8 * act, u64);
        if (n > TRAP_CAP) n = TRAP_CAP;
        u64 *tab = (u64 *)(T + TA_TABLES + act * TRAP_CAP * 16);
        u64 lo = 0, hi = n;
        while (lo < hi) {
            u64 mid = lo + (hi - lo) / 2, at = tab[2 * mid];
            if (at == site) {
                UC_PC(uc) = tab[2 * mid + 1];
                u8 *R = (u8 *)AT(T, TA_REGION, u64);
                if (R) __atomic_fetch_add(&AT(R, H_TRAP_HITS, u64), 1, __ATOMIC_RELAXED);
                return;
            }
            if (at < site)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    not_our_trap(sig, info, uc, T, code);
}

/* Called by the tracer (a remote call, every thread stopped): SIGTRAP to
 * `stub` (which passes T to rt_trap) with our `restorer`, the program's
 * disposition kept in T, and SIGTRAP taken out of the masks of the
 * handlers already installed. 1 when installed. */
EXPORT i64 rt_trap_install(u8 *T, u64 stub, u64 restorer) {
    struct k_sigaction old = {0, 0, 0, 0};
    if (sys6(SYS_rt_sigaction, SIGTRAP_, 0, (i64)&old, 8, 0, 0) != 0) return 0;
    if (old.handler != stub) {
        AT(T, TA_HANDLER, u64) = old.handler;
        AT(T, TA_FLAGS, u64) = old.flags;
        AT(T, TA_RESTORER, u64) = old.restorer;
        AT(T, TA_MASK, u64) = old.mask;
        struct k_sigaction sa = {stub, SA_SIGINFO_ | SA_ONSTACK_ | SA_RESTORER_ | SA_NODEFER_, restorer, 0};
        if (sys6(SYS_rt_sigaction, SIGTRAP_, (i64)&sa, 0, 8, 0, 0) != 0) return 0;
    }
    AT(T, TA_STUB, u64) = stub;
    /* The C library's struct sigaction naming the stub (rt_trap_sigaction). */
    u64 *la = &AT(T, TA_LIBC_ACT, u64);
    for (int i = 0; i < 19; i++) la[i] = 0;
    la[0] = stub;
    la[17] = SA_SIGINFO_ | SA_ONSTACK_ | SA_NODEFER_; /* int sa_flags at 136 */
    for (i64 s = 1; s <= 64; s++) {
        if (s == SIGTRAP_ || s == 9 || s == 19) continue;
        struct k_sigaction a = {0, 0, 0, 0};
        if (sys6(SYS_rt_sigaction, s, 0, (i64)&a, 8, 0, 0) != 0) continue;
        if (a.handler <= SIG_IGN_ || !(a.mask & SIGTRAP_BIT)) continue;
        a.mask &= ~SIGTRAP_BIT;
        sys6(SYS_rt_sigaction, s, (i64)&a, 0, 8, 0, 0);
    }
    return 1;
}

/* The end of a session (a remote call, every thread stopped): SIGTRAP
 * back to what the program set, if our stub still has it. A handler the
 * program set meanwhile went through its C library, which installed our
 * stub with the library's restorer: that restorer goes with it. 1 when
 * put back, 0 when SIGTRAP was not ours any more, -1 when the program's
 * handler could not be put back (no restorer known): SIG_DFL then. */
EXPORT i64 rt_trap_uninstall(u8 *T, u64 stub, u64 restorer) {
    struct k_sigaction cur = {0, 0, 0, 0};
    if (sys6(SYS_rt_sigaction, SIGTRAP_, 0, (i64)&cur, 8, 0, 0) != 0) return 0;
    if (cur.handler != stub) return 0;
    struct k_sigaction sa = {AT(T, TA_HANDLER, u64), AT(T, TA_FLAGS, u64), AT(T, TA_RESTORER, u64),
                             AT(T, TA_MASK, u64)};
    i64 r = 1;
    if (sa.handler > SIG_IGN_ && !sa.restorer) {
        if ((cur.flags & SA_RESTORER_) && cur.restorer && cur.restorer != restorer) {
            sa.restorer = cur.restorer;
            sa.flags |= SA_RESTORER_;
        } else {
            sa = (struct k_sigaction){SIG_DFL_, 0, 0, 0};
            r = -1;
        }
    }
    if (sys6(SYS_rt_sigaction, SIGTRAP_, (i64)&sa, 0, 8, 0, 0) != 0) return 0;
    return r;
}

/* Hooked on the C library's sigaction (before any slot is looked for:
 * every call, on every thread). For SIGTRAP, the call becomes the
 * program's view kept in T: `*oldact` is what it set before, `*act` is
 * kept, and the library installs our stub (T's TA_LIBC_ACT) with its own
 * restorer, told nothing back. For another signal, a handler's sa_mask
 * loses SIGTRAP (in the program's struct, fault-safe: a trap probe hit
 * while that handler runs must not end the process). */
EXPORT void rt_trap_sigaction(u8 *T, u8 *ctx) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    /* Nothing before the handler is installed (a probe of the script's
     * on sigaction calls this too, traps or not). */
    if (!regs || !AT(T, TA_STUB, u64)) return;
    i64 *actp = arg_reg(regs, 2), *oldp = arg_reg(regs, 3);
    u64 act = (u64)*actp, old = (u64)*oldp;
    if ((int)*arg_reg(regs, 1) != SIGTRAP_) {
        u64 mask = 0;
        if (act && self_copy(SYS_process_vm_readv, &mask, act + 8, 8) && (mask & SIGTRAP_BIT)) {
            mask &= ~SIGTRAP_BIT;
            self_copy(SYS_process_vm_writev, &mask, act + 8, 8);
        }
        return;
    }
    /* The C library's struct sigaction: handler, 128-byte mask, int
     * flags, restorer (x86_64 and aarch64, glibc and musl). */
    u64 in[19], out[19];
    for (int i = 0; i < 19; i++) out[i] = 0;
    /* A pointer that faults: the library faults on it as it would have. */
    if (act && !self_copy(SYS_process_vm_readv, in, act, sizeof in)) return;
    if (old) {
        out[0] = AT(T, TA_HANDLER, u64);
        out[1] = AT(T, TA_MASK, u64);
        out[17] = (u32)AT(T, TA_FLAGS, u64);
        out[18] = AT(T, TA_RESTORER, u64);
        if (!self_copy(SYS_process_vm_writev, out, old, sizeof out)) return;
    }
    if (act) {
        AT(T, TA_HANDLER, u64) = in[0];
        AT(T, TA_MASK, u64) = in[1];
        AT(T, TA_FLAGS, u64) = (u32)in[17];
        /* The library's own, learned when the session ends. */
        AT(T, TA_RESTORER, u64) = 0;
        *actp = (i64)(T + TA_LIBC_ACT);
    }
    *oldp = 0;
}

/* Hooked on the C library's pthread_sigmask and sigprocmask (every call,
 * on every thread): a mask that would block SIGTRAP is set without it,
 * here (with the library's own signals left out, as it does), `*oldset`
 * written, and the library's call left with nothing to do. */
EXPORT void rt_trap_sigmask(u8 *T, u8 *ctx) {
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    if (!regs || !AT(T, TA_STUB, u64)) return;
    /* An int: the register's upper half is not the caller's to set. */
    int how = (int)*arg_reg(regs, 1);
    i64 *setp = arg_reg(regs, 2), *oldp = arg_reg(regs, 3);
    u64 w = 0, prev = 0;
    if (how == 1 /* SIG_UNBLOCK */ || !*setp) return;
    if (!self_copy(SYS_process_vm_readv, &w, (u64)*setp, 8) || !(w & SIGTRAP_BIT)) return;
    /* SIGTRAP, and glibc's SIGCANCEL and SIGSETXID (32, 33). */
    w &= ~(SIGTRAP_BIT | 1ULL << 31 | 1ULL << 32);
    if (sys6(SYS_rt_sigprocmask, how, (i64)&w, (i64)&prev, 8, 0, 0) != 0) return;
    *setp = 0;
    /* An oldset that faults: the library's call (now a query) says so. */
    if (*oldp && !self_copy(SYS_process_vm_writev, &prev, (u64)*oldp, 8)) return;
    *oldp = 0;
}

/* An `.itrace` function's entry (its trampoline, after the probe
 * handlers): ask the tracer to take this call over. `regs` holds every
 * register as at the entry (the trampoline saved them). The block tracer
 * answers with the address of the function's first translated block, which
 * this returns: the gate restores the registers and jumps there. The
 * single-stepper (--itrace-step) restarts the thread from `regs` at the
 * function's relocated first instructions, so its taken request never
 * returns here. Bounded like rt_dlnotify: after 2 s, or when the session
 * ends or no slot is free, the call runs untraced (0) and is counted. */
EXPORT u64 rt_itrace_wait(u8 *R, u8 *regs, i64 func) {
    if (!__atomic_load_n(&AT(R, H_ENABLED, u32), __ATOMIC_ACQUIRE)) return 0;
    /* Zero slots: the tracer has traced as many calls as it was asked to. */
    u32 n = __atomic_load_n(&AT(TR(R), H_ITRACE_SLOTS, u32), __ATOMIC_RELAXED);
    u8 *slots = R + AT(TR(R), H_ITRACE_OFF, u64), *s = 0;
    for (u32 i = 0; i < n && !s; i++) {
        u32 free = ITRACE_FREE;
        u8 *c = slots + (u64)i * IT_SIZE;
        /* Acquire: the slot's fields are ours after the claim. */
        if (__atomic_compare_exchange_n(&AT(c, IT_STATE, u32), &free, ITRACE_CLAIMED, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            s = c;
    }
    if (!s) {
        __atomic_fetch_add(&AT(R, H_ITRACE_MISSED, u64), 1, __ATOMIC_RELAXED);
        return 0;
    }
    /* What names this request, kept here (the region's copy is any
     * process's to change): the tracer's answer must repeat it. */
    u32 tid = (u32)sys6(SYS_gettid, 0, 0, 0, 0, 0, 0);
    u64 nonce = read_clock() ^ ((u64)tid << 40) ^ (u64)regs;
    AT(s, IT_TID, u32) = tid;
    AT(s, IT_REGS, u64) = (u64)regs;
    AT(s, IT_FUNC, u64) = (u64)func;
    AT(s, IT_PID, u64) = (u64)sys6(SYS_getpid, 0, 0, 0, 0, 0, 0);
    AT(s, IT_NONCE, u64) = nonce;
    /* Release: the tracer's Acquire load of WAITING sees the fields. */
    __atomic_store_n(&AT(s, IT_STATE, u32), ITRACE_WAITING, __ATOMIC_RELEASE);
    /* Ring the block tracer's bell (a shared futex). */
    __atomic_fetch_add(&AT(R, H_ITRACE_BELL, u32), 1, __ATOMIC_RELEASE);
    sys6(SYS_futex, (i64)&AT(R, H_ITRACE_BELL, u32), 1 /* FUTEX_WAKE */, 1, 0, 0, 0);
    i64 start = rt_now_ns(R), deadline = start + 2000000000LL;
    for (u64 i = 0;; i++) {
        /* The block tracer translated the function's first block: go on
         * there (the gate restores the registers and jumps). */
        if (__atomic_load_n(&AT(s, IT_STATE, u32), __ATOMIC_ACQUIRE) == ITRACE_RUN) {
            /* The answer is in the mirror's copy of the slot, which only
             * the tracer writes (before RUN: the Acquire above pairs with
             * its Release), and only if it names this request: a RUN
             * another process forged sends this thread nowhere. */
            const u8 *t = TR(s);
            u64 at = AT(t, IT_NONCE, u64) == nonce && AT(t, IT_TID, u32) == tid && AT(t, IT_FUNC, u64) == (u64)func
                         ? AT(t, IT_RESUME, u64)
                         : 0;
            __atomic_store_n(&AT(s, IT_STATE, u32), ITRACE_FREE, __ATOMIC_RELEASE);
            if (!at) __atomic_fetch_add(&AT(R, H_ITRACE_MISSED, u64), 1, __ATOMIC_RELAXED);
            return at;
        }
        /* The tracer declined (not its process): free the slot, run on
         * untraced. */
        if (__atomic_load_n(&AT(s, IT_STATE, u32), __ATOMIC_ACQUIRE) == ITRACE_DECLINED) {
            __atomic_store_n(&AT(s, IT_STATE, u32), ITRACE_FREE, __ATOMIC_RELEASE);
            __atomic_fetch_add(&AT(R, H_ITRACE_MISSED, u64), 1, __ATOMIC_RELAXED);
            return 0;
        }
        if ((i & 63) == 63) {
            if (rt_now_ns(R) > deadline || !__atomic_load_n(&AT(R, H_ENABLED, u32), __ATOMIC_ACQUIRE)) {
                u32 w = ITRACE_WAITING;
                /* Give up, unless the tracer took the request meanwhile (it
                 * does so only with this thread stopped: then we are not
                 * here any more). */
                if (__atomic_compare_exchange_n(&AT(s, IT_STATE, u32), &w, ITRACE_FREE, 0, __ATOMIC_ACQ_REL,
                                                __ATOMIC_RELAXED)) {
                    __atomic_fetch_add(&AT(R, H_ITRACE_MISSED, u64), 1, __ATOMIC_RELAXED);
                    return 0;
                }
                /* Taken by the block tracer, which never answered (it
                 * died, or is stuck): free the slot and run on untraced,
                 * unless the answer came meanwhile (then it is taken up at
                 * the next turn). */
                u32 t = ITRACE_TAKEN;
                if (rt_now_ns(R) > start + 10000000000LL &&
                    __atomic_compare_exchange_n(&AT(s, IT_STATE, u32), &t, ITRACE_FREE, 0, __ATOMIC_ACQ_REL,
                                                __ATOMIC_RELAXED)) {
                    __atomic_fetch_add(&AT(R, H_ITRACE_MISSED, u64), 1, __ATOMIC_RELAXED);
                    return 0;
                }
            }
            /* Sleep until the tracer answers (it wakes the slot's state,
             * a futex shared through the memfd), a millisecond at most:
             * threads that spun and yielded here starved the tracer of
             * the CPU it needs to answer them (eight waiting threads on
             * one CPU). */
            u32 now = __atomic_load_n(&AT(s, IT_STATE, u32), __ATOMIC_ACQUIRE);
            if (now == ITRACE_WAITING || now == ITRACE_TAKEN) {
                struct {
                    i64 sec, nsec;
                } ms = {0, 1000000};
                sys6(SYS_futex, (i64)&AT(s, IT_STATE, u32), 0 /* FUTEX_WAIT */, now, (i64)&ms, 0, 0);
            }
        } else {
            cpu_relax();
        }
    }
}

/* The trampoline's address as the function keeps it: signed as it signed
 * its return address (aarch64's pointer authentication: SF_SAVED's low
 * bits say how). */
LOCAL u64 kept_trampoline(u8 *f) {
    return sign_return(AT(f, SF_TRAMP, u64), AT(f, SF_SP, u64), (u32)AT(f, SF_SAVED, i32) & SAVED_SIGNED);
}

/* Hooked on the unwinder's entry points (_Unwind_RaiseException,
 * _Unwind_ForcedUnwind, _Unwind_Resume, _Unwind_Resume_or_Rethrow): an
 * exception is about to walk this thread's stack, and the unwinder must
 * see real return addresses, not the return trampolines. Put every
 * replaced return address back (only where the stack still holds the
 * trampoline); the frames stay: `rt_caught` re-arms those of the calls
 * the exception did not leave, and the others are dropped (and counted)
 * then or when a later return probe finds them below the stack. */
EXPORT void rt_unwind(u8 *R, u8 *ctx) {
    /* The hook's trampoline found the slot (and runs this only then). */
    u8 *slot = (u8 *)AT(ctx, C_SLOT, u64);
    if (!slot) return;
    for (u32 depth = AT(slot, TS_DEPTH, u32); depth > 0; depth--) {
        u8 *f = shadow_frame(R, slot, depth - 1);
        u64 *at = saved_return(f);
        if ((*at & PC_MASK) == AT(f, SF_TRAMP, u64)) *at = AT(f, SF_RET, u64);
    }
}

/* Hooked on __cxa_begin_catch (a catch block starts: the stack is unwound
 * to the frame that catches). Frames at or below the stack pointer belong
 * to calls the exception left: dropped, their return probes do not fire
 * (counted). The others are calls still running (the catching function,
 * its callers): their return addresses go back to the trampolines, so
 * their return probes fire when they return. */
EXPORT void rt_caught(u8 *R, u8 *ctx) {
    u8 *slot = (u8 *)AT(ctx, C_SLOT, u64);
    u8 *regs = (u8 *)AT(ctx, C_REGS, u64);
    if (!slot || !regs) return;
    u64 sp = AT(regs, REG_SP, u64);
    u32 depth = AT(slot, TS_DEPTH, u32), was = depth;
    while (depth > 0 && AT(shadow_frame(R, slot, depth - 1), SF_SP, u64) <= sp) depth--;
    AT(slot, TS_DEPTH, u32) = depth;
    lost_returns(R, was - depth);
    for (; depth > 0; depth--) {
        u8 *f = shadow_frame(R, slot, depth - 1);
        u64 *at = saved_return(f);
        if (*at == AT(f, SF_RET, u64)) *at = kept_trampoline(f);
    }
}

/* ---- counters with per-thread shards ---- */

LOCAL i64 *shard(u8 *R, u64 row, u64 k) {
    return (i64 *)(R + AT(TR(R), H_SHARDS_OFF, u64)) + row * AT(TR(R), H_NSHARDS, u32) + k;
}

/* The value of sharded counter k: its word plus every thread's shard
 * (Relaxed loads: totals, read while threads add). */
EXPORT i64 rt_shard_sum(u8 *R, i64 base_off, i64 k) {
    u64 v = (u64)__atomic_load_n(&AT(R, base_off, i64), __ATOMIC_RELAXED);
    u64 n = AT(TR(R), H_NTHREADS, u32);
    for (u64 row = 0; row < n; row++) v += (u64)__atomic_load_n(shard(R, row, (u64)k), __ATOMIC_RELAXED);
    return (i64)v;
}

/* Assign sharded counter k (tracer-side code): zero the shards, set the
 * word. Adds that threads make meanwhile may be lost (documented). */
EXPORT void rt_shard_set(u8 *R, i64 base_off, i64 k, i64 v) {
    u64 n = AT(TR(R), H_NTHREADS, u32);
    for (u64 row = 0; row < n; row++) __atomic_store_n(shard(R, row, (u64)k), 0, __ATOMIC_RELAXED);
    __atomic_store_n(&AT(R, base_off, i64), v, __ATOMIC_RELAXED);
}

/* ---- statistics with per-thread shards ---- */

/* s <<< v into this thread's own copy of a statistic: plain adds (only this
 * thread writes it; readers merge). */
EXPORT void rt_stat_add_local(u8 *st, i64 v, const u8 *desc) {
    i64 n = AT(st, S_COUNT, i64);
    AT(st, S_COUNT, i64) = n + 1;
    AT(st, S_SUM, i64) = (i64)((u64)AT(st, S_SUM, i64) + (u64)v);
    if (n <= 0 || v < AT(st, S_MIN, i64)) AT(st, S_MIN, i64) = v;
    if (n <= 0 || v > AT(st, S_MAX, i64)) AT(st, S_MAX, i64) = v;
    if (AT(desc, SD_VARIANCE, u32)) welford(st, n, v, desc);
    u32 nh = AT(desc, SD_NHISTS, u32);
    for (u32 i = 0; i < nh; i++) {
        const u8 *h = desc + SD_HISTS + i * HS_SIZE;
        i64 b = hist_bucket(h, v);
        AT(st, AT(h, HS_OFFSET, u32) + 8 * b, i64)++;
    }
}

/* dst = the statistic at `base` merged with its per-thread copies (one per
 * thread slot, `row` bytes apart from `shards`). Relaxed loads: totals read
 * while threads add. */
EXPORT void rt_stat_merge(u8 *R, u8 *dst, const u8 *base, i64 shards, i64 row, const u8 *desc) {
    u32 size = AT(desc, 4, u32);
    u64 n = AT(TR(R), H_NTHREADS, u32);
    for (u32 i = 0; i < size; i += 8) AT(dst, i, i64) = __atomic_load_n(&AT(base, i, i64), __ATOMIC_RELAXED);
    for (u64 r = 0; r < n; r++) {
        const u8 *s = R + shards + r * (u64)row;
        i64 c = __atomic_load_n(&AT(s, S_COUNT, i64), __ATOMIC_RELAXED);
        if (!c) continue;
        i64 had = AT(dst, S_COUNT, i64);
        i64 mn = __atomic_load_n(&AT(s, S_MIN, i64), __ATOMIC_RELAXED);
        i64 mx = __atomic_load_n(&AT(s, S_MAX, i64), __ATOMIC_RELAXED);
        if (!had || mn < AT(dst, S_MIN, i64)) AT(dst, S_MIN, i64) = mn;
        if (!had || mx > AT(dst, S_MAX, i64)) AT(dst, S_MAX, i64) = mx;
        for (u32 i = 0; i < size; i += 8) {
            if (i == S_MIN || i == S_MAX || i == S_AVG_S || i == S_M2 || i == S_LOCK) continue;
            AT(dst, i, i64) += __atomic_load_n(&AT(s, i, i64), __ATOMIC_RELAXED);
        }
    }
    AT(dst, S_LOCK, i64) = 0;
    if (!AT(desc, SD_VARIANCE, u32)) return;
    /* The copies' running states combined as SystemTap combines its CPUs'
     * (the total variance): dst gets the mean of the sums and the m2 whose
     * variance over count - 1 is theirs. */
    i64 total = AT(dst, S_COUNT, i64);
    if (total <= 0) return;
    i64 mean = (i64)((u64)AT(dst, S_SUM, i64) << (AT(desc, SD_SHIFT, u32) & 63)) / total;
    u64 s12 = 0;
    for (u64 r = 0; r <= n; r++) {
        const u8 *s = r == n ? base : R + shards + r * (u64)row;
        i64 c = __atomic_load_n(&AT(s, S_COUNT, i64), __ATOMIC_RELAXED);
        if (c <= 0) continue;
        u64 d = (u64)__atomic_load_n(&AT(s, S_AVG_S, i64), __ATOMIC_RELAXED) - (u64)mean;
        s12 += (u64)c * d * d;
        if (c >= 2) s12 += (u64)(c - 1) * (u64)(__atomic_load_n(&AT(s, S_M2, i64), __ATOMIC_RELAXED) / (c - 1));
    }
    AT(dst, S_AVG_S, i64) = mean;
    AT(dst, S_M2, i64) = (i64)s12;
}

/* delete s: the statistic and every thread's copy. */
EXPORT void rt_stat_clear_all(u8 *R, u8 *base, i64 shards, i64 row, const u8 *desc) {
    u64 n = AT(TR(R), H_NTHREADS, u32);
    rt_stat_clear(base, desc);
    for (u64 r = 0; r < n; r++) rt_stat_clear(R + shards + r * (u64)row, desc);
}

/* ---- lifecycle probes run by the tracer ---- */

/* A remote call from the tracer, the process stopped (where it starts, at
 * attach, or after an exec): run the handler at `handler` for probe
 * `probe` on this thread, with a context of `ctx_size` bytes
 * (Artifact::ctx_size) as a trampoline would build it, registers all 0
 * (lifecycle bodies read none). Skipped and counted like any hit when the
 * thread has no slot (0); -1 when it has no thread pointer (1: ran). */
EXPORT i64 rt_call_probe(u8 *R, u64 handler, u64 probe, u64 ctx_size, u64 arg1) {
    /* A static program at its entry has no thread pointer yet (reading
     * it would fault): say so instead. */
    if (!kernel_thread_pointer()) return -1;
    u8 *slot = rt_enter(R);
    if (!slot) return 0;
    u64 regs[NREGS];
    memset(regs, 0, sizeof regs);
    *arg_reg((u8 *)regs, 1) = (i64)arg1; /* `$status` of process.end */
    u8 *ctx = __builtin_alloca(ctx_size);
    memset(ctx, 0, ctx_size);
    AT(ctx, C_REGS, u64) = (u64)regs;
    AT(ctx, C_PROBE, u32) = (u32)probe;
    AT(ctx, C_SLOT, u64) = (u64)slot;
    ((void (*)(u8 *, u8 *))handler)(R, ctx);
    __asm__ volatile("" ::: "memory");
    AT(slot, TS_BUSY, u32) = 0;
    return 1;
}
