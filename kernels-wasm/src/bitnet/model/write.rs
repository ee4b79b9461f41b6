//! Writing BitNet GGUF files as bitnet.cpp lays them out, one tensor at a time (a 7B model is
//! gigabytes: the caller streams each tensor's bytes to disk as it makes them).
//!
//! [`tensors`] lists a model's tensors, [`plan`] gives the header for them, and [`stream`]
//! encodes each tensor when its turn comes.

use super::build::block_tensor;
use super::config::Config;
use super::linear::{Linear, Quant};
use crate::bitnet::quant::TernaryMatrix;
use crate::bitnet::BitnetError;
use crate::gguf::{f32_to_f16, write, GgmlType, Value};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// What a tensor of the model is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Embedding (or output) table, `rows × cols`, F16, F32, Q8_0 or Q6_K.
    Table { rows: usize, cols: usize, ty: GgmlType },
    /// RMSNorm weights, F32.
    Norm(usize),
    /// A ternary linear layer, `m × k`.
    Linear { m: usize, k: usize, quant: Quant },
    /// The F32 scale of the TL1/TL2 matrix before it.
    Scale,
}

impl Kind {
    fn dims(&self) -> Vec<u64> {
        match *self {
            Kind::Table { rows, cols, .. } => vec![cols as u64, rows as u64],
            Kind::Norm(n) => vec![n as u64],
            Kind::Linear { m, k, .. } => vec![k as u64, m as u64],
            Kind::Scale => vec![1],
        }
    }

    fn ty(&self) -> GgmlType {
        match self {
            Kind::Table { ty, .. } => *ty,
            Kind::Norm(_) | Kind::Scale => GgmlType::F32,
            Kind::Linear { quant, .. } => quant.ggml(),
        }
    }
}

/// The tensors of a model of shape `c`, in the order bitnet.cpp's converter writes them.
pub fn tensors(c: &Config, quant: Quant, embed: GgmlType, output: bool) -> Vec<(String, Kind)> {
    tensors_typed(c, quant, embed, embed, output)
}

/// [`tensors`] with the output layer in `output_ty` (a tied model's one table is its output
/// layer too, so it takes `output_ty`).
pub fn tensors_typed(
    c: &Config,
    quant: Quant,
    embed: GgmlType,
    output_ty: GgmlType,
    output: bool,
) -> Vec<(String, Kind)> {
    let first = if output { embed } else { output_ty };
    let mut out = vec![("token_embd.weight".into(), Kind::Table { rows: c.vocab, cols: c.dim, ty: first })];
    let lin = |m, k| Kind::Linear { m, k, quant };
    for i in 0..c.layers {
        for (what, kind) in [
            ("attn_norm", Kind::Norm(c.dim)),
            ("ffn_down", lin(c.dim, c.ffn)),
            ("ffn_sub_norm", Kind::Norm(c.ffn)),
            ("ffn_gate", lin(c.ffn, c.dim)),
            ("ffn_up", lin(c.ffn, c.dim)),
            ("ffn_norm", Kind::Norm(c.dim)),
            ("attn_sub_norm", Kind::Norm(c.dim)),
            ("attn_k", lin(c.kv_dim(), c.dim)),
            ("attn_output", lin(c.dim, c.dim)),
            ("attn_q", lin(c.dim, c.dim)),
            ("attn_v", lin(c.kv_dim(), c.dim)),
        ] {
            let name = block_tensor(i, what);
            let scaled = matches!(kind, Kind::Linear { .. }) && quant != Quant::I2s;
            out.push((name.clone(), kind));
            if scaled {
                out.push((alloc::format!("{name}_scale"), Kind::Scale));
            }
        }
    }
    out.push(("output_norm.weight".into(), Kind::Norm(c.dim)));
    if output {
        out.push(("output.weight".into(), Kind::Table { rows: c.vocab, cols: c.dim, ty: output_ty }));
    }
    out
}

/// Bytes of one tensor of `kind` in the file.
pub fn tensor_bytes(kind: &Kind) -> usize {
    kind.ty().tensor_bytes(&kind.dims()).unwrap_or(0) as usize
}

