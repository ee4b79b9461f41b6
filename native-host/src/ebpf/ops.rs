//! Loads and drives `bpf/qwen3_ops.bpf.c`: RMSNorm (whole or per head), RoPE, SiLU·up, residual
//! add and causal attention over a KV cache map, each one BPF_PROG_TEST_RUN.

use super::sys::{self, MapMemory};
use super::EbpfError;
use kernels_wasm::qwen3::fixed::{self, MAX_HEAD_DIM};
use libbpf_rs::{MapCore, Object, ObjectBuilder};
use std::os::fd::{AsFd, AsRawFd, RawFd};

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/qwen3_ops.bpf.o"));
const OBJECT_NAME: &str = "qwen3_ops";
/// The longest vector the programs take (`MAXV` in the C).
pub const MAXV: usize = 4096;

/// `struct work` of the C file, field for field.
#[repr(C)]
struct Work {
    n: u32,
    segs: u32,
    heads: u32,
    kv_heads: u32,
    pos: u32,
    slot0: u32,
    stride: u32,
    zero: u32,
    flags: u32,
    hd: u32,
    scale: u32,
    eps: u32,
    pad: [u32; 4],
    a: [i32; MAXV],
    b: [i32; MAXV],
    c: [i32; MAXV],
    d: [i32; MAXV],
    w: [i32; MAXV],
    cos: [i32; MAX_HEAD_DIM / 2],
    sin: [i32; MAX_HEAD_DIM / 2],
}

/// The programs of the object, by section name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    RmsNorm,
    Rope,
    SiluMul,
    Add,
    Attention,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::RmsNorm, Op::Rope, Op::SiluMul, Op::Add, Op::Attention];

    pub fn program(self) -> &'static str {
        match self {
            Op::RmsNorm => "qwen3_rms_norm",
            Op::Rope => "qwen3_rope",
            Op::SiluMul => "qwen3_silu_mul",
            Op::Add => "qwen3_add",
            Op::Attention => "qwen3_attention",
        }
    }
}

/// The KV cache's geometry: slot of (position, layer, KV head) = `(pos·layers + layer)·kv_heads
/// + kv_head`, as the seed lays it out; a slot holds one head's key and value (up to 128 each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub positions: usize,
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// Where in the cache: layer and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub layer: usize,
    pub pos: usize,
}

/// This position's RoPE tables and, for Qwen3, the QK-norm scales (q's, k's): for attention to
/// apply them itself first.
#[derive(Debug, Clone, Copy)]
pub struct Prep<'a> {
    pub qk_norm: Option<(&'a [i32], &'a [i32])>,
    pub cos: &'a [i32],
    pub sin: &'a [i32],
}

/// `flags` bits of the attention program.
const ROPE: u32 = 1;
const QKNORM: u32 = 2;

/// One token's query heads and its keys and values (RoPE already applied to q and k, unless
/// [`Prep`] is given).
#[derive(Debug, Clone, Copy)]
pub struct Qkv<'a> {
    pub q: &'a [i32],
    pub k: &'a [i32],
    pub v: &'a [i32],
}

pub struct Ops {
    _object: Object,
    fds: Vec<(Op, RawFd, Option<u32>)>,
    work: MapMemory,
    pub kv: KvShape,
    /// `rms_norm_eps` in Q32 for the norms (Qwen3's 1e-6 unless set).
    pub eps_q32: u32,
    /// BPF calls made so far.
    pub calls: u64,
    /// Kernel-measured nanoseconds of those calls.
    pub kernel_ns: u64,
}

