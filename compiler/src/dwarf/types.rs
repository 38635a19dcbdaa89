//! Types from DWARF, read on demand by DIE offset ([`super::Debug::ty`]):
//! what `$p->field` needs to find a field, how wide and how signed a
//! value is, and how `-L` and `$var$` print a type.

use std::sync::Arc;

use gimli::AttributeValue;

use super::{Debug, R};

/// A type, by its `.debug_info` offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeRef(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    Struct,
    Union,
    Class,
    Enum,
}

impl Aggregate {
    pub fn keyword(self) -> &'static str {
        match self {
            Aggregate::Struct => "struct",
            Aggregate::Union => "union",
            Aggregate::Class => "class",
            Aggregate::Enum => "enum",
        }
    }
    pub(super) fn of(tag: gimli::DwTag) -> Option<Aggregate> {
        match tag {
            gimli::DW_TAG_structure_type => Some(Aggregate::Struct),
            gimli::DW_TAG_union_type => Some(Aggregate::Union),
            gimli::DW_TAG_class_type => Some(Aggregate::Class),
            gimli::DW_TAG_enumeration_type => Some(Aggregate::Enum),
            _ => None,
        }
    }
}

/// How a base type's bits are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Signed,
    Unsigned,
    /// `char` (signed or not), printed as a character by `$var$`.
    SignedChar,
    UnsignedChar,
    Bool,
    Float,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// None for an anonymous struct or union member.
    pub name: Option<String>,
    pub ty: Option<TypeRef>,
    /// Byte offset in the aggregate.
    pub offset: u64,
    /// A bitfield: (bit offset from `offset`, counting from the least
    /// significant bit of the little-endian storage, bit size).
    pub bits: Option<(u64, u64)>,
    /// A C++ base class (`DW_TAG_inheritance`, unnamed): its members are
    /// the aggregate's too, unless one of its own has the name.
    pub inherited: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    Void,
    Base {
        name: String,
        size: u64,
        encoding: Encoding,
    },
    /// `T *` (`to` None: `void *`); a reference (`T &`, `T &&`) is one too,
    /// followed by `->` and `.` alike.
    Pointer {
        to: Option<TypeRef>,
        reference: bool,
    },
    Aggregate {
        kind: Aggregate,
        name: Option<String>,
        size: u64,
        members: Vec<Member>,
        /// Declared only (`struct foo;`): [`Debug::definition`] finds the body.
        declaration: bool,
        /// Passed by invisible reference (a C++ type with a non-trivial
        /// copy constructor or destructor).
        by_reference: bool,
    },
    Enum {
        name: Option<String>,
        size: u64,
        signed: bool,
        values: Vec<(String, i64)>,
    },
    Array {
        of: Option<TypeRef>,
        /// Element count (None: unknown, `int a[]`).
        count: Option<u64>,
    },
    Typedef {
        name: String,
        to: Option<TypeRef>,
    },
    /// `const`, `volatile`, `restrict`, `_Atomic`.
    Qualified {
        qualifier: &'static str,
        to: Option<TypeRef>,
    },
    Function,
    /// A type this tracer does not read (its DWARF tag).
    Other(String),
}

fn udata(v: Option<AttributeValue<R>>) -> Option<u64> {
    v.and_then(|v| v.udata_value())
}

