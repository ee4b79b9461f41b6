//! The spliced model as a checkpoint (issue #22): `native-host qwengpu splice -m MODEL -o DIR`
//! writes `DIR/config.json` and `DIR/model.safetensors`; `qwengpu drift --load DIR` runs from them.
//!
//! - **config.json** names the format, the text model's shape, the stream (width, bias and flag
//!   channels, ε), the layer list in order (the compiled SwiGLU and Gated DeltaNet layers, then
//!   the text's decoder layers) with each compiled layer's dense shapes and nonzero count, the
//!   vocabulary (text tokens, then VAL and record tokens and the channels of their fields), the
//!   slot counter's, the register file's, the executor's, the results row's and the PC rows'
//!   channels.
//! - **model.safetensors** holds every tensor as F32 (the text's dequantised values are exact in
//!   f32, so the checkpoint runs bit for bit as the model it came from). The compiled matrices
//!   are sparse: each is three tensors, `.rows` and `.cols` (U32) and `.values` (F32), one entry
//!   per term the executor sums (a SwiGLU unit's in the order the executor sums them; a
//!   DeltaNet's are summed in column order whatever their order in the file); their dense shapes
//!   are in config.json. A coordinate may appear more than once (a unit's gate can read one
//!   channel through two terms): the dense matrix holds the sum of its entries
//!   (`tests/qwengpu_dense.rs` checks the file that way). The machine tokens' embedding and head
//!   rows are stored the same way.
//!
//! Loading checks everything a hostile file could get wrong (a missing or misshapen tensor, an
//! index past its dense shape, a vocabulary that does not add up) and names it.

use crate::ebpf::hf::to_f32;
use crate::ebpf::models;
use crate::ebpf::tokenize::TextTokenizer;
use anyhow::{anyhow, ensure, Context, Result};
use kernels_wasm::qwen3::model::{Config, FloatLayer, FloatModel};
use kernels_wasm::qwengpu::exec::Exec;
use kernels_wasm::qwengpu::limbs::{Layer, Unit};
use kernels_wasm::qwengpu::machine_tokens::{Field, Vocab};
use kernels_wasm::qwengpu::next_record::NextRecord;
use kernels_wasm::qwengpu::pc_rows::PcRows;
use kernels_wasm::qwengpu::register_file::RegisterFile;
use kernels_wasm::qwengpu::results::Results;
use kernels_wasm::qwengpu::splice::{Compiled, Splice, StreamNorms};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod deltanet;

use deltanet::{deltanet_vectors, read_deltanet};

pub const FORMAT: &str = "substrates-qwengpu-spliced";
/// 2: the register file's channels (`register_file`) and its three layers.
/// 3: the executor's and the results row's channels (`exec`, `results`) and their layers in place
/// of the feed and the lone ALU.
/// 4: the launch context (the register file's launch words and thread channels, the executor's
/// special registers and parameters).
/// 5: global loads (the register file's memory groups, the executor's load channels and its
/// load mixers, one before each instruction's sixth stage layer).
/// 6: stores carried (the table's store slots, the register file's store flags and latch before
/// the executor's second stage, the results row's kept stores).
/// 7: shared memory (the register file's shared groups, the executor's shared word and shared
/// mixers, one after each load mixer).
/// 8: the second machine's spec (`MachineSpec::second`: no divider, 64 ROM blocks), so 64
/// blocks in the record tokens' field and the register file's block one-hot.
/// 9: atomics (the executor's atomic flag and sum; an atomic's write is a store slot).
/// 10: the reset record; 11: shuffles (the register file's rows beside the executor).
/// 12: text positions attend to text positions only, at RoPE positions that count text tokens
/// (the same weights, read as a different model: docs/qwengpu-second-machine.md §20).
/// 13: each lane's PC in rows (`pc_rows`), and the second machine's ROM in its lowest-PC order.
/// 14: the next record read from the PC rows (`next_record`; the rows a head per warp of a
/// thread block and lane).
pub const VERSION: u32 = 14;

