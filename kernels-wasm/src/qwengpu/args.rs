//! A kernel's arguments as people write them (`qwengpu run --arg …`, a chat turn): an array
//! `[v1,v2,…]` of u32 or negative i32 words, `zeros:N`, or a bare scalar. [`layout`] places the
//! arrays one after another in global memory, as the suite does, and passes each array's byte
//! address in its parameter's place.

use super::interp::Launch;
use super::isa::MachineSpec;
use super::lower::Kernel;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

/// One kernel argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Array(Vec<u32>),
    Scalar(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("argument {index} ({text:?}): {why}")]
    Malformed { index: usize, text: String, why: String },
    #[error("the kernel {kernel} takes {want} parameters ({names}); {got} --arg given")]
    Count { kernel: String, want: usize, got: usize, names: String },
    #[error(
        "the arrays take {words} words (of them the kernel's own variables {data} and its threads' local arrays \
         {local}); the machine's global memory holds {capacity}"
    )]
    Memory { words: usize, data: usize, local: usize, capacity: usize },
}

/// A word as written: `0 … 4294967295`, or `-2147483648 … -1` (stored as its two's complement).
fn word(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let parsed = if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else if t.starts_with('-') {
        t.parse::<i32>().ok().map(|v| v as u32)
    } else {
        t.parse::<u32>().ok()
    };
    parsed.ok_or_else(|| {
        alloc::format!("{t:?} is not a 32-bit word (0 to 4294967295, -2147483648 to -1, or 0x hexadecimal)")
    })
}

/// Parses argument number `index` (from 1, for the message).
pub fn parse(index: usize, text: &str) -> Result<Arg, ArgError> {
    let bad = |why: String| ArgError::Malformed { index, text: text.to_string(), why };
    let t = text.trim();
    if let Some(n) = t.strip_prefix("zeros:") {
        let n: usize = n.trim().parse().map_err(|_| bad(alloc::format!("zeros:N takes a length, not {n:?}")))?;
        // Checked against the machine's memory in `layout`; this only keeps a typo from
        // allocating gigabytes first.
        if n > 1 << 20 {
            return Err(bad(alloc::format!("{n} words is far past any machine's memory")));
        }
        return Ok(Arg::Array(vec![0; n]));
    }
    if let Some(inner) = t.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(|| bad("an array must end with `]`".into()))?;
        if inner.trim().is_empty() {
            return Err(bad("an empty array (use zeros:N for an output)".into()));
        }
        return inner.split(',').map(word).collect::<Result<Vec<u32>, String>>().map(Arg::Array).map_err(bad);
    }
    word(t).map(Arg::Scalar).map_err(|why| bad(alloc::format!("{why}; an array is written [v1,v2,…] or zeros:N")))
}

/// Global memory, the launch and where each array lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub memory: Vec<u32>,
    pub launch: Launch,
    /// For each array argument, in parameter order: its first word and its length.
    pub arrays: Vec<(usize, usize)>,
}

impl Layout {
    /// The arrays as `global` memory holds them.
    pub fn read_arrays(&self, global: &[u32]) -> Vec<Vec<u32>> {
        self.arrays.iter().map(|&(o, n)| global.get(o..o + n).map(<[u32]>::to_vec).unwrap_or_default()).collect()
    }
}

