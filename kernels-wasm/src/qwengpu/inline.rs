//! Device functions (`.func`). clang keeps a function it did not inline (`__noinline__`, or one
//! too big for its heuristics) as a PTX function and calls it in a `{ … call.uni … }` sequence.
//! The machine has no call stack, so every call is inlined here, which is what the hardware's
//! compiler would do for a callee without recursion: the callee's registers and labels are
//! renamed apart per call site, its parameter loads become moves of the caller's arguments, the
//! store of its return value a move into the caller's register, and `ret` a branch to the end.

use super::ptx::{instruction, Instruction, Item, Operand, PtxError, Stmt};
use super::select::err;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

/// Calls nested deeper than this are taken for recursion, which inlining cannot end.
const MAX_DEPTH: usize = 16;
/// Statements after inlining: far past anything the ROM holds (so the lowering names the real
/// limit), and a bound on the work of a call tree that doubles at every level.
const MAX_STATEMENTS: usize = 1 << 16;

/// A device function as written: parameter names, the return parameter, the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    pub name: String,
    pub line: usize,
    pub params: Vec<String>,
    pub ret: Option<String>,
    pub body: Vec<Item>,
}

/// One call site: the callee, each parameter's bytes as stored (offset → value: a struct or
/// vector passed by value is several), the register given each word of the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub line: usize,
    pub callee: String,
    pub args: Vec<BTreeMap<i64, Operand>>,
    pub ret: BTreeMap<i64, String>,
}

/// The name in a parameter declaration (`.param .b32 func_retval0`, or a struct's
/// `.param .align 4 .b8 func_retval0[16]`).
pub(super) fn param_name(decl: &str, line: usize) -> Result<String, PtxError> {
    match decl.split_whitespace().last() {
        Some(n) if decl.trim_start().starts_with(".param") => Ok(n.split('[').next().unwrap_or(n).to_string()),
        _ => err(line, format!("parameter {decl:?}")),
    }
}

/// The bytes of one element of a `ld/st.param` (its type's width).
fn width(op: &[String]) -> i64 {
    match op.last().map(|t| &t[1..]) {
        Some("8") => 1,
        Some("16") => 2,
        Some("64") => 8,
        _ => 4,
    }
}

/// The (offset, operand) of each element of a parameter access at byte `off`: one for a scalar,
/// one per element for `.v2`/`.v4`.
fn elements(op: &[String], off: i64, o: &Operand) -> Vec<(i64, Operand)> {
    match o {
        Operand::Vector(es) => es.iter().enumerate().map(|(k, e)| (off + k as i64 * width(op), e.clone())).collect(),
        other => vec![(off, other.clone())],
    }
}

/// The symbol and offset of a `[param+off]` address.
fn slot(o: &Operand) -> Option<(&str, i64)> {
    match o {
        Operand::Addr(b, off) => match &**b {
            Operand::Symbol(s) => Some((s, *off)),
            _ => None,
        },
        _ => None,
    }
}

/// The call sequence after a `{` line, up to its `}` (leaves `*i` past it):
/// ```text
/// .param .b32 param0;  st.param.b32 [param0+0], %r6;  .param .b32 retval0;
/// call.uni (retval0), _Z2sqi, (param0);  ld.param.b32 %r7, [retval0+0];
/// ```
/// (the `call` may run over several lines, up to its `;`).
pub(super) fn call_sequence(lines: &[(usize, &str)], i: &mut usize) -> Result<Call, PtxError> {
    let open = lines[*i - 1].0;
    let (mut stored, mut ret, mut call, mut call_line) = (BTreeMap::new(), BTreeMap::new(), String::new(), open);
    loop {
        let Some(&(line, l)) = lines.get(*i) else { return err(open, "a call sequence without its closing }") };
        *i += 1;
        if !call.is_empty() && !call.ends_with(';') {
            call.push(' ');
            call.push_str(l);
            continue;
        }
        if l == "}" {
            break;
        }
        if l.contains(".callprototype") {
            return err(
                line,
                "a call through a function pointer: the callee is known only at run time, and the machine has no \
                 call stack to run it on",
            );
        }
        if l.starts_with(".param") {
            param_name(l.trim_end_matches(';'), line)?;
            continue;
        }
        if l.starts_with("call") {
            (call, call_line) = (l.to_string(), line);
            continue;
        }
        let inst = instruction(l, line)?;
        match (inst.op.first().map(String::as_str), inst.op.get(1).map(String::as_str), &inst.args[..]) {
            (Some("st"), Some("param"), [at, v]) => {
                let Some((p, off)) = slot(at) else { return err(line, "argument slot") };
                let bytes: &mut BTreeMap<i64, Operand> = stored.entry(p.to_string()).or_default();
                bytes.extend(elements(&inst.op, off, v));
            }
            (Some("ld"), Some("param"), [d, at]) => {
                let Some((_, off)) = slot(at) else { return err(line, "result slot") };
                for (off, d) in elements(&inst.op, off, d) {
                    match d {
                        Operand::Reg(d) => drop(ret.insert(off, d)),
                        Operand::Symbol(s) if s == "_" => {}
                        _ => return err(line, "a result into something other than a register"),
                    }
                }
            }
            _ => return err(line, format!("`{l}` inside a call sequence")),
        }
    }
    if call.is_empty() {
        return err(open, "a { … } sequence without a call");
    }
    // `call.uni (retval0), name, (param0, param1);` — the result part is optional.
    let rest = call.trim_end_matches(';').split_once(char::is_whitespace).map_or("", |(_, r)| r).trim();
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')').map_or("", |(_, r)| r).trim_start_matches([',', ' ']),
        None => rest,
    };
    let (callee, names) = rest.split_once(',').unwrap_or((rest, ""));
    let callee = callee.trim();
    if callee.starts_with('%') || callee.is_empty() {
        return err(
            call_line,
            format!("an indirect call ({call:?}): calls through function pointers are not supported"),
        );
    }
    let names = names.trim().trim_start_matches('(').trim_end_matches(')');
    let args = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| stored.remove(n).ok_or(PtxError { line: call_line, what: format!("argument {n} is never stored") }))
        .collect::<Result<_, _>>()?;
    Ok(Call { line: call_line, callee: callee.to_string(), args, ret })
}