/// The file's header for these metadata and tensors.
pub fn plan(metadata: &[(String, Value)], tensors: &[(String, Kind)]) -> Vec<u8> {
    let descr: Vec<_> = tensors.iter().map(|(n, k)| (n.clone(), k.dims(), k.ty(), tensor_bytes(k))).collect();
    write::header(metadata, &descr)
}

pub fn encode_table(values: &[f32], ty: GgmlType) -> Vec<u8> {
    match ty {
        GgmlType::F16 => values.iter().flat_map(|&v| f32_to_f16(v).to_le_bytes()).collect(),
        GgmlType::Q8_0 | GgmlType::Q6_K => {
            let mut out = Vec::new();
            super::qtable::quantize_row(ty, values, &mut out);
            out
        }
        _ => encode_norm(values),
    }
}

pub fn encode_norm(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A ternary matrix in `quant`'s file layout: the packed bytes padded to the size ggml gives the
/// type (I2_S with its scale as the trailer's first f32), and the scale for the `_scale` tensor.
pub fn encode_linear(t: &TernaryMatrix, quant: Quant) -> Result<(Vec<u8>, f32), BitnetError> {
    let packed = Linear::pack(t, quant)?;
    let size = tensor_bytes(&Kind::Linear { m: t.rows, k: t.cols, quant });
    if size < packed.packed().len() + 4 {
        return Err(BitnetError::Shape {
            format: "TL2",
            m: t.rows,
            k: t.cols,
            why: "bitnet.cpp sizes a TL2 tensor as roundup32(((K−256)·M)/3·5/8 + …), so a TL2 file needs K ≥ 256"
                .into(),
        });
    }
    let mut bytes = packed.packed().to_vec();
    if quant == Quant::I2s {
        bytes.extend_from_slice(&t.scale.to_le_bytes());
    }
    bytes.resize(size, 0);
    Ok((bytes, t.scale))
}

/// Writes a model file through `emit` (the header first, then each tensor's bytes and its
/// padding), asking `make(name, kind)` for each tensor's values (ternary weights for `Linear`,
/// f32 otherwise) only when it is its turn.
pub fn stream<E: From<BitnetError>>(
    metadata: &[(String, Value)],
    tensors: &[(String, Kind)],
    mut make: impl FnMut(&str, &Kind) -> Result<Values, E>,
    mut emit: impl FnMut(&str, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    emit("header", &plan(metadata, tensors))?;
    let mut last_scale = 0.0f32;
    for (name, kind) in tensors {
        let bytes = match (kind, make(name, kind)?) {
            (Kind::Scale, _) => last_scale.to_le_bytes().to_vec(),
            (Kind::Linear { quant, .. }, Values::Ternary(t)) => {
                let (bytes, scale) = encode_linear(&t, *quant)?;
                last_scale = scale;
                bytes
            }
            (Kind::Table { ty, .. }, Values::F32(v)) => encode_table(&v, *ty),
            (_, Values::F32(v)) => encode_norm(&v),
            (_, Values::Ternary(t)) => encode_norm(&alloc::vec![0.0; t.w.len()]),
        };
        if bytes.len() != tensor_bytes(kind) {
            // Wrong-sized values: refuse rather than write a file that does not parse.
            return Err(
                BitnetError::Length { what: "tensor bytes", expected: tensor_bytes(kind), got: bytes.len() }.into()
            );
        }
        emit(name, &bytes)?;
        emit(name, &alloc::vec![0u8; write::padding(bytes.len())])?;
    }
    Ok(())
}

/// A whole model file in memory (small models and tests).
pub fn to_bytes(
    metadata: &[(String, Value)],
    tensors: &[(String, Kind)],
    make: impl FnMut(&str, &Kind) -> Result<Values, BitnetError>,
) -> Result<Vec<u8>, BitnetError> {
    let mut out = Vec::new();
    stream(metadata, tensors, make, |_, bytes| {
        out.extend_from_slice(bytes);
        Ok(())
    })?;
    Ok(out)
}

/// A tensor's values before encoding.
pub enum Values {
    F32(Vec<f32>),
    Ternary(TernaryMatrix),
}