/// Lays `args` out for `kernel` launched `grid × block`: the kernel's own module-scope data
/// ([`Kernel::data`]) first, then the arrays in parameter order, then (for a kernel with a local
/// array) every thread's local array, whose address becomes one more parameter.
pub fn layout(
    kernel: &Kernel,
    args: &[Arg],
    grid: usize,
    block: usize,
    spec: &MachineSpec,
) -> Result<Layout, ArgError> {
    let names = &kernel.params;
    if args.len() != names.len() {
        return Err(ArgError::Count {
            kernel: kernel.name.clone(),
            want: names.len(),
            got: args.len(),
            names: names.join(", "),
        });
    }
    let data = &kernel.data;
    // Every lane of a launch's warps, padding included, owns a local array.
    let lanes = grid.saturating_mul(block.next_multiple_of(spec.lanes.max(1)));
    let local = lanes.saturating_mul(kernel.local_bytes / 4);
    let arrays: usize = args.iter().map(|a| if let Arg::Array(v) = a { v.len() } else { 0 }).sum();
    let words = data.len().saturating_add(arrays).saturating_add(local);
    if words > spec.global_words {
        return Err(ArgError::Memory { words, data: data.len(), local, capacity: spec.global_words });
    }
    let (mut memory, mut params, mut arrays) = (data.to_vec(), Vec::new(), Vec::new());
    for a in args {
        match a {
            Arg::Array(values) => {
                arrays.push((memory.len(), values.len()));
                params.push(4 * memory.len() as u32);
                memory.extend_from_slice(values);
            }
            Arg::Scalar(v) => params.push(*v),
        }
    }
    if kernel.local_bytes > 0 {
        params.push(4 * memory.len() as u32);
        memory.resize(memory.len() + local, 0);
    }
    Ok(Layout { memory, launch: Launch { grid, block, params }, arrays })
}

/// Lowers `ptx`, lays `args` out and runs it on the interpreter: the arrays as they end (for the
/// front end's tests on hand-written PTX).
#[cfg(test)]
pub(super) fn run_ptx(ptx: &str, args: &[Arg], grid: usize, block: usize) -> Vec<Vec<u32>> {
    let spec = MachineSpec::default();
    let kernel = super::lower::compile(ptx, None, &spec).unwrap();
    let l = layout(&kernel, args, grid, block, &spec).unwrap();
    let mut m = super::interp::Machine::new(spec, kernel.program, &l.memory, l.launch.clone()).unwrap();
    m.run(100_000).unwrap();
    l.read_arrays(&m.global)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_scalars_and_zeros_are_read_as_written() {
        assert_eq!(parse(1, "[1, 2,-3,0xff]"), Ok(Arg::Array(vec![1, 2, (-3i32) as u32, 255])));
        assert_eq!(parse(1, "zeros:3"), Ok(Arg::Array(vec![0; 3])));
        assert_eq!(parse(1, "4294967295"), Ok(Arg::Scalar(u32::MAX)));
        assert_eq!(parse(1, "-2147483648"), Ok(Arg::Scalar(0x8000_0000)));
    }

    #[test]
    fn malformed_arguments_are_named() {
        for bad in
            ["[1,2", "[]", "[1,x]", "zeros:", "zeros:-1", "4294967296", "-2147483649", "1.5", "", "zeros:99999999"]
        {
            let e = parse(2, bad).unwrap_err();
            assert!(matches!(&e, ArgError::Malformed { index: 2, text, .. } if text == bad), "{bad}: {e}");
        }
    }

    #[test]
    fn arrays_are_placed_in_order_and_memory_is_bounded() {
        let spec = MachineSpec::default();
        let names: Vec<String> = ["a", "n", "b"].iter().map(|s| s.to_string()).collect();
        let k = Kernel {
            name: "k".into(),
            program: Default::default(),
            params: names,
            rom_lines: vec![],
            shared_bytes: 0,
            data: vec![],
            local_bytes: 0,
        };
        let args = [Arg::Array(vec![7, 8]), Arg::Scalar(2), Arg::Array(vec![0; 3])];
        let l = layout(&k, &args, 1, 4, &spec).unwrap();
        assert_eq!(l.memory, vec![7, 8, 0, 0, 0]);
        assert_eq!(l.launch.params, vec![0, 2, 8]);
        assert_eq!(l.read_arrays(&l.memory), vec![vec![7, 8], vec![0, 0, 0]]);
        let e = layout(&k, &args[..2], 1, 4, &spec).unwrap_err();
        assert!(matches!(e, ArgError::Count { want: 3, got: 2, .. }), "{e}");
        let big = [Arg::Array(vec![0; 100]), Arg::Scalar(0), Arg::Array(vec![0; 27])];
        assert_eq!(
            layout(&k, &big, 1, 4, &spec),
            Err(ArgError::Memory { words: 127, data: 0, local: 0, capacity: spec.global_words })
        );
    }
}
