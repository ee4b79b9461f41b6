//! A BitNet model from a GGUF file as bitnet.cpp writes it. The ternary matrices and the
//! embedding table stay where they are in the file's buffer (a memory map, natively); only the
//! norms are copied.
//!
//! Tensor layout (`ne`, innermost first): `token_embd.weight [dim, vocab]`, optional
//! `output.weight [dim, vocab]`, `output_norm.weight [dim]`, and per block `blk.N.` +
//! `attn_norm`, `ffn_norm`, `attn_sub_norm [dim]`, `ffn_sub_norm [ffn]`, `attn_q`/`attn_output`
//! `[dim, dim]`, `attn_k`/`attn_v` `[dim, kv_dim]`, `ffn_gate`/`ffn_up` `[dim, ffn]`, `ffn_down
//! [ffn, dim]`. I2_S keeps its f32 scale after the codes; TL1 and TL2 in a one-value F32 tensor
//! `<name>_scale`.

use super::config::Config;
use super::forward::{Attention, Block, Ffn, Model, RmsNorm, Rope};
use super::linear::Linear;
use super::table::Table;
use super::tokenizer::Tokenizer;
use super::ModelError;
use crate::bitnet::blob::{Blob, Shared};
use crate::bitnet::i2s::{I2sLayout, I2sMatrix};
use crate::bitnet::tiling::{LutFormat, Tile};
use crate::bitnet::{tl1, tl2};
use crate::gguf::{GgmlType, Gguf, TensorInfo};
use alloc::vec::Vec;

/// The tensor names of block `i` (PyTorch-style `(out, in)` shapes come from the config).
pub fn block_tensor(i: usize, what: &str) -> alloc::string::String {
    alloc::format!("blk.{i}.{what}.weight")
}

/// Loads a model from the whole file in `data`.
pub fn load(data: Shared) -> Result<Model, ModelError> {
    let g = Gguf::parse((*data).as_ref())?;
    let c = Config::from_gguf(&g)?;
    let f = File { g: &g, data: &data };
    let embed = f.table("token_embd.weight", c.vocab, c.dim)?;
    let output = match g.tensor("output.weight") {
        Some(_) => Some(f.table("output.weight", c.vocab, c.dim)?),
        None => None,
    };
    let mut blocks = Vec::with_capacity(c.layers);
    for i in 0..c.layers {
        let t = |what: &str| block_tensor(i, what);
        blocks.push(Block {
            attn_norm: f.norm(&t("attn_norm"), c.dim, c.eps)?,
            attn: Attention {
                q: f.linear(&t("attn_q"), c.dim, c.dim)?,
                k: f.linear(&t("attn_k"), c.kv_dim(), c.dim)?,
                v: f.linear(&t("attn_v"), c.kv_dim(), c.dim)?,
                o: f.linear(&t("attn_output"), c.dim, c.dim)?,
                sub_norm: f.norm(&t("attn_sub_norm"), c.dim, c.eps)?,
                heads: c.heads,
                kv_heads: c.kv_heads,
                rope: Rope::new(c.head_dim(), c.rope_base),
            },
            ffn_norm: f.norm(&t("ffn_norm"), c.dim, c.eps)?,
            ffn: Ffn {
                gate: f.linear(&t("ffn_gate"), c.ffn, c.dim)?,
                up: f.linear(&t("ffn_up"), c.ffn, c.dim)?,
                down: f.linear(&t("ffn_down"), c.dim, c.ffn)?,
                sub_norm: f.norm(&t("ffn_sub_norm"), c.ffn, c.eps)?,
            },
        });
    }
    Ok(Model {
        embed,
        output,
        blocks,
        output_norm: f.norm("output_norm.weight", c.dim, c.eps)?,
        tokenizer: Tokenizer::from_gguf(&g)?,
        config: c,
    })
}

struct File<'a> {
    g: &'a Gguf,
    data: &'a Shared,
}

