//! The part of PTX (the text clang-19 emits for `sm_75`) that integer kernels use, parsed into
//! one entry function: its parameters, shared variables, and instructions with their source
//! lines. Anything else is refused by line.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PTX line {line}: {what}")]
pub struct PtxError {
    pub line: usize,
    pub what: String,
}

fn err<T>(line: usize, what: impl Into<String>) -> Result<T, PtxError> {
    Err(PtxError { line, what: what.into() })
}

/// An operand as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// `%r5`, `%rd3`, `%p1` (any virtual register, by its full name).
    Reg(String),
    /// `%tid.x` and friends.
    Special(String),
    Imm(i64),
    /// A label, parameter or shared variable name.
    Symbol(String),
    /// `[base+offset]`: base a register or a symbol.
    Addr(alloc::boxed::Box<Operand>, i64),
    /// `{%r1, %r2, _, %r4}`: the elements of a vector load or store (`_` a sink).
    Vector(Vec<Operand>),
}

/// One instruction: `@%p` / `@!%p` guard, the dotted opcode split in parts, the operands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    pub line: usize,
    pub guard: Option<(String, bool)>,
    /// `["ld", "global", "u32"]`.
    pub op: Vec<String>,
    pub args: Vec<Operand>,
    pub text: String,
}

/// A statement of the body: a label or an instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    Label(String, usize),
    Inst(Instruction),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub line: usize,
    pub params: Vec<String>,
    /// Shared variables: name and size in bytes.
    pub shared: Vec<(String, usize)>,
    /// Module-scope `.global` and `.const` variables the kernel names (`__device__` and
    /// `__constant__` arrays): name and initial words, zero where no initialiser is written.
    pub globals: Vec<(String, Vec<u32>)>,
    /// The local depot (`int a[4]` indexed at run time): its symbol, and its bytes per thread.
    pub local: Option<(String, usize)>,
    pub body: Vec<Stmt>,
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let v = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(hex.trim_end_matches('U'), 16).ok()?
    } else {
        s.trim_end_matches('U').parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn operand(s: &str, line: usize) -> Result<Operand, PtxError> {
    let s = s.trim();
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        // `[%rd1]`, `[%rd1+8]`, `[%rd1+-4]`, `[sym+4]`: the base ends at the first sign.
        let (base, off) = match inner.find(['+', '-']).filter(|&i| i > 0) {
            Some(i) => {
                let off = parse_int(inner[i..].trim_start_matches('+'))
                    .ok_or(PtxError { line, what: alloc::format!("address offset in {s:?}") })?;
                (&inner[..i], off)
            }
            None => (inner, 0),
        };
        return Ok(Operand::Addr(alloc::boxed::Box::new(operand(base, line)?), off));
    }
    if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        let elements =
            inner.split(',').map(|e| if e.trim() == "_" { Ok(Operand::Symbol("_".into())) } else { operand(e, line) });
        let elements: Vec<Operand> = elements.collect::<Result<_, _>>()?;
        if elements.iter().any(|e| matches!(e, Operand::Vector(_) | Operand::Addr(..))) {
            return err(line, alloc::format!("operand {s:?}"));
        }
        return Ok(Operand::Vector(elements));
    }
    if let Some(name) = s.strip_prefix('%') {
        let is_special = ["tid.", "ntid.", "ctaid.", "nctaid.", "laneid", "warpid"].iter().any(|p| name.starts_with(p));
        return Ok(if is_special { Operand::Special(name.to_string()) } else { Operand::Reg(s.to_string()) });
    }
    if let Some(v) = parse_int(s) {
        return Ok(Operand::Imm(v));
    }
    if s.starts_with("0f") || s.starts_with("0d") {
        return err(line, alloc::format!("floating-point constant {s}: the machine has no floating point"));
    }
    if s.chars().all(|c| c.is_alphanumeric() || "_$.".contains(c)) && !s.is_empty() {
        return Ok(Operand::Symbol(s.to_string()));
    }
    err(line, alloc::format!("operand {s:?}"))
}

/// Splits at commas outside brackets.
fn split_args(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(&s[start..]);
    }
    out
}

