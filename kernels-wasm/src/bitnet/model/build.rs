//! Layers from their GGUF tensors, wherever the bytes are: windows of a memory-mapped file
//! ([`super::load`]), or buffers an ESP32 node received over its link ([`crate::esp32`]).
//!
//! Tensor layout (`ne`, innermost first): `token_embd.weight [dim, vocab]`, optional
//! `output.weight [dim, vocab]`, `output_norm.weight [dim]`, and per block `blk.N.` +
//! `attn_norm`, `ffn_norm`, `attn_sub_norm [dim]`, `ffn_sub_norm [ffn]`, `attn_q`/`attn_output`
//! `[dim, dim]`, `attn_k`/`attn_v` `[dim, kv_dim]`, `ffn_gate`/`ffn_up` `[dim, ffn]`, `ffn_down
//! [ffn, dim]`. I2_S keeps its f32 scale after the codes; TL1 and TL2 in a one-value F32 tensor
//! `<name>_scale`.

use super::config::Config;
use super::forward::{Attention, Block, Ffn, RmsNorm, Rope};
use super::linear::Linear;
use super::ModelError;
use crate::bitnet::blob::Blob;
use crate::bitnet::i2s::{I2sLayout, I2sMatrix};
use crate::bitnet::tiling::{LutFormat, Tile};
use crate::bitnet::{tl1, tl2};
use crate::gguf::GgmlType;
use alloc::string::String;
use alloc::vec::Vec;

/// The name of tensor `what` of block `i`.
pub fn block_tensor(i: usize, what: &str) -> String {
    alloc::format!("blk.{i}.{what}.weight")
}

/// The tensors of block `i` that a node must hold: `(name, dims)`, innermost first; TL1/TL2
/// matrices also need their `<name>_scale` (see [`scale_tensor`]).
pub fn block_tensors(c: &Config, i: usize) -> Vec<(String, Vec<u64>)> {
    let (d, kv, f) = (c.dim as u64, c.kv_dim() as u64, c.ffn as u64);
    let shapes: [(&str, &[u64]); 11] = [
        ("attn_norm", &[d]),
        ("attn_q", &[d, d]),
        ("attn_k", &[d, kv]),
        ("attn_v", &[d, kv]),
        ("attn_output", &[d, d]),
        ("attn_sub_norm", &[d]),
        ("ffn_norm", &[d]),
        ("ffn_gate", &[d, f]),
        ("ffn_up", &[d, f]),
        ("ffn_down", &[f, d]),
        ("ffn_sub_norm", &[f]),
    ];
    shapes.iter().map(|(w, dims)| (block_tensor(i, w), dims.to_vec())).collect()
}

/// The one-value F32 tensor in which TL1/TL2 keep a matrix's scale.
pub fn scale_tensor(name: &str) -> String {
    alloc::format!("{name}_scale")
}

/// Where tensors come from.
pub trait Source {
    /// Tensor `name`: its type and bytes, after checking that its shape is `dims` (if given).
    fn take(&mut self, name: &str, dims: Option<&[u64]>) -> Result<(GgmlType, Blob), ModelError>;
    /// Whether the source has tensor `name` at all.
    fn has(&self, name: &str) -> bool;
}

/// Block `i` of a model shaped `c`.
pub fn block(src: &mut impl Source, c: &Config, i: usize) -> Result<Block, ModelError> {
    let t = |what: &str| block_tensor(i, what);
    Ok(Block {
        attn_norm: norm(src, &t("attn_norm"), c.dim, c.eps)?,
        attn: Attention {
            q: linear(src, &t("attn_q"), c.dim, c.dim)?,
            k: linear(src, &t("attn_k"), c.kv_dim(), c.dim)?,
            v: linear(src, &t("attn_v"), c.kv_dim(), c.dim)?,
            o: linear(src, &t("attn_output"), c.dim, c.dim)?,
            sub_norm: norm(src, &t("attn_sub_norm"), c.dim, c.eps)?,
            heads: c.heads,
            kv_heads: c.kv_heads,
            rope: Rope::new(c.head_dim(), c.rope_base),
        },
        ffn_norm: norm(src, &t("ffn_norm"), c.dim, c.eps)?,
        ffn: Ffn {
            gate: linear(src, &t("ffn_gate"), c.ffn, c.dim)?,
            up: linear(src, &t("ffn_up"), c.ffn, c.dim)?,
            down: linear(src, &t("ffn_down"), c.dim, c.ffn)?,
            sub_norm: norm(src, &t("ffn_sub_norm"), c.ffn, c.eps)?,
        },
    })
}

