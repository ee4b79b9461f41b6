//! An independent check of a written checkpoint (issue #22): a dense forward pass over
//! `model.safetensors` and `config.json`, with candle's tensor ops, written apart from the
//! sparse executor (`kernels_wasm::qwengpu::splice::Runner`). Every compiled matrix is made
//! dense from its coordinates, one layer at a time (all of them at once would be 2.2·10⁹
//! weights), and the layers run over every position of a context at once, as a prompt is
//! processed: each layer's outputs at all positions are the next layer's inputs.
//!
//! The context is the sparse executor's own run of three suite kernels, one after another with
//! text between them, in the tiny llama spliced and written as a checkpoint. At every position
//! where the sparse run's next token was the model's choice (every VAL token), the dense pass's
//! argmax over the whole vocabulary must be that token. By induction the dense model, decoding
//! greedily, produces the same tokens.

use candle_core::{DType, Device, IndexOp, Tensor, D};
use kernels_wasm::qwen3::model::Model;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::splice::launch::launch;
use kernels_wasm::qwengpu::splice::{Runner, Splice, TINY_TEXT};
use kernels_wasm::qwengpu::suite;
use native_host::qwengpu::checkpoint;
use serde_json::Value;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The checkpoint as plain tensors and its config's numbers.
struct File {
    t: HashMap<String, Tensor>,
    cfg: Value,
}

impl File {
    fn open(dir: &Path) -> Result<File> {
        let cfg: Value = serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
        let t = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu)?;
        Ok(File { t, cfg })
    }

    fn get(&self, name: &str) -> Result<&Tensor> {
        self.t.get(name).ok_or_else(|| format!("no tensor {name}").into())
    }

    fn n(&self, path: &[&str]) -> usize {
        path.iter().fold(&self.cfg, |v, k| &v[*k]).as_u64().unwrap_or_else(|| panic!("config {path:?}")) as usize
    }

    fn f(&self, path: &[&str]) -> f64 {
        path.iter().fold(&self.cfg, |v, k| &v[*k]).as_f64().unwrap_or_else(|| panic!("config {path:?}"))
    }

    /// `{name}.rows/.cols/.values`, a `rows × cols` matrix, made dense and transposed
    /// (`cols × rows`, ready to multiply rows of inputs by). A coordinate may appear more than
    /// once: its values add up, as the sparse executor's sums do.
    fn dense_t(&self, name: &str, rows: usize, cols: usize) -> Result<Tensor> {
        let r = self.get(&format!("{name}.rows"))?.to_vec1::<u32>()?;
        let c = self.get(&format!("{name}.cols"))?.to_vec1::<u32>()?;
        let v = self.get(&format!("{name}.values"))?.to_vec1::<f32>()?;
        let mut m = vec![0f32; rows * cols];
        for ((&r, &c), &v) in r.iter().zip(&c).zip(&v) {
            m[c as usize * rows + r as usize] += v;
        }
        Ok(Tensor::from_vec(m, (cols, rows), &Device::Cpu)?)
    }
}

/// `x · W^T` for rows `x` (`n × in`) and a row-major `out × in` matrix.
fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(x.matmul(&w.t()?.contiguous()?)?)
}

/// A compiled matrix applied to rows `x`: `x · W^T`, with `W^T` as [`File::dense_t`] gives it.
fn compiled(x: &Tensor, f: &File, name: &str, rows: usize, cols: usize) -> Result<Tensor> {
    Ok(x.matmul(&f.dense_t(name, rows, cols)?)?)
}