/// Parses the module's one `.entry` (a file with several must name the one to take). Device
/// functions (`.func`) it calls are inlined ([`super::inline`]); the others are ignored.
pub fn parse(text: &str, entry: Option<&str>) -> Result<Entry, PtxError> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let (mut entries, mut funcs, mut module_shared, mut module_data) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut i = 0;
    while i < lines.len() {
        let (line, l) = lines[i];
        if l.starts_with(".shared") {
            // A `__shared__` variable the compiler did not move into one kernel.
            module_shared.push(shared_decl(l, line)?);
        } else if let Some(decl) = ["global", "const"].iter().find_map(|s| data_decl(l, s)) {
            module_data.push(decl.map_err(|what| PtxError { line, what })?);
        } else if let Some(pos) = l.find(".entry ") {
            let name = l[pos + 7..].trim().trim_end_matches('(').trim().to_string();
            let (params, declaration) = header(&lines, &mut i)?;
            if declaration {
                return err(line, alloc::format!("kernel {name} is declared but not defined"));
            }
            let Body { shared, local, items } = body(&lines, &mut i)?;
            let entry = Entry { name, line, params, shared, globals: Vec::new(), local, body: Vec::new() };
            entries.push((entry, items));
        } else if l.starts_with(".func") || l.contains(" .func ") {
            // `.visible .func  (.param .b32 func_retval0) _Z3sqi(`: the return parameter, if
            // any, in parentheses before the name.
            let after = &l[l.find(".func").map_or(0, |p| p + 5)..];
            let (ret, rest) = match after.trim().strip_prefix('(') {
                Some(r) => {
                    let (decl, rest) = r.split_once(')').unwrap_or((r, ""));
                    (Some(super::inline::param_name(decl, line)?), rest)
                }
                None => (None, after),
            };
            let name = rest.trim().split('(').next().unwrap_or("").trim().to_string();
            let (params, declaration) = header(&lines, &mut i)?;
            if !declaration {
                let Body { shared, local, items } = body(&lines, &mut i)?;
                if !shared.is_empty() {
                    return err(line, alloc::format!("shared variables declared inside device function {name}"));
                }
                if local.is_some() {
                    return err(
                        line,
                        alloc::format!(
                            "device function {name} keeps a local array (.local); mark it __forceinline__ so \
                             the array becomes the kernel's"
                        ),
                    );
                }
                funcs.push(super::inline::Func { name, line, params, ret, body: items });
            }
        }
        i += 1;
    }
    let mut chosen = match entry {
        Some(name) => {
            let at = entries.iter().position(|(e, _)| e.name == name || e.name.contains(name));
            entries.swap_remove(at.ok_or(PtxError { line: 0, what: alloc::format!("no entry named {name:?}") })?)
        }
        None if entries.len() == 1 => entries.remove(0),
        None => {
            let names: Vec<String> = entries.iter().map(|(e, _)| e.name.clone()).collect();
            return err(0, alloc::format!("{} entries ({names:?}): name the kernel to take", names.len()));
        }
    };
    chosen.0.body = super::inline::expand(chosen.1, &funcs)?;
    // The module-level variables this kernel names.
    let named =
        |name: &str| chosen.0.body.iter().any(|s| matches!(s, Stmt::Inst(i) if i.args.iter().any(|a| names(a, name))));
    let shared: Vec<_> = module_shared.into_iter().filter(|(n, _)| named(n)).collect();
    let globals: Vec<_> = module_data.into_iter().filter(|(n, _)| named(n)).collect();
    chosen.0.shared.extend(shared);
    chosen.0.globals = globals;
    Ok(chosen.0)
}

/// Whether `o` is the symbol `name` or an address based on it.
fn names(o: &Operand, name: &str) -> bool {
    match o {
        Operand::Symbol(s) => s == name,
        Operand::Addr(base, _) => names(base, name),
        _ => false,
    }
}

/// The parameter list after a `.entry` or `.func` line at `lines[*i]`, up to its `)`; leaves `*i`
/// on the `)` line. `true` when that is a declaration without a body (`);` or a `;` after it).
fn header(lines: &[(usize, &str)], i: &mut usize) -> Result<(Vec<String>, bool), PtxError> {
    let mut params = Vec::new();
    let first = lines[*i].1;
    // `.func _Z3foov()` with no parameters closes on its own line.
    if !first.trim_end_matches(';').trim_end().ends_with("()") {
        *i += 1;
        while *i < lines.len() && !lines[*i].1.starts_with(')') {
            let p = lines[*i].1.trim_end_matches(',');
            match p.split_whitespace().last() {
                // A struct by value is `.param .align 4 .b8 name[8]`.
                Some(n) if p.starts_with(".param") => params.push(n.split('[').next().unwrap_or(n).to_string()),
                _ => return err(lines[*i].0, alloc::format!("parameter {p:?}")),
            }
            *i += 1;
        }
    }
    let closing = lines.get(*i).map_or("", |l| l.1);
    let declaration = closing.ends_with(';') || lines.get(*i + 1).is_some_and(|l| l.1 == ";");
    Ok((params, declaration))
}