/// `len` bytes from the front of `b`, or an error naming the tensor.
fn front(name: &str, b: Blob, len: usize) -> Result<Blob, ModelError> {
    let has = b.len();
    b.prefix(len).ok_or_else(|| ModelError::tensor(name, alloc::format!("needs {len} bytes, has {has} (truncated?)")))
}

pub fn norm(src: &mut impl Source, name: &str, len: usize, eps: f32) -> Result<RmsNorm, ModelError> {
    let (ty, data) = src.take(name, Some(&[len as u64]))?;
    let weight = crate::gguf::dequantize(ty, &data)
        .ok_or_else(|| ModelError::tensor(name, alloc::format!("type {ty:?} cannot be dequantised")))?;
    if weight.len() != len {
        return Err(ModelError::tensor(name, alloc::format!("{} values, expected {len} (truncated?)", weight.len())));
    }
    if let Some(i) = weight.iter().position(|v| !v.is_finite()) {
        return Err(ModelError::tensor(name, alloc::format!("value {i} is not finite")));
    }
    Ok(RmsNorm { weight, eps })
}

/// The scale of a TL1/TL2 matrix, from its one-value tensor.
fn scale(src: &mut impl Source, name: &str) -> Result<f32, ModelError> {
    let sname = scale_tensor(name);
    if !src.has(&sname) {
        return Err(ModelError::tensor(&sname, "missing (TL1/TL2 keep the scale here)"));
    }
    let (ty, data) = src.take(&sname, None)?;
    match crate::gguf::dequantize(ty, &data).as_deref() {
        Some([s, ..]) if s.is_finite() => Ok(*s),
        _ => Err(ModelError::tensor(&sname, "not a finite f32")),
    }
}

/// An `m × k` ternary matrix.
pub fn linear(src: &mut impl Source, name: &str, m: usize, k: usize) -> Result<Linear, ModelError> {
    let (ty, data) = src.take(name, Some(&[k as u64, m as u64]))?;
    let kernel = |source| ModelError::Kernel { name: name.into(), source };
    Ok(match ty {
        GgmlType::I2_S => {
            let n = m * k / 4;
            let trailer = data.get(n..n + 4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let Some(scale) = trailer else {
                return Err(ModelError::tensor(
                    name,
                    alloc::format!("needs {} bytes, has {} (truncated?)", n + 4, data.len()),
                ));
            };
            if !scale.is_finite() || !k.is_multiple_of(I2sLayout::X86.block()) {
                return Err(ModelError::tensor(
                    name,
                    alloc::format!("scale {scale} or K = {k} (a multiple of 128) does not fit x86 I2_S"),
                ));
            }
            let codes = front(name, data, n)?;
            Linear::I2s(I2sMatrix { rows: m, cols: k, layout: I2sLayout::X86, codes, scale })
        }
        GgmlType::TL1 => {
            let tile = Tile::choose(LutFormat::Tl1, m, k).map_err(kernel)?;
            let geometry = tl1::Geometry::new(m, k, tile).map_err(kernel)?;
            let packed = front(name, data, m * k / 4)?;
            Linear::Tl1(tl1::Tl1Matrix { geometry, packed, scale: scale(src, name)? })
        }
        GgmlType::TL2 => {
            let tile = Tile::choose(LutFormat::Tl2, m, k).map_err(kernel)?;
            let geometry = tl2::Geometry::new(m, k, tile).map_err(kernel)?;
            let packed = front(name, data, geometry.packed_bytes())?;
            Linear::Tl2(tl2::Tl2Matrix { geometry, packed, scale: scale(src, name)? })
        }
        other => {
            return Err(ModelError::tensor(
                name,
                alloc::format!("type {other:?}: linear layers must be I2_S, TL1 or TL2 (convert the model first)"),
            ))
        }
    })
}