/// `items` with every call inlined.
pub(super) fn expand(items: Vec<Item>, funcs: &[Func]) -> Result<Vec<Stmt>, PtxError> {
    let mut sites = 0;
    expand_in(items, funcs, 0, &mut sites)
}

fn expand_in(items: Vec<Item>, funcs: &[Func], depth: usize, sites: &mut usize) -> Result<Vec<Stmt>, PtxError> {
    let mut out = Vec::new();
    for item in items {
        let c = match item {
            Item::Stmt(s) => {
                out.push(s);
                continue;
            }
            Item::Call(c) => c,
        };
        let Some(f) = funcs.iter().find(|f| f.name == c.callee) else {
            return err(c.line, format!("calls {}, which this file declares but does not define", c.callee));
        };
        if depth >= MAX_DEPTH {
            return err(
                c.line,
                format!("calls nested {MAX_DEPTH} deep ({}): recursion cannot be inlined, and the machine has no call stack", f.name),
            );
        }
        if c.args.len() != f.params.len() {
            return err(
                c.line,
                format!("{} takes {} arguments; the call passes {}", f.name, f.params.len(), c.args.len()),
            );
        }
        let body = expand_in(f.body.clone(), funcs, depth + 1, sites)?;
        if out.len() + body.len() > MAX_STATEMENTS {
            return err(c.line, format!("inlining {} makes more than {MAX_STATEMENTS} statements", f.name));
        }
        let tag = format!("$c{sites}");
        *sites += 1;
        let end = format!("$Lret{tag}");
        for s in body {
            match s {
                Stmt::Label(l, line) => out.push(Stmt::Label(format!("{l}{tag}"), line)),
                Stmt::Inst(i) => out.extend(inlined(rename(i, &tag), f, &c, &end)?),
            }
        }
        out.push(Stmt::Label(end, c.line));
    }
    Ok(out)
}

/// `i` with its registers, guard and branch target suffixed by `tag`.
fn rename(mut i: Instruction, tag: &str) -> Instruction {
    fn go(o: &mut Operand, tag: &str, label: bool) {
        match o {
            Operand::Reg(r) => r.push_str(tag),
            Operand::Symbol(s) if label => s.push_str(tag),
            Operand::Addr(base, _) => go(base, tag, false),
            Operand::Vector(elements) => elements.iter_mut().for_each(|e| go(e, tag, false)),
            _ => {}
        }
    }
    let branch = i.op[0] == "bra";
    for a in &mut i.args {
        go(a, tag, branch);
    }
    if let Some((p, _)) = &mut i.guard {
        p.push_str(tag);
    }
    i
}