impl Ops {
    pub fn load(kv: KvShape) -> Result<Self, EbpfError> {
        let load = |source| EbpfError::Load { program: OBJECT_NAME, source };
        let slots = kv.positions * kv.layers * kv.kv_heads;
        if slots == 0 || slots > u32::MAX as usize / 2 {
            return Err(EbpfError::Shape { what: "KV cache slots", expected: 1, got: slots });
        }
        if kv.head_dim == 0 || kv.head_dim > MAX_HEAD_DIM || !kv.head_dim.is_multiple_of(2) {
            return Err(EbpfError::Shape {
                what: "head_dim (even, at most 128)",
                expected: MAX_HEAD_DIM,
                got: kv.head_dim,
            });
        }
        let mut open = ObjectBuilder::default().open_memory(OBJECT).map_err(load)?;
        for mut map in open.maps_mut() {
            if map.name() == "kvcache" {
                map.set_max_entries(slots as u32).map_err(load)?;
            }
        }
        let object = open.load().map_err(load)?;
        let mut fds = Vec::new();
        for op in Op::ALL {
            let fd = object
                .progs()
                .find(|p| p.name() == op.program())
                .map(|p| p.as_fd().as_raw_fd())
                .ok_or(EbpfError::MissingMap { program: OBJECT_NAME, map: op.program() })?;
            fds.push((op, fd, sys::verified_insns(fd)));
        }
        let work_fd = object
            .maps()
            .find(|m| m.name() == "work")
            .map(|m| m.as_fd().as_raw_fd())
            .ok_or(EbpfError::MissingMap { program: OBJECT_NAME, map: "work" })?;
        let work = MapMemory::new(work_fd, std::mem::size_of::<Work>(), "work")?;
        Ok(Ops { _object: object, fds, work, kv, eps_q32: fixed::EPS_Q32 as u32, calls: 0, kernel_ns: 0 })
    }

    /// Verifier statistics: (program, processed instructions).
    pub fn verifier_stats(&self) -> Vec<(&'static str, Option<u32>)> {
        self.fds.iter().map(|(op, _, n)| (op.program(), *n)).collect()
    }

    fn work(&mut self) -> &mut Work {
        // SAFETY: the mapping is at least size_of::<Work>() bytes, page-aligned, and Work is
        // plain integers (every bit pattern valid); &mut self makes this the only host reference.
        unsafe { &mut *self.work.as_i32_mut().as_mut_ptr().cast::<Work>() }
    }

    fn run(&mut self, op: Op) -> Result<(), EbpfError> {
        let (hd, eps) = (self.kv.head_dim, self.eps_q32);
        let wk = self.work();
        (wk.hd, wk.scale, wk.eps) = (hd as u32, fixed::score_scale_q16(hd) as u32, eps);
        let fd = self.fds.iter().find(|f| f.0 == op).map(|f| f.1).unwrap_or(-1);
        let (retval, ns) = sys::test_run(fd, 0, op.program())?;
        self.calls += 1;
        self.kernel_ns += ns as u64;
        if retval != 1 {
            return Err(EbpfError::Incomplete { program: op.program(), retval });
        }
        Ok(())
    }

    fn check(what: &'static str, got: usize, max: usize) -> Result<(), EbpfError> {
        if got == 0 || got > max {
            return Err(EbpfError::Shape { what, expected: max, got });
        }
        Ok(())
    }

    /// RMSNorm of each of `segments` equal parts of `x` with the same Q20 scales `w`, in place.
    pub fn rms_norm(&mut self, x: &mut [i32], w: &[i32], segments: usize) -> Result<(), EbpfError> {
        Self::check("rms_norm input", x.len(), MAXV)?;
        if segments == 0 || !x.len().is_multiple_of(segments) || w.len() != x.len() / segments {
            return Err(EbpfError::Shape {
                what: "rms_norm scales",
                expected: x.len() / segments.max(1),
                got: w.len(),
            });
        }
        let wk = self.work();
        wk.n = x.len() as u32;
        wk.segs = segments as u32;
        wk.a[..x.len()].copy_from_slice(x);
        wk.w[..w.len()].copy_from_slice(w);
        self.run(Op::RmsNorm)?;
        x.copy_from_slice(&self.work().a[..x.len()]);
        Ok(())
    }

    /// RoPE of every head (`head_dim` wide) of `x` with this position's Q20 cos/sin
    /// (`head_dim / 2` each), in place.
    pub fn rope(&mut self, x: &mut [i32], cos: &[i32], sin: &[i32]) -> Result<(), EbpfError> {
        Self::check("rope input", x.len(), MAXV)?;
        let hd = self.kv.head_dim;
        if !x.len().is_multiple_of(hd) || cos.len() != hd / 2 || sin.len() != hd / 2 {
            return Err(EbpfError::Shape {
                what: "rope input (whole heads) or cos/sin (head_dim/2)",
                expected: hd,
                got: x.len(),
            });
        }
        let wk = self.work();
        wk.segs = (x.len() / hd) as u32;
        wk.a[..x.len()].copy_from_slice(x);
        wk.cos[..hd / 2].copy_from_slice(cos);
        wk.sin[..hd / 2].copy_from_slice(sin);
        self.run(Op::Rope)?;
        x.copy_from_slice(&self.work().a[..x.len()]);
        Ok(())
    }

