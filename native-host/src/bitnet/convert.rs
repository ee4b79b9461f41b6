//! `native-host bitnet convert`: a BitNet GGUF with f32/f16/bf16 linear weights (bitnet.cpp's
//! `convert-hf-to-gguf-bitnet.py --outtype f32` output, or its dummy models before
//! llama-quantize), or one already in I2_S/TL1/TL2, to I2_S, TL1 or TL2. Linear weights become
//! ternary as bitnet.cpp does it (`convert::ternary`); everything else is copied.

use super::dummy::{parse_embed, parse_output_type, parse_quant, write_model, Target};
use anyhow::{bail, Context, Result};
use kernels_wasm::bitnet::blob::Shared;
use kernels_wasm::bitnet::model::config::Config;
use kernels_wasm::bitnet::model::write::{Kind, Values};
use kernels_wasm::bitnet::model::{convert, load, Model};
use kernels_wasm::gguf::{GgmlType, Gguf};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// The source model: a GGUF file (architecture bitnet), or a Hugging Face checkpoint
    /// directory (config.json, *.safetensors, tokenizer.model).
    #[arg(short = 'i', long)]
    pub input: PathBuf,
    /// Target format: i2_s, tl1 or tl2.
    #[arg(long)]
    pub quant: String,
    /// Embedding/output type: f16 (what bitnet.cpp's llama-quantize makes of them) or f32.
    #[arg(long, default_value = "f16")]
    pub embed: String,
    /// Output-layer type: f16, f32, q8_0 or q6_k (ik_llama.cpp's --output-tensor-type). A model
    /// without its own output.weight uses its embeddings as the output layer, so they take this
    /// type. Default: --embed's.
    #[arg(long)]
    pub output_type: Option<String>,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    let quant = parse_quant(&args.quant)?;
    if args.input.is_dir() {
        return from_checkpoint(&args, quant);
    }
    let file = std::fs::File::open(&args.input).with_context(|| format!("opening {}", args.input.display()))?;
    // SAFETY: read-only map, as in `super::open`.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    let data: Shared = Arc::new(map);
    let bytes: &[u8] = (*data).as_ref();
    let g = Gguf::parse(bytes).with_context(|| format!("{}", args.input.display()))?;
    let c = Config::from_gguf(&g)?;
    let embed = parse_embed(&args.embed)?;
    // A source already in a ternary format is read through the model loader.
    let ternary_source = g.tensors.iter().any(|t| matches!(t.ty, GgmlType::I2_S | GgmlType::TL1 | GgmlType::TL2));
    let model: Option<Model> = if ternary_source { Some(load::load(data.clone())?) } else { None };
    let mut metadata: Vec<_> = g
        .metadata
        .iter()
        .filter(|(k, _)| k.as_str() != "general.file_type")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata.push(("general.file_type".into(), kernels_wasm::gguf::Value::U32(quant.file_type())));
    let name = g.get("general.name").and_then(|v| v.as_str()).unwrap_or("bitnet").to_string();
    let output = g.tensor("output.weight").is_some();
    let make = |tensor: &str, kind: &Kind| -> Result<Values> {
        if *kind == Kind::Scale {
            return Ok(Values::F32(Vec::new()));
        }
        let t = g.tensor(tensor).context("missing in the source")?;
        Ok(match kind {
            Kind::Linear { m, k, .. } => match &model {
                Some(model) => Values::Ternary(find_linear(model, tensor)?.unpack()),
                None => {
                    let w = g.dequantize(bytes, t)?;
                    Values::Ternary(convert::ternary(*m, *k, &w)?)
                }
            },
            _ => Values::F32(g.dequantize(bytes, t)?),
        })
    };
    let output_ty = output_type(&args, embed)?;
    let target = Target { name: &name, quant, embed, output_ty, output, path: &args.output };
    let total = write_model(&c, target, metadata, make)?;
    eprintln!("wrote {} ({:.1} MB)", args.output.display(), total as f64 / 1e6);
    Ok(())
}

fn output_type(args: &Args, embed: kernels_wasm::gguf::GgmlType) -> Result<kernels_wasm::gguf::GgmlType> {
    args.output_type.as_deref().map(parse_output_type).unwrap_or(Ok(embed))
}

fn find_linear<'a>(m: &'a Model, tensor: &str) -> Result<&'a kernels_wasm::bitnet::model::Linear> {
    let rest = tensor.strip_prefix("blk.").context("not a block tensor")?;
    let (i, what) = rest.split_once('.').context("not a block tensor")?;
    let b = m.blocks.get(i.parse::<usize>()?).context("block out of range")?;
    Ok(match what {
        "attn_q.weight" => &b.attn.q,
        "attn_k.weight" => &b.attn.k,
        "attn_v.weight" => &b.attn.v,
        "attn_output.weight" => &b.attn.o,
        "ffn_gate.weight" => &b.ffn.gate,
        "ffn_up.weight" => &b.ffn.up,
        "ffn_down.weight" => &b.ffn.down,
        _ => bail!("{tensor}: not a linear layer"),
    })
}

/// A Hugging Face checkpoint directory to `quant`.
fn from_checkpoint(args: &Args, quant: kernels_wasm::bitnet::model::Quant) -> Result<()> {
    let ck = super::hf::read(&args.input)?;
    let c = &ck.config;
    let name = args.input.file_name().and_then(|n| n.to_str()).unwrap_or("bitnet").to_string();
    let mut metadata = c.metadata(&name, quant.file_type());
    metadata.extend(ck.tokenizer.iter().cloned());
    let make = |tensor: &str, kind: &Kind| -> Result<Values> {
        if *kind == Kind::Scale {
            return Ok(Values::F32(Vec::new()));
        }
        let w = ck.tensors.get(tensor).context("missing in the checkpoint")?;
        Ok(match kind {
            Kind::Linear { m, k, .. } => Values::Ternary(convert::ternary(*m, *k, w)?),
            _ => Values::F32(w.clone()),
        })
    };
    let embed = parse_embed(&args.embed)?;
    let output_ty = output_type(args, embed)?;
    let target = Target { name: &name, quant, embed, output_ty, output: !ck.tied, path: &args.output };
    let total = write_model(c, target, metadata, make)?;
    eprintln!("wrote {} ({:.1} MB)", args.output.display(), total as f64 / 1e6);
    Ok(())
}
