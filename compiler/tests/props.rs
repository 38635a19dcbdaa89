//! Property tests for pass 1: the parser never panics (arbitrary text,
//! arbitrary token sequences), and the canonical printer keeps the tree.

use proptest::prelude::*;
use telco_compiler::ast::{Item, StmtKind};
use telco_compiler::parse_str;
use telco_compiler::print::{expr_tree, print_script};

/// Token texts the lexer knows, plus some it does not, for token soups.
const VOCABULARY: &[&str] = &[
    "probe",
    "global",
    "function",
    "if",
    "else",
    "for",
    "foreach",
    "in",
    "limit",
    "while",
    "break",
    "continue",
    "next",
    "return",
    "delete",
    "try",
    "catch",
    "x",
    "arr",
    "begin",
    "end",
    "process",
    "timer",
    "ms",
    "$arg1",
    "$return",
    "$1",
    "@1",
    "$#",
    "@#",
    "@entry",
    "@count",
    "@hist_linear",
    "@define",
    "@M",
    "0",
    "42",
    "0x1f",
    "017",
    "\"s\"",
    "\"a\\n\"",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    ".",
    "?",
    ":",
    "=",
    "+=",
    "-=",
    "*=",
    "/=",
    "%=",
    "<<=",
    ">>=",
    "&=",
    "|=",
    "^=",
    ".=",
    "<<<",
    "++",
    "--",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<<",
    ">>",
    ">>>",
    "&",
    "|",
    "^",
    "&&",
    "||",
    "!",
    "~",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "%(",
    "%?",
    "%:",
    "%)",
    "arch",
    "\"x86_64\"",
    "#",
    "//",
    "/*",
    "*/",
    "'",
    "`",
    "\\",
    "\"",
    "9999999999999999999999",
    // Target variables by name and paths into them.
    "$p",
    "$p$",
    "$$parms$$",
    "$s.a.b",
    "->x",
    "->y$",
    "@cast",
    "@var",
    "@defined",
];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(VOCABULARY), prop::sample::select(&[" ", "\n", "", "\t"][..])), 0..80)
        .prop_map(|toks| toks.into_iter().map(|(t, sep)| format!("{t}{sep}")).collect())
}

/// A random expression as fully parenthesised source text.
fn expr_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        "[a-e]".prop_map(|s| s),
        (0i64..1_000_000).prop_map(|n| n.to_string()),
        Just("0x7fffffffffffffff".to_string()),
        Just("\"str\\t\\x01\\377\"".to_string()),
        Just("$arg1".to_string()),
        Just("$1".to_string()),
        Just("@2".to_string()),
        Just("$#".to_string()),
        Just("f()".to_string()),
    ];
    leaf.prop_recursive(6, 48, 3, |inner| {
        let bin_ops = prop::sample::select(
            &[
                "*", "/", "%", "+", "-", ".", "<<", ">>", ">>>", "<", "<=", ">", ">=", "==", "!=", "&", "^", "|", "&&",
                "||",
            ][..],
        );
        let assign_ops =
            prop::sample::select(&["=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^=", ".=", "<<<"][..]);
        prop_oneof![
            (inner.clone(), bin_ops, inner.clone()).prop_map(|(l, op, r)| format!("({l} {op} {r})")),
            (prop::sample::select(&["-", "+", "!", "~"][..]), inner.clone()).prop_map(|(op, e)| format!("({op}{e})")),
            ("[a-e]", prop::sample::select(&["++", "--"][..]), any::<bool>()).prop_map(|(v, op, pre)| if pre {
                format!("({op}{v})")
            } else {
                format!("({v}{op})")
            }),
            ("[a-e]", assign_ops, inner.clone()).prop_map(|(v, op, e)| format!("({v} {op} {e})")),
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, t, e)| format!("({c} ? {t} : {e})")),
            (inner.clone(), "[a-e]").prop_map(|(k, a)| format!("({k} in {a})")),
            (inner.clone(), inner.clone(), "[a-e]").prop_map(|(k1, k2, a)| format!("([{k1}, {k2}] in {a})")),
            (inner.clone(), inner.clone()).prop_map(|(k1, k2)| format!("arr[{k1}, {k2}]")),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("g({x}, {y})")),
            inner.clone().prop_map(|e| format!("@entry({e})")),
            inner.prop_map(|e| format!("@hist_linear(s, {e}, 10, 1)")),
        ]
    })
}

/// The tree of the first statement's expression in `probe begin { E; }`.
fn first_expr_tree(src: &str) -> Result<String, String> {
    let (sm, script, diags) = parse_str("t.tp", src);
    if !diags.is_empty() {
        let mut d = telco_compiler::Diagnostics::new();
        d.extend(diags);
        return Err(d.summary(&sm));
    }
    let Some(Item::Probe(p)) = script.items.first() else { return Err("no probe".into()) };
    match p.body.stmts.first().map(|s| &s.kind) {
        Some(StmtKind::Expr(e)) => Ok(expr_tree(e)),
        other => Err(format!("not an expression statement: {other:?}")),
    }
}