impl File<'_> {
    fn info(&self, name: &str, dims: &[u64]) -> Result<&TensorInfo, ModelError> {
        let t = self.g.tensor(name).ok_or_else(|| ModelError::tensor(name, "missing"))?;
        if t.dims != dims {
            return Err(ModelError::tensor(name, alloc::format!("shape {:?}, expected {dims:?}", t.dims)));
        }
        Ok(t)
    }

    fn bytes(&self, name: &str, t: &TensorInfo, len: usize) -> Result<Blob, ModelError> {
        Blob::shared(self.data.clone(), t.offset..t.offset + len)
            .filter(|_| len <= t.bytes)
            .ok_or_else(|| ModelError::tensor(name, alloc::format!("needs {len} bytes, has {} (truncated?)", t.bytes)))
    }

    fn table(&self, name: &str, rows: usize, cols: usize) -> Result<Table, ModelError> {
        let t = self.info(name, &[cols as u64, rows as u64])?;
        Table::new(name, rows, cols, t.ty, self.bytes(name, t, t.bytes)?)
    }

    fn norm(&self, name: &str, len: usize, eps: f32) -> Result<RmsNorm, ModelError> {
        let t = self.info(name, &[len as u64])?;
        let weight = self.g.dequantize((**self.data).as_ref(), t)?;
        if let Some(i) = weight.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::tensor(name, alloc::format!("value {i} is not finite")));
        }
        Ok(RmsNorm { weight, eps })
    }

    /// The one-value scale tensor of a TL1/TL2 matrix.
    fn scale(&self, name: &str) -> Result<f32, ModelError> {
        let sname = alloc::format!("{name}_scale");
        let t =
            self.g.tensor(&sname).ok_or_else(|| ModelError::tensor(&sname, "missing (TL1/TL2 keep the scale here)"))?;
        let v = self.g.dequantize((**self.data).as_ref(), t)?;
        match v.as_slice() {
            [s, ..] if s.is_finite() => Ok(*s),
            _ => Err(ModelError::tensor(&sname, "not a finite f32")),
        }
    }

    fn linear(&self, name: &str, m: usize, k: usize) -> Result<Linear, ModelError> {
        let t = self.info(name, &[k as u64, m as u64])?;
        let kernel = |source| ModelError::Kernel { name: name.into(), source };
        Ok(match t.ty {
            GgmlType::I2_S => {
                let n = m * k / 4;
                let codes = self.bytes(name, t, n)?;
                let trailer = self.bytes(name, t, n + 4)?;
                let scale = f32::from_le_bytes([trailer[n], trailer[n + 1], trailer[n + 2], trailer[n + 3]]);
                if !scale.is_finite() || !k.is_multiple_of(I2sLayout::X86.block()) {
                    return Err(ModelError::tensor(
                        name,
                        alloc::format!("scale {scale} or K = {k} (a multiple of 128) does not fit x86 I2_S"),
                    ));
                }
                Linear::I2s(I2sMatrix { rows: m, cols: k, layout: I2sLayout::X86, codes, scale })
            }
            GgmlType::TL1 => {
                let tile = Tile::choose(LutFormat::Tl1, m, k).map_err(kernel)?;
                let geometry = tl1::Geometry::new(m, k, tile).map_err(kernel)?;
                let packed = self.bytes(name, t, m * k / 4)?;
                Linear::Tl1(tl1::Tl1Matrix { geometry, packed, scale: self.scale(name)? })
            }
            GgmlType::TL2 => {
                let tile = Tile::choose(LutFormat::Tl2, m, k).map_err(kernel)?;
                let geometry = tl2::Geometry::new(m, k, tile).map_err(kernel)?;
                let packed = self.bytes(name, t, geometry.packed_bytes())?;
                Linear::Tl2(tl2::Tl2Matrix { geometry, packed, scale: self.scale(name)? })
            }
            other => {
                return Err(ModelError::tensor(
                    name,
                    alloc::format!("type {other:?}: linear layers must be I2_S, TL1 or TL2 (convert the model first)"),
                ))
            }
        })
    }
}