/// A module-scope variable in state space `space` (`.visible .const .align 4 .b8 lut[32] = {3,
/// 0, 0, 0, 1};`, `.global .align 4 .u32 n = 5;`): its name and its words, little-endian like
/// the hardware's, the bytes after the last initialiser zero. `None` if `l` declares none.
fn data_decl(l: &str, space: &str) -> Option<Result<(String, Vec<u32>), String>> {
    let words: Vec<&str> = l.split_whitespace().collect();
    words.iter().position(|w| w.strip_prefix('.') == Some(space))?;
    let decl = l.trim_end_matches(';');
    let (head, init) = decl.split_once('=').map_or((decl, None), |(h, i)| (h.trim(), Some(i.trim())));
    let last = head.split_whitespace().last().unwrap_or("");
    let (name, count) = match last.split_once('[') {
        Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
        None => (last, Some(1)),
    };
    let Some(width) = type_width(head) else {
        return Some(Err(alloc::format!("the type of global variable {name:?}")));
    };
    // Bounded by the machine's memory when it is laid out; a size past 64 KiB is refused here.
    let Some(bytes) = count.and_then(|c| c.checked_mul(width)).filter(|&b| b <= 1 << 16) else {
        return Some(Err(alloc::format!("global variable {name:?}: its size")));
    };
    let mut data = alloc::vec![0u8; bytes.next_multiple_of(4)];
    let values = init.map(|i| i.trim_start_matches('{').trim_end_matches('}')).unwrap_or("");
    for (k, v) in values.split(',').map(str::trim).filter(|v| !v.is_empty()).enumerate() {
        let Some(v) = parse_int(v) else {
            return Some(Err(alloc::format!("global variable {name:?}: initialiser {v:?} (only integers)")));
        };
        let Some(at) = data.get_mut(k * width..(k + 1) * width).filter(|_| k * width < bytes) else {
            return Some(Err(alloc::format!("global variable {name:?}: more initialisers than elements")));
        };
        at.copy_from_slice(&v.to_le_bytes()[..width]);
    }
    let words = data.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    Some(Ok((name.to_string(), words)))
}

/// The bytes of one element of a declaration's integer type (`.b8`, `.u16`, `.s32`, `.b64` …).
fn type_width(decl: &str) -> Option<usize> {
    let types = [("8", 1), ("16", 2), ("32", 4), ("64", 8)];
    decl.split_whitespace().find_map(|w| {
        let bits = w.strip_prefix(".b").or(w.strip_prefix(".u")).or(w.strip_prefix(".s"))?;
        types.iter().find(|(b, _)| *b == bits).map(|&(_, bytes)| bytes)
    })
}

/// `.shared .align 4 .b8 name[128];` → (name, bytes).
fn shared_decl(l: &str, line: usize) -> Result<(String, usize), PtxError> {
    let decl = l.trim_end_matches(';');
    let last = decl.split_whitespace().last().unwrap_or("");
    let (name, count) = match last.split_once('[') {
        Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
        None => (last, Some(1)),
    };
    // A 64-bit shared array taken for 4-byte elements would overlap whatever follows it.
    let elem = type_width(decl).unwrap_or(4);
    // Any length may be written; one past the address space is refused here.
    match count.and_then(|c| c.checked_mul(elem)) {
        Some(b) => Ok((name.to_string(), b)),
        None => err(line, alloc::format!("shared variable {decl:?}")),
    }
}

/// One statement of a body, or a call of a device function (a `{ … call … }` sequence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Item {
    Stmt(Stmt),
    Call(super::inline::Call),
}

