//! `native-host bitnet dummy`: a dummy layout written as a GGUF model, tensor by tensor (a 7B
//! model never sits in memory whole), deterministic from the seed.

use super::{write_atomically, Progress};
use anyhow::{bail, Result};
use kernels_wasm::bitnet::model::config::{Config, DUMMY_LAYOUTS};
use kernels_wasm::bitnet::model::write::{self, Kind, Values};
use kernels_wasm::bitnet::model::{dummy, Quant};
use kernels_wasm::gguf::GgmlType;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Layout: 125M, 350M, 1B, 1.5B, 2.7B, 3.8B, 7B or 13B (generate-dummy-bitnet-model.py's), or
    /// tiny (2 layers of 256, for tests).
    #[arg(long, default_value = "125M")]
    pub size: String,
    /// Linear-layer format: i2_s, tl1 or tl2.
    #[arg(long, default_value = "i2_s")]
    pub quant: String,
    /// Embedding/output table type: f16 (as bitnet.cpp's dummy models) or f32.
    #[arg(long, default_value = "f16")]
    pub embed: String,
    /// Seed of the random weights (same seed, same file).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
}

pub fn parse_quant(s: &str) -> Result<Quant> {
    match Quant::parse(s) {
        Some(q) => Ok(q),
        None => bail!("--quant {s:?}: give i2_s, tl1 or tl2"),
    }
}

pub fn parse_embed(s: &str) -> Result<GgmlType> {
    match s.to_ascii_lowercase().as_str() {
        "f16" => Ok(GgmlType::F16),
        "f32" => Ok(GgmlType::F32),
        _ => bail!("--embed {s:?}: give f16 or f32"),
    }
}

/// `--output-type`: the output layer's type.
pub fn parse_output_type(s: &str) -> Result<GgmlType> {
    match s.to_ascii_lowercase().as_str() {
        "f16" => Ok(GgmlType::F16),
        "f32" => Ok(GgmlType::F32),
        "q8_0" => Ok(GgmlType::Q8_0),
        "q6_k" => Ok(GgmlType::Q6_K),
        _ => bail!("--output-type {s:?}: give f16, f32, q8_0 or q6_k"),
    }
}

pub fn run(args: Args) -> Result<()> {
    let Some(c) = Config::dummy(&args.size) else {
        let sizes: Vec<&str> = DUMMY_LAYOUTS.iter().map(|l| l.0).collect();
        bail!("--size {:?}: give one of {} or tiny", args.size, sizes.join(", "));
    };
    let (quant, embed) = (parse_quant(&args.quant)?, parse_embed(&args.embed)?);
    let name = format!("bitnet-dummy-{}", args.size.to_uppercase());
    let target = Target { name: &name, quant, embed, output_ty: embed, output: false, path: &args.output };
    write_model(&c, target, dummy::metadata(&c, &name, quant), |tensor, kind| {
        Ok(dummy::values(args.seed, tensor, kind))
    })?;
    Ok(())
}

/// What a written model file holds besides its shape and values.
pub struct Target<'a> {
    pub name: &'a str,
    pub quant: Quant,
    pub embed: GgmlType,
    /// The output layer's type (a model without `output.weight` gives it to its embeddings).
    pub output_ty: GgmlType,
    /// Whether it has its own `output.weight` (else the embeddings serve).
    pub output: bool,
    pub path: &'a std::path::Path,
}

/// Streams a model of shape `c` to `t.path`, asking `make` for each tensor's values.
pub fn write_model(
    c: &Config,
    t: Target,
    metadata: Vec<(String, kernels_wasm::gguf::Value)>,
    mut make: impl FnMut(&str, &Kind) -> Result<Values>,
) -> Result<u64> {
    let Target { name, quant, embed, output_ty, output, path } = t;
    let tensors = write::tensors_typed(c, quant, embed, output_ty, output);
    let total: u64 = tensors
        .iter()
        .map(|(_, k)| write::tensor_bytes(k).next_multiple_of(kernels_wasm::gguf::write::ALIGNMENT) as u64)
        .sum();
    eprintln!(
        "{name}: {} layers, dim {}, FFN {}, vocab {}, {:.1} M ternary weights in {}, {:?} embeddings, {output_ty:?} output → {}",
        c.layers,
        c.dim,
        c.ffn,
        c.vocab,
        c.ternary_weights() as f64 / 1e6,
        quant.name().to_uppercase(),
        if output { embed } else { output_ty },
        path.display()
    );
    let mut progress = Progress::new(total);
    write_atomically(path, |w| {
        write::stream(
            &metadata,
            &tensors,
            |tensor, kind| make(tensor, kind).map_err(|e| anyhow::anyhow!("{tensor}: {e}")),
            |tensor, bytes| {
                w.write_all(bytes)?;
                if tensor != "header" {
                    progress.add(bytes.len() as u64, tensor);
                }
                Ok(())
            },
        )
    })?;
    Ok(total)
}