    /// `a = silu(a) · b`, in place.
    pub fn silu_mul(&mut self, a: &mut [i32], b: &[i32]) -> Result<(), EbpfError> {
        self.binary(Op::SiluMul, a, b)
    }

    /// `a += b`, in place.
    pub fn add(&mut self, a: &mut [i32], b: &[i32]) -> Result<(), EbpfError> {
        self.binary(Op::Add, a, b)
    }

    fn binary(&mut self, op: Op, a: &mut [i32], b: &[i32]) -> Result<(), EbpfError> {
        Self::check("vector", a.len(), MAXV)?;
        if b.len() != a.len() {
            return Err(EbpfError::Shape { what: "second vector", expected: a.len(), got: b.len() });
        }
        let wk = self.work();
        wk.n = a.len() as u32;
        wk.a[..a.len()].copy_from_slice(a);
        wk.b[..b.len()].copy_from_slice(b);
        self.run(op)?;
        a.copy_from_slice(&self.work().a[..a.len()]);
        Ok(())
    }

    /// Stores this token's `k`, `v` (kv_heads·head_dim, RoPE applied to k) at (`pos`, `layer`) and
    /// attends every query head of `q` over positions `0..=pos`; the result goes to `out`.
    pub fn attention(&mut self, at: At, heads: usize, qkv: Qkv<'_>, out: &mut [i32]) -> Result<(), EbpfError> {
        self.attention_with(at, heads, qkv, None, out)
    }

    /// [`Self::attention`], with QK-norm and RoPE applied in the same call when `prep` is given.
    pub fn attention_with(
        &mut self,
        at: At,
        heads: usize,
        qkv: Qkv<'_>,
        prep: Option<Prep<'_>>,
        out: &mut [i32],
    ) -> Result<(), EbpfError> {
        let (At { layer, pos }, Qkv { q, k, v }) = (at, qkv);
        let kv = self.kv;
        if pos >= kv.positions {
            return Err(EbpfError::Shape {
                what: "position (the KV map's context)",
                expected: kv.positions,
                got: pos + 1,
            });
        }
        let hd = kv.head_dim;
        if layer >= kv.layers || heads == 0 || !heads.is_multiple_of(kv.kv_heads) || heads * hd > MAXV {
            return Err(EbpfError::Shape { what: "attention layer/heads", expected: kv.layers, got: layer });
        }
        let (qn, kvn) = (heads * hd, kv.kv_heads * hd);
        if q.len() != qn || k.len() != kvn || v.len() != kvn || out.len() != qn {
            return Err(EbpfError::Shape { what: "attention q/k/v/out", expected: qn, got: q.len() });
        }
        let wk = self.work();
        wk.heads = heads as u32;
        wk.kv_heads = kv.kv_heads as u32;
        wk.pos = pos as u32;
        wk.slot0 = (layer * kv.kv_heads) as u32;
        wk.stride = (kv.layers * kv.kv_heads) as u32;
        wk.a[..qn].copy_from_slice(q);
        wk.b[..kvn].copy_from_slice(k);
        wk.c[..kvn].copy_from_slice(v);
        wk.flags = 0;
        if let Some(p) = prep {
            let half = hd / 2;
            if p.cos.len() != half || p.sin.len() != half {
                return Err(EbpfError::Shape { what: "RoPE tables (head_dim/2)", expected: half, got: p.cos.len() });
            }
            wk.flags = ROPE;
            wk.cos[..half].copy_from_slice(p.cos);
            wk.sin[..half].copy_from_slice(p.sin);
            if let Some((qn, kn)) = p.qk_norm {
                if qn.len() != hd || kn.len() != hd {
                    return Err(EbpfError::Shape { what: "QK-norm scales (head_dim)", expected: hd, got: qn.len() });
                }
                wk.flags |= QKNORM;
                wk.w[..hd].copy_from_slice(qn);
                wk.w[hd..2 * hd].copy_from_slice(kn);
            }
        }
        self.run(Op::Attention)?;
        out.copy_from_slice(&self.work().d[..qn]);
        Ok(())
    }
}