/// The text model: its shape, what it was read from, and whether its head is its embedding.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TextShape {
    pub architecture: String,
    pub tied_head: bool,
    #[serde(flatten)]
    pub config: Config,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LayerEntry {
    /// `compiled_swiglu` or `text_decoder`.
    pub kind: String,
    pub name: String,
    /// Compiled layers: hidden units, nonzero weights, and the dense shapes of gate, up, down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonzero: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_shapes: Option<[[usize; 2]; 3]>,
    /// A compiled Gated DeltaNet: its heads, key and value widths, and RMSNormGated's ε.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deltanet: Option<DeltaNetShape>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct DeltaNetShape {
    pub heads: usize,
    pub d_k: usize,
    pub d_v: usize,
    pub eps: f32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VocabEntry {
    pub text: usize,
    pub machine: usize,
    pub val_tokens: usize,
    pub record_tokens: usize,
    pub kind_channel: usize,
    /// (channel, values) of each field: VAL's two limbs, then the record's warp, block and mask.
    pub val_fields: [[usize; 2]; 2],
    pub record_fields: [[usize; 2]; 3],
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckpointConfig {
    pub format: String,
    pub version: u32,
    pub text: TextShape,
    pub width: usize,
    pub bias_channel: usize,
    pub flag_channel: usize,
    pub flag_value: f32,
    pub eps: f32,
    pub layers: Vec<LayerEntry>,
    pub vocabulary: VocabEntry,
    /// Dense shape of the machine tokens' embedding and head (both sparse in the file).
    pub machine_embedding_shape: [usize; 2],
    pub machine_head_shape: [usize; 2],
    pub slot_channel: usize,
    pub slots: usize,
    pub step_record_channel: usize,
    /// The live-out table's and the register rows' channels and sizes.
    pub register_file: RegisterFile,
    /// The executor's channels: the ROM words and registers it reads, its own from `first`.
    pub exec: Exec,
    /// The results row's first channel (the rest follow from the register file's).
    pub results_first: usize,
    /// The PC rows' first channel (`pc_rows`).
    pub pc_first: usize,
    /// The next record's first channel (`next_record`).
    pub next_record_first: usize,
}

/// A tensor on its way into the file: name, dtype, shape, bytes.
struct Out {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn f32s(name: impl Into<String>, shape: Vec<usize>, v: &[f32]) -> Out {
    Out { name: name.into(), dtype: Dtype::F32, shape, data: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
}

fn u32s(name: impl Into<String>, v: &[u32]) -> Out {
    Out {
        name: name.into(),
        dtype: Dtype::U32,
        shape: vec![v.len()],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// A sparse matrix as `{name}.rows`, `.cols`, `.values`, entries in `entries`' order.
fn sparse(name: &str, entries: &[(usize, usize, f32)]) -> Result<[Out; 3]> {
    let index = |i: usize| u32::try_from(i).map_err(|_| anyhow!("{name}: index {i} does not fit u32"));
    let rows = entries.iter().map(|e| index(e.0)).collect::<Result<Vec<_>>>()?;
    let cols = entries.iter().map(|e| index(e.1)).collect::<Result<Vec<_>>>()?;
    let values: Vec<f32> = entries.iter().map(|e| e.2).collect();
    Ok([
        u32s(format!("{name}.rows"), &rows),
        u32s(format!("{name}.cols"), &cols),
        f32s(format!("{name}.values"), vec![values.len()], &values),
    ])
}

/// A layer's gate, up and down entries (unit, channel, weight), down as (channel, unit, weight).
fn layer_entries(l: &Layer) -> [Vec<(usize, usize, f32)>; 3] {
    let mut out: [Vec<(usize, usize, f32)>; 3] = Default::default();
    for (u, unit) in l.units.iter().enumerate() {
        out[0].extend(unit.gate.iter().map(|&(c, v)| (u, c, v)));
        out[1].extend(unit.up.iter().map(|&(c, v)| (u, c, v)));
        out[2].extend(unit.down.iter().map(|&(c, v)| (c, u, v)));
    }
    out
}

/// Rows of (channel, value) as entries (row, channel, value).
fn row_entries(rows: &[Vec<(usize, f32)>]) -> Vec<(usize, usize, f32)> {
    rows.iter().enumerate().flat_map(|(r, row)| row.iter().map(move |&(c, v)| (r, c, v))).collect()
}

fn text_name(layer: usize, role: &str) -> String {
    format!("text.layers.{layer}.{role}")
}

/// Writes the spliced model: `model` (the text's tensors, shape `c`) with `splice` in it.
pub fn write(
    dir: &Path,
    c: Config,
    model: &FloatModel,
    splice: &Splice,
    norms: &StreamNorms,
    architecture: &str,
) -> Result<u64> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (w, v) = (splice.width, &splice.vocab);
    let mut layers: Vec<LayerEntry> = splice
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let (units, nonzero) = l.size();
            let (kind, dense_shapes, deltanet) = match l {
                Compiled::SwiGlu(_) => ("compiled_swiglu", Some([[units, w], [units, w], [w, units]]), None),
                Compiled::DeltaNet(d) => {
                    let shape = DeltaNetShape { heads: d.heads, d_k: d.d_k, d_v: d.d_v, eps: d.eps };
                    ("compiled_gated_deltanet", None, Some(shape))
                }
            };
            LayerEntry {
                kind: kind.into(),
                name: format!("machine.{i}"),
                units: Some(units),
                nonzero: Some(nonzero),
                dense_shapes,
                deltanet,
            }
        })
        .collect();
    layers.extend((0..c.layers).map(|i| LayerEntry {
        kind: "text_decoder".into(),
        name: format!("text.layers.{i}"),
        units: None,
        nonzero: None,
        dense_shapes: None,
        deltanet: None,
    }));
    let field = |f: &Field| [f.channel, f.size as usize];
    let config = CheckpointConfig {
        format: FORMAT.into(),
        version: VERSION,
        text: TextShape { architecture: architecture.into(), tied_head: model.lm_head.is_none(), config: c },
        width: w,
        bias_channel: splice.bias,
        flag_channel: splice.flag,
        flag_value: splice.flag_value,
        eps: norms.eps,
        layers,
        vocabulary: VocabEntry {
            text: c.vocab,
            machine: v.len(),
            val_tokens: v.vals(),
            record_tokens: v.len() - v.vals(),
            kind_channel: v.kind,
            val_fields: [field(&v.val[0]), field(&v.val[1])],
            record_fields: [field(&v.record[0]), field(&v.record[1]), field(&v.record[2])],
        },
        machine_embedding_shape: [v.len(), w],
        machine_head_shape: [v.len(), w],
        slot_channel: splice.slot,
        slots: splice.slots,
        step_record_channel: splice.step_record,
        register_file: splice.registers,
        exec: splice.exec,
        results_first: splice.results.first,
        pc_first: splice.pcs.first,
        next_record_first: splice.next.first,
    };
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let mut t: Vec<Out> = vec![
        f32s("text.embed", vec![c.vocab, c.hidden], &model.embed),
        f32s("text.final_norm", vec![c.hidden], &model.final_norm),
    ];
    if let Some(head) = &model.lm_head {
        t.push(f32s("text.lm_head", vec![c.vocab, c.hidden], head));
    }
    for (i, l) in model.layers.iter().enumerate() {
        for (role, shape, values) in l.tensors(&c) {
            t.push(f32s(text_name(i, role.names().0), shape, values));
        }
        t.push(f32s(format!("norm.{i}.input"), vec![w], &norms.input[i]));
        t.push(f32s(format!("norm.{i}.post"), vec![w], &norms.post[i]));
    }
    t.push(f32s("norm.final", vec![w], &norms.last));
    t.push(f32s("norm.machine", vec![w], &norms.machine));
    for (i, l) in splice.layers.iter().enumerate() {
        match l {
            Compiled::SwiGlu(l) => {
                for (part, entries) in ["gate", "up", "down"].iter().zip(layer_entries(l)) {
                    t.extend(sparse(&format!("machine.{i}.{part}"), &entries)?);
                }
            }
            Compiled::DeltaNet(d) => {
                for (part, m) in d.matrices() {
                    t.extend(sparse(&format!("machine.{i}.{part}"), &m.triplets().collect::<Vec<_>>())?);
                }
                for (part, v, shape) in deltanet_vectors(d) {
                    t.push(f32s(format!("machine.{i}.{part}"), shape, v));
                }
            }
        }
    }
    t.extend(sparse("machine.embed", &row_entries(&splice.embed))?);
    t.extend(sparse("machine.head", &row_entries(&splice.head))?);
    let views = t
        .iter()
        .map(|o| TensorView::new(o.dtype, o.shape.clone(), &o.data).map(|v| (o.name.clone(), v)))
        .collect::<Result<Vec<_>, _>>()?;
    let path = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(std::fs::metadata(&path)?.len())
}

/// A checkpoint read back: the text model, the machine in it, and the stream's norms.
pub struct Loaded {
    pub config: Config,
    pub model: FloatModel,
    pub splice: Splice,
    pub norms: StreamNorms,
    pub file: CheckpointConfig,
}

/// The safetensors file's tensors, read with their names in every error.
struct Tensors<'a>(SafeTensors<'a>);

impl Tensors<'_> {
    fn view(&self, name: &str, dtype: Dtype) -> Result<TensorView<'_>> {
        let t = self.0.tensor(name).map_err(|_| anyhow!("tensor {name} is missing"))?;
        ensure!(t.dtype() == dtype, "tensor {name} is {:?}, expected {dtype:?}", t.dtype());
        Ok(t)
    }

    /// An F32 tensor of `shape` (the checkpoint stores no other float type, so its values are the
    /// model's exactly), decoded by the HF reader's `to_f32`.
    fn f32s(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        Ok(to_f32(name, &self.view(name, Dtype::F32)?, shape)?)
    }

    fn u32s(&self, name: &str) -> Result<Vec<u32>> {
        let t = self.view(name, Dtype::U32)?;
        ensure!(t.shape().len() == 1, "tensor {name} has shape {:?}, expected one dimension", t.shape());
        Ok(t.data().chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// A sparse matrix's entries, each index checked against its dense shape.
    fn sparse(&self, name: &str, dense: [usize; 2]) -> Result<Vec<(usize, usize, f32)>> {
        let (rows, cols) = (self.u32s(&format!("{name}.rows"))?, self.u32s(&format!("{name}.cols"))?);
        let values = self.f32s(&format!("{name}.values"), &[rows.len()])?;
        ensure!(cols.len() == rows.len(), "{name}: {} rows but {} columns", rows.len(), cols.len());
        rows.iter()
            .zip(&cols)
            .zip(values)
            .enumerate()
            .map(|(i, ((&r, &c), v))| {
                let (r, c) = (r as usize, c as usize);
                ensure!(
                    r < dense[0] && c < dense[1],
                    "{name}: entry {i} at ({r}, {c}) lies outside the dense shape {dense:?}"
                );
                Ok((r, c, v))
            })
            .collect()
    }

    /// Sparse rows grouped by row (`n` rows), entries in file order.
    fn rows(&self, name: &str, n: usize, width: usize) -> Result<Vec<Vec<(usize, f32)>>> {
        let mut rows = vec![Vec::new(); n];
        for (r, c, v) in self.sparse(name, [n, width])? {
            rows[r].push((c, v));
        }
        Ok(rows)
    }
}

/// Reads and checks `dir`'s config.json and model.safetensors.
pub fn load(dir: &Path) -> Result<Loaded> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let file: CheckpointConfig = serde_json::from_str(&text).with_context(|| {
        format!("{} is not a spliced checkpoint's config (`qwengpu splice -o` writes one)", path.display())
    })?;
    ensure!(
        file.format == FORMAT && file.version == VERSION,
        "{}: format {:?} version {}, expected {FORMAT:?} version {VERSION}",
        path.display(),
        file.format,
        file.version
    );
    let (s, c) = (&file.text, file.text.config);
    c.check().map_err(|e| anyhow!("{}: the text model's shape: {e}", path.display()))?;
    let w = file.width;
    ensure!(w > c.hidden && w <= 1 << 20, "{}: a stream of {w} channels for a text of {}", path.display(), c.hidden);
    let st_path = dir.join("model.safetensors");
    let bytes = std::fs::read(&st_path).with_context(|| format!("reading {}", st_path.display()))?;
    let t = Tensors(
        SafeTensors::deserialize(&bytes).with_context(|| format!("{} is not a safetensors file", st_path.display()))?,
    );
    let load = || -> Result<Loaded> {
        let mut model = FloatModel {
            embed: t.f32s("text.embed", &[c.vocab, c.hidden])?,
            final_norm: t.f32s("text.final_norm", &[c.hidden])?,
            lm_head: None,
            layers: Vec::new(),
        };
        if !s.tied_head {
            model.lm_head = Some(t.f32s("text.lm_head", &[c.vocab, c.hidden])?);
        }
        let mut norms = StreamNorms {
            input: Vec::new(),
            post: Vec::new(),
            last: t.f32s("norm.final", &[w])?,
            machine: t.f32s("norm.machine", &[w])?,
            eps: file.eps,
        };
        for i in 0..c.layers {
            model.layers.push(FloatLayer::read(&c, |role, shape| t.f32s(&text_name(i, role.names().0), shape))?);
            norms.input.push(t.f32s(&format!("norm.{i}.input"), &[w])?);
            norms.post.push(t.f32s(&format!("norm.{i}.post"), &[w])?);
        }
        let compiled = file.layers.iter().take_while(|l| l.kind.starts_with("compiled_")).count();
        let text_layers = file.layers[compiled..].iter().filter(|l| l.kind == "text_decoder").count();
        ensure!(
            compiled + text_layers == file.layers.len() && text_layers == c.layers,
            "the layer list must be the compiled layers, then the text's {} decoder layers, in that order",
            c.layers
        );
        let mut layers = Vec::new();
        for (i, entry) in file.layers[..compiled].iter().enumerate() {
            if entry.kind == "compiled_gated_deltanet" {
                let shape =
                    entry.deltanet.ok_or_else(|| anyhow!("compiled layer {i}: a DeltaNet without its shape"))?;
                layers.push(Compiled::DeltaNet(Box::new(read_deltanet(&t, i, w, shape)?)));
                continue;
            }
            ensure!(entry.kind == "compiled_swiglu", "compiled layer {i}: unknown kind {:?}", entry.kind);
            let units = entry.units.ok_or_else(|| anyhow!("compiled layer {i} does not give its units"))?;
            ensure!(units <= 1 << 24, "compiled layer {i}: {units} units");
            let mut l = Layer { units: vec![Unit::default(); units] };
            for (r, ch, v) in t.sparse(&format!("machine.{i}.gate"), [units, w])? {
                l.units[r].gate.push((ch, v));
            }
            for (r, ch, v) in t.sparse(&format!("machine.{i}.up"), [units, w])? {
                l.units[r].up.push((ch, v));
            }
            for (ch, r, v) in t.sparse(&format!("machine.{i}.down"), [w, units])? {
                l.units[r].down.push((ch, v));
            }
            layers.push(Compiled::SwiGlu(l));
        }
        let v = &file.vocabulary;
        let field = |[channel, size]: [usize; 2]| -> Result<Field> {
            ensure!(
                channel < w && (1..=256).contains(&size),
                "a vocabulary field at channel {channel} with {size} values"
            );
            Ok(Field { channel, size: size as u32 })
        };
        let vocab = Vocab {
            bias: file.bias_channel,
            kind: v.kind_channel,
            val: [field(v.val_fields[0])?, field(v.val_fields[1])?],
            record: [field(v.record_fields[0])?, field(v.record_fields[1])?, field(v.record_fields[2])?],
        };
        ensure!(vocab.vals() == v.val_tokens && vocab.len() == v.machine && v.machine == v.val_tokens + v.record_tokens && v.text == c.vocab,
            "the vocabulary does not add up: {} text + {} machine ({} VAL + {} record) tokens for fields giving {} + {}", v.text, v.machine, v.val_tokens, v.record_tokens, vocab.vals(), vocab.len() - vocab.vals());
        let results = Results { registers: file.register_file, stores: file.exec.stores(), first: file.results_first };
        let pcs = PcRows { registers: file.register_file, start: results.start(), first: file.pc_first };
        let record = vocab.record.map(|f| f.channel);
        let splice = Splice {
            text: c,
            width: w,
            bias: file.bias_channel,
            flag: file.flag_channel,
            flag_value: file.flag_value,
            embed: t.rows("machine.embed", vocab.len(), w)?,
            head: t.rows("machine.head", vocab.len(), w)?,
            vocab,
            layers,
            slot: file.slot_channel,
            slots: file.slots,
            step_record: file.step_record_channel,
            registers: file.register_file,
            exec: file.exec,
            pcs,
            next: NextRecord { pcs, next: results.next(), fields: record, first: file.next_record_first },
            results,
        };
        splice.check()?;
        Ok(Loaded { config: c, model, splice, norms, file: file.clone() })
    };
    load().with_context(|| format!("loading the spliced checkpoint {}", dir.display()))
}

/// The tokenizer a checkpoint directory carries, with its chat template where
/// `tokenizer_config.json` gives one.
pub fn tokenizer(dir: &Path) -> Result<TextTokenizer> {
    let path = dir.join("tokenizer.json");
    let t =
        TextTokenizer::from_file(&path).with_context(|| format!("the checkpoint's tokenizer ({})", path.display()))?;
    let config = dir.join("tokenizer_config.json");
    let Ok(text) = std::fs::read_to_string(&config) else { return Ok(t) };
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}", config.display()))?;
    Ok(match v.get("chat_template").and_then(serde_json::Value::as_str) {
        Some(template) => t.with_chat_template(template),
        None => t,
    })
}