/// A random statement, for programs with and without semicolons.
fn stmt_text() -> impl Strategy<Value = String> {
    let simple = prop_oneof![
        expr_text(),
        Just("break".to_string()),
        Just("next".to_string()),
        Just("delete arr[1]".to_string()),
        Just("return".to_string()),
        expr_text().prop_map(|e| format!("return {e}")),
        Just(";".to_string()),
    ];
    simple.prop_recursive(3, 16, 3, |inner| {
        let sep = prop::sample::select(&["; ", "\n", " "][..]);
        prop_oneof![
            (expr_text(), inner.clone()).prop_map(|(c, s)| format!("if ({c}) {s}")),
            (expr_text(), inner.clone(), inner.clone()).prop_map(|(c, s, t)| format!("if ({c}) {s}; else {t}")),
            (expr_text(), inner.clone()).prop_map(|(c, s)| format!("while ({c}) {s}")),
            (inner.clone(), sep, inner.clone()).prop_map(|(a, sep, b)| format!("{{ {a}{sep}{b} }}")),
            inner.clone().prop_map(|s| format!("foreach ([k, v-] in arr limit 3) {s}")),
            inner.prop_map(|s| format!("for (i = 0; i < 3; i++) {s}")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_text(s in any::<String>()) {
        let _ = parse_str("fuzz.tp", &s);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(b in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_str("fuzz.tp", &String::from_utf8_lossy(&b));
    }

    #[test]
    fn never_panics_on_token_soup(s in token_soup()) {
        let (_, script, _) = parse_str("soup.tp", &s);
        // Whatever was recovered must print without panicking too.
        let _ = print_script(&script);
    }

    #[test]
    fn never_panics_on_token_soup_in_a_probe(s in token_soup()) {
        let _ = parse_str("soup.tp", &format!("probe begin {{ {s} }}"));
    }

    #[test]
    fn printing_keeps_the_expression_tree(e in expr_text()) {
        let src = format!("probe begin {{ {e}; }}");
        let tree = first_expr_tree(&src).map_err(|d| TestCaseError::fail(format!("{src}\n{d}")))?;
        let (_, script, _) = parse_str("t.tp", &src);
        let printed = print_script(&script);
        let again = first_expr_tree(&printed).map_err(|d| TestCaseError::fail(format!("{printed}\n{d}")))?;
        prop_assert_eq!(&tree, &again, "print changed the tree:\n{}\n{}", src, printed);
    }

    #[test]
    fn printing_is_stable(stmts in prop::collection::vec((stmt_text(), prop::sample::select(&["; ", "\n", " "][..])), 1..6)) {
        let body: String = stmts.iter().map(|(s, sep)| format!("{s}{sep}")).collect();
        let src = format!("function f() {{ {body} }}");
        let (_, script, diags) = parse_str("t.tp", &src);
        // Random statements may be invalid (`break` outside a loop, greedy
        // joins); only programs that parse cleanly must print stably.
        if diags.is_empty() {
            let first = print_script(&script);
            let (sm, again, diags2) = parse_str("t.tp", &first);
            let mut d = telco_compiler::Diagnostics::new();
            d.extend(diags2);
            prop_assert!(d.is_empty(), "print does not parse:\n{}\n{}", first, d.summary(&sm));
            prop_assert_eq!(first, print_script(&again));
        }
    }
}

#[test]
fn precedence_follows_c() {
    let cases = [
        ("a + b * c", "(+ a (* b c))"),
        ("a - b - c", "(- (- a b) c)"),
        ("a = b = c", "(= a (= b c))"),
        ("a . b + c", "(. a (+ b c))"),
        ("a << b . c", "(<< a (. b c))"),
        ("a == b < c", "(== a (< b c))"),
        ("a & b == c", "(& a (== b c))"),
        ("a || b && c | d ^ e & f", "(|| a (&& b (| c (^ d (& e f)))))"),
        ("a ? b : c ? d : e", "(? a b (? c d e))"),
        ("x = a ? b : c", "(= x (? a b c))"),
        ("-a * b", "(* (- a) b)"),
        ("!a && b", "(&& (! a) b)"),
        ("a++ + ++b", "(+ (post++ a) (pre++ b))"),
        ("k == 1 in arr", "(in [(== k 1)] arr)"),
        ("[a, b] in arr && c", "(&& (in [a b] arr) c)"),
        ("s <<< a + b", "(<<< s (+ a b))"),
        ("a >>> 2 >> 1", "(>> (>>> a 2) 1)"),
        ("\"a\" \"b\" . c", "(. \"ab\" c)"),
    ];
    for (src, want) in cases {
        let got = first_expr_tree(&format!("probe begin {{ {src}; }}")).unwrap_or_else(|e| panic!("{src}: {e}"));
        assert_eq!(got, want, "{src}");
    }
}

#[test]
fn greedy_statement_boundaries_match_systemtap() {
    // `;` is optional and the parser reads greedily, like SystemTap's.
    let (_, script, diags) = parse_str("t.tp", "probe begin { x = 1 y = 2\n z = x\n -y\n s = \"a\"\n \"b\" }");
    assert!(diags.is_empty(), "{diags:?}");
    let Some(Item::Probe(p)) = script.items.first() else { panic!("no probe") };
    let trees: Vec<String> = p
        .body
        .stmts
        .iter()
        .map(|s| match &s.kind {
            StmtKind::Expr(e) => expr_tree(e),
            k => format!("{k:?}"),
        })
        .collect();
    assert_eq!(trees, ["(= x 1)", "(= y 2)", "(= z (- x y))", "(= s \"ab\")"]);
}