pub(super) fn read(d: &Debug, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Type {
    let name = d.name(unit, e);
    let to = d.type_of(unit, e);
    let size = udata(e.attr_value(gimli::DW_AT_byte_size));
    match e.tag() {
        gimli::DW_TAG_base_type => {
            let enc = match e.attr_value(gimli::DW_AT_encoding) {
                Some(AttributeValue::Encoding(x)) => x,
                _ => gimli::DwAte(0),
            };
            let encoding = match enc {
                gimli::DW_ATE_signed => Encoding::Signed,
                gimli::DW_ATE_unsigned => Encoding::Unsigned,
                gimli::DW_ATE_signed_char => Encoding::SignedChar,
                gimli::DW_ATE_unsigned_char | gimli::DW_ATE_UTF => Encoding::UnsignedChar,
                gimli::DW_ATE_boolean => Encoding::Bool,
                gimli::DW_ATE_float => Encoding::Float,
                _ => Encoding::Other,
            };
            Type::Base { name: name.unwrap_or_default(), size: size.unwrap_or(0), encoding }
        }
        gimli::DW_TAG_pointer_type | gimli::DW_TAG_ptr_to_member_type => Type::Pointer { to, reference: false },
        gimli::DW_TAG_reference_type | gimli::DW_TAG_rvalue_reference_type => Type::Pointer { to, reference: true },
        gimli::DW_TAG_typedef => Type::Typedef { name: name.unwrap_or_default(), to },
        gimli::DW_TAG_const_type => Type::Qualified { qualifier: "const", to },
        gimli::DW_TAG_volatile_type => Type::Qualified { qualifier: "volatile", to },
        gimli::DW_TAG_restrict_type => Type::Qualified { qualifier: "restrict", to },
        gimli::DW_TAG_atomic_type => Type::Qualified { qualifier: "_Atomic", to },
        gimli::DW_TAG_subroutine_type => Type::Function,
        gimli::DW_TAG_unspecified_type => Type::Void,
        gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type => {
            let kind = Aggregate::of(e.tag()).unwrap_or(Aggregate::Struct);
            let declaration = e.attr_value(gimli::DW_AT_declaration).is_some();
            // C++ types that are not trivially copyable are passed by an
            // invisible reference (DWARF 5's DW_CC_pass_by_reference).
            let by_reference = matches!(e.attr_value(gimli::DW_AT_calling_convention),
                Some(AttributeValue::CallingConvention(c)) if c == gimli::DW_CC_pass_by_reference);
            Type::Aggregate {
                kind,
                name,
                size: size.unwrap_or(0),
                members: members(d, unit, e),
                declaration,
                by_reference,
            }
        }
        gimli::DW_TAG_enumeration_type => {
            let mut values = Vec::new();
            let mut signed = false;
            for_children(unit, e, |c| {
                if c.tag() == gimli::DW_TAG_enumerator {
                    let v = match c.attr_value(gimli::DW_AT_const_value) {
                        Some(AttributeValue::Sdata(x)) => {
                            signed |= x < 0;
                            x
                        }
                        Some(v) => v.udata_value().unwrap_or(0) as i64,
                        None => 0,
                    };
                    if let Some(n) = d.name(unit, c) {
                        values.push((n, v));
                    }
                }
            });
            Type::Enum { name, size: size.unwrap_or(4), signed, values }
        }
        gimli::DW_TAG_array_type => {
            // One level per dimension: `int a[2][3]` is an array of 2
            // arrays of 3. The inner levels have no DIE of their own: they
            // are made here, under references no DIE offset can have (the
            // top bit set), and put in the type cache.
            let mut counts = Vec::new();
            for_children(unit, e, |c| {
                if c.tag() == gimli::DW_TAG_subrange_type && counts.len() < 8 {
                    let count = udata(c.attr_value(gimli::DW_AT_count))
                        .or_else(|| udata(c.attr_value(gimli::DW_AT_upper_bound)).and_then(|u| u.checked_add(1)));
                    counts.push(count);
                }
            });
            let mut of = to;
            if counts.len() > 1 {
                if let Some(off) = e.offset().to_debug_info_offset(&unit.header) {
                    let base = (1u64 << 63) | ((off.0 as u64) & ((1 << 59) - 1)) << 3;
                    let mut cache = d.types.lock().ok();
                    for (k, count) in counts.iter().enumerate().skip(1).rev() {
                        let r = TypeRef(base | k as u64);
                        if let Some(c) = cache.as_mut() {
                            c.insert(r.0, Arc::new(Type::Array { of, count: *count }));
                        }
                        of = Some(r);
                    }
                }
            }
            Type::Array { of, count: counts.first().copied().flatten() }
        }
        t => Type::Other(t.static_string().unwrap_or("?").to_string()),
    }
}

fn for_children(
    unit: &gimli::Unit<R>,
    e: &gimli::DebuggingInformationEntry<R>,
    mut f: impl FnMut(&gimli::DebuggingInformationEntry<R>),
) {
    let Ok(mut tree) = unit.entries_tree(Some(e.offset())) else { return };
    let Ok(root) = tree.root() else { return };
    let mut children = root.children();
    while let Ok(Some(c)) = children.next() {
        f(c.entry());
    }
}

fn members(d: &Debug, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Vec<Member> {
    let mut out = Vec::new();
    for_children(unit, e, |c| {
        let inherit = c.tag() == gimli::DW_TAG_inheritance;
        if c.tag() != gimli::DW_TAG_member && !inherit {
            return;
        }
        // Static members have no offset (C++ DW_AT_external/declaration).
        if c.attr_value(gimli::DW_AT_declaration).is_some() && c.attr_value(gimli::DW_AT_data_member_location).is_none()
        {
            return;
        }
        let offset = match c.attr_value(gimli::DW_AT_data_member_location) {
            Some(AttributeValue::Exprloc(x)) => {
                // DW_OP_plus_uconst N (DWARF 2 style). Anything else (a
                // virtual base's offset, read from the object at run
                // time) has no fixed offset: the member is left out.
                let mut ops = x.operations(unit.encoding());
                match (ops.next(), ops.next()) {
                    (Ok(Some(gimli::Operation::PlusConstant { value })), Ok(None)) => value,
                    _ => return,
                }
            }
            Some(v) => v.udata_value().unwrap_or(0),
            None => 0,
        };
        let bit_size = udata(c.attr_value(gimli::DW_AT_bit_size));
        let (offset, bits) = match bit_size {
            // A bitfield: at most 64 bits, in at most 8 bytes from the
            // offset; anything else is left out.
            Some(n) => {
                // DWARF 4+: DW_AT_data_bit_offset from the struct's start;
                // DWARF 2/3: DW_AT_bit_offset from the storage unit's MSB.
                let placed = if let Some(dbo) = udata(c.attr_value(gimli::DW_AT_data_bit_offset)) {
                    (dbo / 8, dbo % 8)
                } else {
                    let storage = udata(c.attr_value(gimli::DW_AT_byte_size)).unwrap_or(4).min(8);
                    let msb = udata(c.attr_value(gimli::DW_AT_bit_offset)).unwrap_or(0);
                    (offset, (storage * 8).saturating_sub(msb.saturating_add(n)))
                };
                if n == 0 || placed.1.saturating_add(n) > 64 {
                    return;
                }
                (placed.0, Some((placed.1, n)))
            }
            None => (offset, None),
        };
        let name = if inherit { None } else { d.name(unit, c) };
        out.push(Member { name, ty: d.type_of(unit, c), offset, bits, inherited: inherit });
    });
    out
}

/// glibc's transparent unions of socket address pointers (`connect`,
/// `bind`, `accept`, `sendto`... take them), which gcc describes as a
/// union of 8 bytes without members: the pointer they are passed as.
const SOCKADDR_ARGS: [&str; 2] = ["__SOCKADDR_ARG", "__CONST_SOCKADDR_ARG"];

/// What a type is once typedefs and qualifiers are looked through, a
/// declaration replaced by its definition, and glibc's transparent
/// `__SOCKADDR_ARG` unions taken as the `struct sockaddr *` they pass.
pub fn resolve(d: &Debug, mut r: Option<TypeRef>) -> (Option<TypeRef>, Arc<Type>) {
    for _ in 0..32 {
        let Some(t) = r.and_then(|x| d.ty(x)) else { return (None, Arc::new(Type::Void)) };
        match &*t {
            Type::Typedef { name, to } if SOCKADDR_ARGS.contains(&name.as_str()) => {
                let opaque = to.and_then(|x| d.ty(x)).is_some_and(|u| {
                    matches!(&*u, Type::Aggregate { kind: Aggregate::Union, size: 8, members, .. } if members.is_empty())
                });
                r = match d.type_named("struct sockaddr").filter(|_| opaque) {
                    Some(sa) => Some(d.pointer_to(sa)),
                    None => *to,
                };
            }
            Type::Typedef { to, .. } | Type::Qualified { to, .. } => r = *to,
            Type::Aggregate { kind, name: Some(n), declaration: true, .. } => match d.definition(*kind, n) {
                Some(def) if Some(def) != r => r = Some(def),
                _ => return (r, t),
            },
            _ => return (r, t),
        }
    }
    (None, Arc::new(Type::Other("typedef loop".into())))
}

/// The size of a value of the type, in bytes.
pub fn size_of(d: &Debug, r: Option<TypeRef>) -> Option<u64> {
    size_depth(d, r, 0)
}

fn size_depth(d: &Debug, r: Option<TypeRef>, depth: u32) -> Option<u64> {
    let (_, t) = resolve(d, r);
    match &*t {
        Type::Base { size, .. } | Type::Aggregate { size, .. } | Type::Enum { size, .. } => Some(*size),
        Type::Pointer { .. } => Some(8),
        Type::Array { of, count } if depth < 16 => size_depth(d, *of, depth + 1)?.checked_mul((*count)?),
        _ => None,
    }
}

/// The type as C writes it (`struct point*`, `char const*`, `int[4]`), as
/// `stap -L` prints it.
pub fn name(d: &Debug, r: Option<TypeRef>) -> String {
    name_depth(d, r, 0)
}

fn name_depth(d: &Debug, r: Option<TypeRef>, depth: u32) -> String {
    if depth > 16 {
        return "...".into();
    }
    let Some(t) = r.and_then(|x| d.ty(x)) else { return "void".into() };
    match &*t {
        Type::Void => "void".into(),
        Type::Base { name, .. } | Type::Typedef { name, .. } => name.clone(),
        Type::Pointer { to, reference } => {
            format!("{}{}", name_depth(d, *to, depth + 1), if *reference { "&" } else { "*" })
        }
        Type::Aggregate { kind, name, .. } => {
            format!("{} {}", kind.keyword(), name.as_deref().unwrap_or("{...}"))
        }
        Type::Enum { name, .. } => format!("enum {}", name.as_deref().unwrap_or("{...}")),
        Type::Array { of, count } => match count {
            Some(n) => format!("{}[{n}]", name_depth(d, *of, depth + 1)),
            None => format!("{}[]", name_depth(d, *of, depth + 1)),
        },
        Type::Qualified { qualifier, to } => format!("{} {qualifier}", name_depth(d, *to, depth + 1)),
        Type::Function => "function".into(),
        Type::Other(tag) => tag.clone(),
    }
}