#[derive(clap::Args)]
pub struct Args {
    /// The text model (GGUF or a Hugging Face directory). Default: $SUBSTRATES_SMOLLM2_GGUF, else
    /// the SmolLM2-135M-Instruct file `cargo xtask` fetches.
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// The directory to write config.json, model.safetensors, tokenizer.json and
    /// tokenizer_config.json into.
    #[arg(short, long)]
    pub out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let path = super::drift::model_path(a.model)?;
    let loaded = models::load(&path, None).with_context(|| format!("loading {}", path.display()))?;
    let splice = Splice::new(loaded.config)?;
    let norms = splice.norms(&loaded.float);
    let bytes = write(&a.out, loaded.config, &loaded.float, &splice, &norms, &loaded.format)?;
    if let Some(t) = &loaded.tokenizer {
        t.save(&a.out.join("tokenizer.json"))?;
        // The chat template travels as Hugging Face keeps it, beside the tokenizer.
        let config = serde_json::json!({ "chat_template": t.chat_template });
        let path = a.out.join("tokenizer_config.json");
        std::fs::write(&path, config.to_string()).with_context(|| format!("writing {}", path.display()))?;
    }
    let s = splice.sizes();
    println!("{} ({}) spliced into {}:", path.display(), loaded.format, a.out.display());
    println!("  {}", s.to_string().replace('\n', "\n  "));
    println!("  model.safetensors {:.1} MB", bytes as f64 / 1e6);
    Ok(())
}