/// A renamed callee instruction at call site `c`: parameter loads and result stores (scalar or
/// vector, at any offset of a struct) become moves, `ret` a branch to `end`, the rest stays.
fn inlined(i: Instruction, f: &Func, c: &Call, end: &str) -> Result<Vec<Stmt>, PtxError> {
    let ty = i.op.last().cloned().unwrap_or_default();
    let mov = |d: Operand, v: Operand| {
        Stmt::Inst(Instruction { op: vec!["mov".into(), ty.clone()], args: vec![d, v], ..i.clone() })
    };
    let is = |a: &str| i.op.first().map(String::as_str) == Some(a) && i.op.get(1).map(String::as_str) == Some("param");
    let at = |k: usize| i.args.get(k).and_then(slot);
    if let (true, Some((p, off)), Some(d)) = (is("ld"), at(1), i.args.first()) {
        let Some(k) = f.params.iter().position(|q| q == p) else { return Ok(vec![Stmt::Inst(i.clone())]) };
        let mut out = Vec::new();
        for (off, d) in elements(&i.op, off, d) {
            let Some(v) = c.args[k].get(&off) else {
                return err(
                    i.line,
                    format!(
                        "{} reads byte {off} of its parameter {k}, which the call at line {} does not pass",
                        f.name, c.line
                    ),
                );
            };
            out.push(mov(d, v.clone()));
        }
        return Ok(out);
    }
    if let (true, Some((p, off)), Some(v)) = (is("st"), at(0), i.args.get(1)) {
        if Some(p) == f.ret.as_deref() {
            // A call that drops (part of) the result stores it nowhere.
            let words = elements(&i.op, off, v);
            return Ok(words
                .into_iter()
                .filter_map(|(off, v)| Some(mov(Operand::Reg(c.ret.get(&off)?.clone()), v)))
                .collect());
        }
    }
    if i.op[0] == "ret" {
        return Ok(vec![Stmt::Inst(Instruction {
            op: vec!["bra".into()],
            args: vec![Operand::Symbol(end.to_string())],
            ..i
        })]);
    }
    Ok(vec![Stmt::Inst(i)])
}

#[cfg(test)]
mod tests {
    use super::super::args::{run_ptx, Arg};
    use super::super::isa::MachineSpec;
    use super::super::lower::compile;
    use alloc::vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// PTX as clang-19 writes it: a forward declaration, a function nobody calls, a callee with
    /// an early `ret` and a pointer parameter, called twice from the kernel.
    const CALLS: &str = r#"
.version 6.3
.target sm_75
.address_size 64
.func  (.param .b32 func_retval0) _Z4halfi(
	.param .b32 _Z4halfi_param_0
)
;
.visible .func  (.param .b32 func_retval0) _Z6unusedv()
{
	.reg .b32 	%r<2>;
	mov.u32 	%r1, 5;
	st.param.b32 	[func_retval0+0], %r1;
	ret;
}
.visible .func  (.param .b32 func_retval0) _Z4halfi(
	.param .b32 _Z4halfi_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	ld.param.u32 	%r1, [_Z4halfi_param_0];
	setp.lt.s32 	%p1, %r1, 0;
	mov.u32 	%r3, -1;
	@%p1 bra 	$L__BB0_2;
	shr.u32 	%r3, %r1, 1;
$L__BB0_2:
	st.param.b32 	[func_retval0+0], %r3;
	ret;
}
.visible .entry _Z1kPi(
	.param .u64 _Z1kPi_param_0
)
{
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [_Z1kPi_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd2, %rd2, %rd3;
	ld.global.u32 	%r2, [%rd2];
	{ // callseq 0, 0
	.param .b32 param0;
	st.param.b32 	[param0+0], %r2;
	.param .b32 retval0;
	call.uni (retval0), 
	_Z4halfi, 
	(
	param0
	);
	ld.param.b32 	%r3, [retval0+0];
	} // callseq 0
	{ // callseq 1, 0
	.param .b32 param0;
	st.param.b32 	[param0+0], %r3;
	.param .b32 retval0;
	call.uni (retval0), 
	_Z4halfi, 
	(
	param0
	);
	ld.param.b32 	%r4, [retval0+0];
	} // callseq 1
	add.s32 	%r5, %r4, %r3;
	st.global.u32 	[%rd2], %r5;
	ret;
}
"#;

    #[test]
    fn calls_are_inlined_with_their_registers_and_labels_apart() {
        let input = vec![7u32, 100, (-6i32) as u32, 1];
        let got = run_ptx(CALLS, &[Arg::Array(input.clone())], 1, 4);
        let half = |v: u32| if (v as i32) < 0 { u32::MAX } else { v >> 1 };
        let want: vec::Vec<u32> = input.iter().map(|&v| half(half(v)).wrapping_add(half(v))).collect();
        assert_eq!(got, vec![want]);
    }

    #[test]
    fn calls_that_cannot_be_inlined_are_named() {
        let spec = MachineSpec::default();
        let undefined = CALLS.replace("_Z4halfi, ", "_Z5otherj, ");
        let unstored =
            CALLS.replace(".param .b32 param0;\n\tst.param.b32 \t[param0+0], %r2;", ".param .align 4 .b8 param0[8];");
        let wider =
            CALLS.replace("ld.param.u32 \t%r1, [_Z4halfi_param_0];", "ld.param.u32 \t%r1, [_Z4halfi_param_0+4];");
        let indirect = CALLS.replacen("_Z4halfi, \n\t(", "%rd1, \n\t(", 1);
        for (ptx, needle) in [
            (undefined, "declares but does not define"),
            (unstored, "never stored"),
            (wider, "reads byte 4 of its parameter 0"),
            (indirect, "indirect call"),
        ] {
            let e = compile(&ptx, None, &spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
