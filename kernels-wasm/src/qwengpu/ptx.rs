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

/// Parses the module's one `.entry` (a file with several must name the one to take).
pub fn parse(text: &str, entry: Option<&str>) -> Result<Entry, PtxError> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let mut entries = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (line, l) = lines[i];
        if l.starts_with(".func") || l.contains(" .func ") {
            return err(line, "device functions (.func) are not supported: mark them __forceinline__");
        }
        if let Some(pos) = l.find(".entry ") {
            let name = l[pos + 7..].trim().trim_end_matches('(').trim().to_string();
            let mut params = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].1.starts_with(')') {
                let p = lines[i].1.trim_end_matches(',');
                match p.split_whitespace().last() {
                    Some(n) if p.starts_with(".param") => params.push(n.to_string()),
                    _ => return err(lines[i].0, alloc::format!("parameter {p:?}")),
                }
                i += 1;
            }
            while i < lines.len() && lines[i].1 != "{" {
                i += 1;
            }
            i += 1;
            let (mut shared, mut body) = (Vec::new(), Vec::new());
            while i < lines.len() && lines[i].1 != "}" {
                let (line, l) = lines[i];
                i += 1;
                if l.starts_with(".reg") || l.starts_with(".loc") || l.starts_with(".pragma") {
                    continue;
                }
                if l.starts_with(".shared") {
                    // .shared .align 4 .b8 name[128];
                    let decl = l.trim_end_matches(';');
                    let last = decl.split_whitespace().last().unwrap_or("");
                    let (name, bytes) = match last.split_once('[') {
                        Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
                        None => (last, Some(4)),
                    };
                    let elem = if decl.contains(".b8") || decl.contains(".u8") { 1 } else { 4 };
                    // Any length may be written; one past the address space is refused here.
                    match bytes.and_then(|b| b.checked_mul(elem)) {
                        Some(b) => shared.push((name.to_string(), b)),
                        None => return err(line, alloc::format!("shared variable {decl:?}")),
                    }
                    continue;
                }
                if l.starts_with('.') {
                    return err(line, alloc::format!("directive {l:?} is not supported (local memory, globals, …)"));
                }
                if l.starts_with('{') && l.contains("mov.b64") {
                    // `{ .reg .b32 tmp; mov.b64 {lo, hi}, %rd; }`: clang splitting a 64-bit value
                    // into words, i.e. 64-bit data (`(unsigned long long)a * b >> 32`).
                    return err(
                        line,
                        "a 64-bit value split into its words: 64-bit data is outside the machine (its words are \
                         32 bits; use __umulhi for the high word of a product)",
                    );
                }
                if let Some(label) = l.strip_suffix(':') {
                    body.push(Stmt::Label(label.to_string(), line));
                    continue;
                }
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
                body.push(Stmt::Inst(Instruction { line, guard, op, args, text: stmt.to_string() }));
            }
            entries.push(Entry { name, line, params, shared, body });
        }
        i += 1;
    }
    match entry {
        Some(name) => entries
            .into_iter()
            .find(|e| e.name == name || e.name.contains(name))
            .ok_or(PtxError { line: 0, what: alloc::format!("no entry named {name:?}") }),
        None if entries.len() == 1 => Ok(entries.remove(0)),
        None => {
            let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
            err(0, alloc::format!("{} entries ({names:?}): name the kernel to take", names.len()))
        }
    }
}