/// The machine's norm (§2): `x / √(mean(x²) + ε) · w`.
fn norm_divided(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let rms = (x.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?;
    Ok(x.broadcast_div(&rms)?.broadcast_mul(w)?)
}

/// The text model's RMSNorm: `x · (1/√(mean(x²) + ε)) · w`.
fn norm_scaled(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let inv = (x.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?.recip()?;
    Ok(x.broadcast_mul(&inv)?.broadcast_mul(w)?)
}

/// `ln(1 + eˣ)`, and x itself above 20 (PyTorch's threshold).
fn softplus(x: &Tensor) -> Result<Tensor> {
    let soft = (x.exp()? + 1.0)?.log()?;
    Ok(x.gt(20.0)?.where_cond(x, &soft)?)
}

/// Each head's `dk` entries of `x` (`n × heads·dk`) scaled to unit length (`+1e-6` under the
/// root), then by `scale`.
fn l2_heads(x: &Tensor, heads: usize, dk: usize, scale: f64) -> Result<Tensor> {
    let x = x.reshape((x.dim(0)?, heads, dk))?;
    let inv = (x.sqr()?.sum_keepdim(D::Minus1)? + 1e-6)?.sqrt()?.recip()?;
    Ok((x.broadcast_mul(&inv)? * scale)?)
}

/// Depthwise causal convolution of the rows of `x` (positions × channels), oldest tap first:
/// tap j reads the input `taps − 1 − j` positions back, zero before the first row.
fn causal_conv(x: &Tensor, taps: &Tensor) -> Result<Tensor> {
    let (len, channels) = x.dims2()?;
    let width_taps = taps.dim(1)?;
    let mut conv = Tensor::zeros((len, channels), DType::F32, &Device::Cpu)?;
    for j in 0..width_taps {
        let back = (width_taps - 1 - j).min(len);
        let shifted = if back == 0 {
            x.clone()
        } else {
            let pad = Tensor::zeros((back, channels), DType::F32, &Device::Cpu)?;
            Tensor::cat(&[&pad, &x.narrow(0, 0, len - back)?], 0)?
        };
        conv = (conv + shifted.broadcast_mul(&taps.i((.., j))?.unsqueeze(0)?)?)?;
    }
    Ok(conv)
}

/// Positions whose q, k and v are held at once in a DeltaNet: a memory head's keys are wide
/// (q, k and v of the whole context at once took 12 GB).
const CHUNK: usize = 256;

/// A compiled Gated DeltaNet over every position: the projections as dense products, the
/// causal convolution as shifted copies, the delta rule position by position on every row of
/// each head's state. q, k and v are made `CHUNK` positions at a time, each chunk's
/// convolution reading the inputs of the positions before it.
fn deltanet(f: &File, i: usize, shape: &Value, n: &Tensor, width: usize) -> Result<Tensor> {
    let get = |k: &str| shape[k].as_u64().map(|v| v as usize).ok_or(format!("deltanet {k}"));
    let (heads, dk, dv) = (get("heads")?, get("d_k")?, get("d_v")?);
    let eps = shape["eps"].as_f64().ok_or("deltanet eps")?;
    let (len, channels) = (n.dim(0)?, heads * (2 * dk + dv));
    let name = |p: &str| format!("machine.{i}.{p}");
    let w_qkv = f.dense_t(&name("w_qkv"), channels, width)?;
    let taps = f.get(&name("conv"))?;
    let z = candle_nn::ops::silu(&compiled(n, f, &name("w_z"), heads * dv, width)?)?.reshape((len, heads, dv))?;
    let beta = candle_nn::ops::sigmoid(&compiled(n, f, &name("w_b"), heads, width)?)?;
    let a = compiled(n, f, &name("w_a"), heads, width)?;
    let decay = f.get(&name("a_log"))?.exp()?.unsqueeze(0)?;
    let a = softplus(&a.broadcast_add(&f.get(&name("dt_bias"))?.unsqueeze(0)?)?)?;
    let alpha = decay.broadcast_mul(&a)?.neg()?.exp()?;
    // S per head (dk × dv): S ← α·S; δ = β·(v − Sᵀk); S ← S + k ⊗ δ; o = Sᵀq.
    let mut s = Tensor::zeros((heads, dk, dv), DType::F32, &Device::Cpu)?;
    let mut outs = Vec::with_capacity(len);
    for start in (0..len).step_by(CHUNK) {
        let (from, end) = (start.saturating_sub(taps.dim(1)? - 1), (start + CHUNK).min(len));
        let conv = causal_conv(&n.narrow(0, from, end - from)?.matmul(&w_qkv)?, taps)?;
        let conv = candle_nn::ops::silu(&conv.narrow(0, start - from, end - start)?)?;
        let q = l2_heads(&conv.narrow(1, 0, heads * dk)?, heads, dk, 1.0 / (dk as f64).sqrt())?;
        let k = l2_heads(&conv.narrow(1, heads * dk, heads * dk)?, heads, dk, 1.0)?;
        let v = conv.narrow(1, 2 * heads * dk, heads * dv)?.reshape((end - start, heads, dv))?;
        for t in start..end {
            let at = t - start;
            let (qt, kt, vt) = (q.i(at)?.unsqueeze(1)?, k.i(at)?.unsqueeze(1)?, v.i(at)?.unsqueeze(1)?);
            s = s.broadcast_mul(&alpha.i(t)?.reshape((heads, 1, 1))?)?;
            let kv = kt.matmul(&s)?;
            let delta = (vt - kv)?.broadcast_mul(&beta.i(t)?.reshape((heads, 1, 1))?)?;
            s = (s + kt.transpose(1, 2)?.matmul(&delta)?)?;
            outs.push(qt.matmul(&s)?.squeeze(1)?);
        }
    }
    let o = Tensor::stack(&outs, 0)?;
    // RMSNormGated: o · 1/√(mean(o²) + ε) · w · silu(z), per head.
    let inv = (o.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?.recip()?;
    let norm = f.get(&name("norm"))?.reshape((1, 1, dv))?;
    let out = o.broadcast_mul(&inv)?.broadcast_mul(&norm)?.mul(&z)?.reshape((len, heads * dv))?;
    compiled(&out, f, &name("w_out"), width, heads * dv)
}

/// Rotate-half RoPE of each head of `x` (`n × heads·hd`) at the given positions.
fn rope(x: &Tensor, positions: &[usize], hd: usize, theta: f64) -> Result<Tensor> {
    let mut v = x.to_vec2::<f32>()?;
    for (row, &pos) in v.iter_mut().zip(positions) {
        for head in row.chunks_exact_mut(hd) {
            for i in 0..hd / 2 {
                let angle = pos as f64 * theta.powf(-(2.0 * i as f64) / hd as f64);
                let (c, s) = (angle.cos() as f32, angle.sin() as f32);
                let (a, b) = (head[i], head[i + hd / 2]);
                (head[i], head[i + hd / 2]) = (a * c - b * s, b * c + a * s);
            }
        }
    }
    Ok(Tensor::new(v, &Device::Cpu)?)
}

/// Adds `y` (`n × h`) to the first `h` channels of `x`.
fn add_text(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let (h, w) = (y.dim(1)?, x.dim(1)?);
    let pad = Tensor::zeros((y.dim(0)?, w - h), DType::F32, &Device::Cpu)?;
    Ok((x + Tensor::cat(&[y, &pad], 1)?)?)
}

/// The dense model's logits at `at` (positions of `ids`), the whole vocabulary each.
fn dense_logits(f: &File, ids: &[usize], at: &[usize]) -> Result<Vec<Vec<f32>>> {
    let dev = Device::Cpu;
    let (h, width, text_vocab) = (f.n(&["text", "hidden"]), f.n(&["width"]), f.n(&["vocabulary", "text"]));
    let machine_vocab = f.n(&["vocabulary", "machine"]);
    let eps = f.f(&["eps"]);
    let (flag, flag_value) = (f.n(&["flag_channel"]), f.f(&["flag_value"]) as f32);
    // Embedding: a text token's row in the text channels and the text flag; a machine token's
    // row as the file's coordinates give it.
    let embed = f.get("text.embed")?.to_vec2::<f32>()?;
    let (mr, mc, mv) = (
        f.get("machine.embed.rows")?.to_vec1::<u32>()?,
        f.get("machine.embed.cols")?.to_vec1::<u32>()?,
        f.get("machine.embed.values")?.to_vec1::<f32>()?,
    );
    let mut machine_rows: HashMap<usize, Vec<(usize, f32)>> = HashMap::new();
    for ((&r, &c), &v) in mr.iter().zip(&mc).zip(&mv) {
        machine_rows.entry(r as usize).or_default().push((c as usize, v));
    }
    let mut x = vec![0f32; ids.len() * width];
    for (row, &id) in x.chunks_exact_mut(width).zip(ids) {
        if id < text_vocab {
            row[..h].copy_from_slice(&embed[id]);
            row[flag] = flag_value;
        } else {
            for &(c, v) in machine_rows.get(&(id - text_vocab)).ok_or("a machine token without a row")? {
                row[c] = v;
            }
        }
    }
    let mut x = Tensor::from_vec(x, (ids.len(), width), &dev)?;
    let machine_norm = f.get("norm.machine")?;
    for (i, layer) in f.cfg["layers"].as_array().ok_or("no layers")?.iter().enumerate() {
        match layer["kind"].as_str() {
            Some("compiled_swiglu") => {
                let units = layer["units"].as_u64().ok_or("units")? as usize;
                let n = norm_divided(&x, machine_norm, eps)?;
                let gate = compiled(&n, f, &format!("machine.{i}.gate"), units, width)?;
                let up = compiled(&n, f, &format!("machine.{i}.up"), units, width)?;
                let hidden = (candle_nn::ops::silu(&gate)? * up)?;
                x = (x + compiled(&hidden, f, &format!("machine.{i}.down"), width, units)?)?;
            }
            Some("compiled_gated_deltanet") => {
                let n = norm_divided(&x, machine_norm, eps)?;
                x = (&x + deltanet(f, i, &layer["deltanet"], &n, width)?)?;
            }
            _ => break,
        }
    }
    // The text's decoder layers on the text channels. A text position attends to the text
    // positions up to it, a machine position to every position up to it; only text tokens take
    // RoPE positions (a machine token sits where the next text token will).
    let text: Vec<bool> = ids.iter().map(|&id| id < text_vocab).collect();
    let positions: Vec<usize> = text
        .iter()
        .scan(0, |seen, &t| {
            let p = *seen;
            *seen += usize::from(t);
            Some(p)
        })
        .collect();
    let mask: Vec<f32> = (0..ids.len())
        .flat_map(|q| {
            let text = &text;
            (0..ids.len()).map(move |k| if k <= q && (!text[q] || text[k]) { 0.0 } else { f32::NEG_INFINITY })
        })
        .collect();
    let mask = Tensor::from_vec(mask, (ids.len(), ids.len()), &dev)?;
    let (heads, kv_heads, hd) = (f.n(&["text", "heads"]), f.n(&["text", "kv_heads"]), f.n(&["text", "head_dim"]));
    let theta = f.f(&["text", "rope_theta"]);
    for i in 0..f.n(&["text", "layers"]) {
        let w = |role: &str| f.get(&format!("text.layers.{i}.{role}"));
        let n = norm_scaled(&x, f.get(&format!("norm.{i}.input"))?, eps)?.narrow(1, 0, h)?;
        let q = rope(&linear(&n, w("self_attn.q_proj")?)?, &positions, hd, theta)?;
        let k = rope(&linear(&n, w("self_attn.k_proj")?)?, &positions, hd, theta)?;
        let v = linear(&n, w("self_attn.v_proj")?)?;
        let mut outs = Vec::new();
        for head in 0..heads {
            let kv = head / (heads / kv_heads);
            let (qh, kh, vh) = (q.narrow(1, head * hd, hd)?, k.narrow(1, kv * hd, hd)?, v.narrow(1, kv * hd, hd)?);
            let scores = (qh.matmul(&kh.t()?)? / (hd as f64).sqrt())?.broadcast_add(&mask)?;
            let p = candle_nn::ops::softmax_last_dim(&scores)?;
            outs.push(p.matmul(&vh.contiguous()?)?);
        }
        let attn = Tensor::cat(&outs, 1)?;
        x = add_text(&x, &linear(&attn, w("self_attn.o_proj")?)?)?;
        let n = norm_scaled(&x, f.get(&format!("norm.{i}.post"))?, eps)?.narrow(1, 0, h)?;
        let act = (candle_nn::ops::silu(&linear(&n, w("mlp.gate_proj")?)?)? * linear(&n, w("mlp.up_proj")?)?)?;
        x = add_text(&x, &linear(&act, w("mlp.down_proj")?)?)?;
    }
    // Both heads after the final norm, at the positions asked for.
    let at_t = Tensor::new(at.iter().map(|&a| a as u32).collect::<Vec<_>>(), &dev)?;
    let n = norm_scaled(&x.index_select(&at_t, 0)?, f.get("norm.final")?, eps)?;
    let lm_head =
        if f.cfg["text"]["tied_head"].as_bool() == Some(true) { f.get("text.embed")? } else { f.get("text.lm_head")? };
    let text_logits = linear(&n.narrow(1, 0, h)?, lm_head)?;
    let machine_logits = compiled(&n, f, "machine.head", machine_vocab, width)?;
    Ok(Tensor::cat(&[text_logits, machine_logits], 1)?.to_vec2::<f32>()?)
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &x)| if x > best.1 { (i, x) } else { best }).0
}

#[test]
fn a_dense_forward_pass_over_the_checkpoint_picks_the_sparse_runs_tokens() -> Result<()> {
    // The tiny llama spliced and written as a checkpoint, then read back by the sparse loader.
    let dir = tempfile::tempdir()?;
    let (c, model) = (TINY_TEXT, Model::random_float(TINY_TEXT, 3));
    let splice = Splice::new(c)?;
    checkpoint::write(dir.path(), c, &model, &splice, &splice.norms(&model), "llama")?;
    let ck = checkpoint::load(dir.path())?;
    let mut runner = Runner::spliced_with(ck.config, &ck.model, &ck.splice, ck.norms.clone())?;

    // The sparse executor's run: text, then each kernel's launch, its VAL tokens chosen by the
    // model's argmax.
    let spec = MachineSpec::second();
    let mut ids: Vec<(usize, bool)> = Vec::new();
    let names = ["warp_broadcast", "reverse", "bitonic_step"];
    for (j, name) in names.iter().enumerate() {
        let text = [17 + j, 300, 42, 999 - j];
        runner.forward_many(&text)?;
        ids.extend(text.iter().map(|&t| (t, false)));
        let k = suite::kernels().into_iter().find(|k| k.name == *name).ok_or("no kernel")?;
        let (kernel, p, _) = k.machine(k.ptx, &spec)?;
        let out = launch(&mut runner, &ck.splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |f| {
            ids.push((ck.splice.token_id(f.token), f.chosen));
            ControlFlow::Continue(())
        })?;
        assert_eq!(p.read_arrays(&out.global), k.expected(&p), "{name}");
    }
    let chosen: Vec<usize> = (1..ids.len()).filter(|&t| ids[t].1).map(|t| t - 1).collect();
    assert!(chosen.len() > 100 * names.len(), "{} chosen tokens", chosen.len());

    let file = File::open(dir.path())?;
    let tokens: Vec<usize> = ids.iter().map(|&(id, _)| id).collect();
    let logits = dense_logits(&file, &tokens, &chosen)?;
    let vocab = file.n(&["vocabulary", "text"]) + file.n(&["vocabulary", "machine"]);
    for (&at, l) in chosen.iter().zip(&logits) {
        assert_eq!(l.len(), vocab);
        assert_eq!(argmax(l), tokens[at + 1], "position {at} of {}", tokens.len());
    }
    eprintln!(
        "{} positions ({}), {} tokens chosen by the model: the dense pass's argmax is each of them",
        tokens.len(),
        names.join(", "),
        chosen.len()
    );
    Ok(())
}