/// The body from the `{` after `lines[*i]` to its `}`: its variables and statements. Leaves
/// `*i` on the closing `}`.
fn body(lines: &[(usize, &str)], i: &mut usize) -> Result<Body, PtxError> {
    while *i < lines.len() && lines[*i].1 != "{" {
        *i += 1;
    }
    *i += 1;
    let (mut shared, mut items, mut local) = (Vec::new(), Vec::new(), None);
    while *i < lines.len() && lines[*i].1 != "}" {
        let (line, l) = lines[*i];
        *i += 1;
        let directive = l.split_whitespace().next().unwrap_or("");
        if matches!(directive, ".reg" | ".loc" | ".pragma") {
            continue;
        }
        if directive == ".shared" {
            shared.push(shared_decl(l, line)?);
            continue;
        }
        if directive == ".local" {
            // `__local_depot0`: the thread's local array (one per function).
            if local.replace(shared_decl(l, line)?).is_some() {
                return err(line, "a second local depot in one function");
            }
            continue;
        }
        if l.starts_with('.') {
            return err(line, alloc::format!("directive {l:?} is not supported (globals, …)"));
        }
        if l == "{" {
            // `{ // callseq N` … `}`: one call of a device function.
            items.push(Item::Call(super::inline::call_sequence(lines, i)?));
            continue;
        }
        if let Some(inner) = l.strip_prefix('{').and_then(|r| r.trim_end().strip_suffix('}')) {
            // `{ .reg .b32 tmp; mov.b64 {tmp, %r9}, %rd1; }`: clang splitting a 64-bit value into
            // its words, a scratch register taking the word nobody reads.
            for part in inner.split(';').map(str::trim).filter(|p| !p.is_empty() && !p.starts_with(".reg")) {
                items.push(Item::Stmt(Stmt::Inst(instruction(part, line)?)));
            }
            continue;
        }
        if let Some(label) = l.strip_suffix(':') {
            items.push(Item::Stmt(Stmt::Label(label.to_string(), line)));
            continue;
        }
        items.push(Item::Stmt(Stmt::Inst(instruction(l, line)?)));
    }
    Ok(Body { shared, local, items })
}

/// A function's body as [`body`] reads it.
struct Body {
    shared: Vec<(String, usize)>,
    /// The local depot: its name and bytes per thread.
    local: Option<(String, usize)>,
    items: Vec<Item>,
}

/// One instruction line: guard, opcode, operands.
pub(super) fn instruction(l: &str, line: usize) -> Result<Instruction, PtxError> {
    let stmt = l.trim_end_matches(';').trim();
    let (guard, rest) = match stmt.strip_prefix('@') {
        Some(g) => {
            let (p, rest) = g.split_once(char::is_whitespace).unwrap_or((g, ""));
            let (neg, p) = match p.strip_prefix('!') {
                Some(p) => (true, p),
                None => (false, p),
            };
            (Some((p.to_string(), neg)), rest.trim())
        }
        None => (None, stmt),
    };
    let (opcode, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let op: Vec<String> = opcode.split('.').map(String::from).collect();
    let args = split_args(args).into_iter().map(|a| operand(a, line)).collect::<Result<_, _>>()?;
    Ok(Instruction { line, guard, op, args, text: stmt.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn shared_and_local_arrays_are_sized_by_their_element_type() {
        for (decl, bytes) in [
            (".shared .align 4 .b8 _ZZ1kE1s[10];", 10),
            (".shared .align 2 .b16 h[3];", 6),
            (".shared .align 4 .u32 n;", 4),
            (".shared .align 8 .b64 w[4];", 32),
            (".local .align 8 .b8 __local_depot0[24];", 24),
        ] {
            assert_eq!(shared_decl(decl, 1).map(|d| d.1), Ok(bytes), "{decl}");
        }
    }

    #[test]
    fn module_data_is_read_little_endian_with_the_rest_zero() {
        let word = |l: &str| data_decl(l, if l.contains(".const") { "const" } else { "global" });
        assert_eq!(
            word(".visible .const .align 4 .b8 lut[10] = {1, 2, 3, 4, 5};"),
            Some(Ok(("lut".into(), vec![0x0403_0201, 5, 0])))
        );
        assert_eq!(word(".global .align 4 .u32 bias = -7;"), Some(Ok(("bias".into(), vec![(-7i32) as u32]))));
        assert_eq!(word(".global .align 8 .u64 big[2] = {4294967297, 3};"), Some(Ok(("big".into(), vec![1, 1, 3, 0]))));
        assert_eq!(
            word(".global .align 2 .b16 h[3] = {0x1234, 0xffff};"),
            Some(Ok(("h".into(), vec![0xffff_1234, 0])))
        );
        assert_eq!(word(".visible .global .align 4 .b8 counts[16];"), Some(Ok(("counts".into(), vec![0; 4]))));
        assert_eq!(word(".visible .entry _Z1kv()"), None);
        for bad in [
            ".global .align 4 .u32 p = generic(q);",
            ".global .align 4 .b8 x[2] = {1, 2, 3};",
            ".global .align 4 .f32 f = 0f3F800000;",
            ".global .align 4 .b8 huge[99999999];",
        ] {
            assert!(matches!(word(bad), Some(Err(_))), "{bad}");
        }
    }
}
