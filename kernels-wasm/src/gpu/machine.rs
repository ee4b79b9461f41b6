//! The second machine on the GPU as the language model it is (issue #22,
//! `docs/qwengpu-second-machine.md` §34): a token is one submission of the whole forward pass at
//! a machine position, the embedding lookup, the 81 sublayers (`gpu::deltanet`,
//! `gpu::swiglu`), the final norm, the machine head and the argmax, and the argmax's id is the
//! next position's input without leaving the GPU. The host writes the prompt's ids and reads the
//! chosen ones back 256 at a time; it never copies a vector from one position to the next.
//!
//! One WGSL module holds every step (`second.wgsl`, `deltanet.wgsl`, `swiglu.wgsl`,
//! `head.wgsl`) with one bind group layout: a layer's own parameters (a uniform), weights and
//! state, then the stream and scratch (`work`) and the token ids (`out`) that all layers share.
//! So the pipelines are built once, whatever the layers, and a layer is a bind group.
//!
//! The text's layers and head are not here: at a machine position they change no machine logit
//! (`splice::runner`'s module docs), so the GPU runs launches, not text.

use super::{groups_of_64, words_to_bytes, Binding, Gpu, GpuError, CHUNK};
use crate::protocol::qwengpu::MachineRows;
use crate::qwengpu::deltanet::State;
use crate::qwengpu::splice::{Compiled, Splice, StreamNorms};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::ControlFlow;

/// `second.wgsl`'s `Params`, word by word (the uniform is padded to 16 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Params {
    pub rows: u32,
    pub channels: u32,
    pub heads: u32,
    pub dk: u32,
    pub dv: u32,
    pub row_table: u32,
    pub out_table: u32,
    pub vec_table: u32,
    pub mid_at: u32,
    pub hot_at: u32,
    pub o_at: u32,
    pub g_at: u32,
    pub units: u32,
    pub unit_table: u32,
    pub chan_table: u32,
    pub h_at: u32,
    pub norm_at: u32,
    pub eps_at: u32,
    pub embed_table: u32,
    pub embed_rows: u32,
    pub head_table: u32,
    pub head_rows: u32,
    pub logits_at: u32,
    pub end_id: u32,
    pub layer: u32,
}

impl Params {
    fn words(&self) -> [u32; 28] {
        let p = self;
        [
            p.rows,
            p.channels,
            p.heads,
            p.dk,
            p.dv,
            p.row_table,
            p.out_table,
            p.vec_table,
            p.mid_at,
            p.hot_at,
            p.o_at,
            p.g_at,
            p.units,
            p.unit_table,
            p.chan_table,
            p.h_at,
            p.norm_at,
            p.eps_at,
            p.embed_table,
            p.embed_rows,
            p.head_table,
            p.head_rows,
            p.logits_at,
            p.end_id,
            p.layer,
            0,
            0,
            0,
        ]
    }
}

/// `work`'s scratch begins after x, n and y.
pub(super) fn scratch_at(d: usize) -> usize {
    3 * d
}

// `out`'s layout and the outcome codes are defined here once: `header` writes them into the
// shaders' text as WGSL constants, so host and shader cannot disagree on a word.

/// `out`'s words after the outcome: the position being run, the next one, the first one the
/// model chooses, the positions there is room for; the token ids begin at `IDS`.
const CUR: usize = 5;
const NEXT: usize = 6;
const FEED: usize = 7;
const CAPACITY: usize = 8;
const IDS: usize = 12;
/// The outcome code after the end token ran: not an error, but nothing runs after it.
const HALTED: u32 = 100;

const ERR_TOKEN: u32 = 7;
const ERR_TEXT: u32 = 8;
const ERR_FULL: u32 = 9;
const ERR_PRE_NORM: u32 = 11;

/// The error codes the shaders `fail` with: the WGSL name, the code, the step that could not be
/// exact and what the outcome's `at` counts (empty where [`outcome`] words the error itself).
const CODES: [(&str, u32, &str, &str); 12] = [
    ("ERR_SILU", 1, "the DeltaNet's SiLU", "head"),
    ("ERR_BETA", 2, "the DeltaNet's β = sigmoid(b)", "head"),
    ("ERR_SOFTPLUS", 3, "the DeltaNet's softplus(a + dt_bias)", "head"),
    ("ERR_A_LOG", 4, "the DeltaNet's exp(a_log)", "head"),
    ("ERR_GATE", 5, "the DeltaNet's α = exp(g)", "head"),
    ("ERR_NORM", 6, "the DeltaNet's norm", "head"),
    ("ERR_TOKEN", ERR_TOKEN, "", ""),
    ("ERR_TEXT", ERR_TEXT, "", ""),
    ("ERR_FULL", ERR_FULL, "", ""),
    ("ERR_UNIT_SILU", 10, "a SwiGLU gate's SiLU", "unit"),
    ("ERR_PRE_NORM", ERR_PRE_NORM, "the norm", "channel"),
    ("ERR_FINAL_NORM", 12, "the final norm's sum of squares", "stream"),
];

/// The WGSL constants the shaders take from the host: the stream's width `d`, `out`'s layout
/// and the outcome codes.
fn header(d: usize) -> String {
    let layout = [("CUR", CUR), ("NEXT", NEXT), ("FEED", FEED), ("CAPACITY", CAPACITY), ("IDS", IDS)];
    let words = [("D", d as u32), ("HALTED", HALTED)].into_iter().chain(layout.map(|(n, v)| (n, v as u32)));
    words.chain(CODES.map(|(n, code, ..)| (n, code))).map(|(n, v)| alloc::format!("const {n}: u32 = {v}u;\n")).collect()
}

/// A layer's dispatch, by its entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Norm,
    Project,
    Heads,
    Output,
    Units,
    Down,
}

/// The second machine's pipelines for a stream of `d` channels.
pub(super) struct Shaders {
    pub norm: wgpu::ComputePipeline,
    pub project: wgpu::ComputePipeline,
    pub heads: wgpu::ComputePipeline,
    pub output: wgpu::ComputePipeline,
    pub units: wgpu::ComputePipeline,
    pub down: wgpu::ComputePipeline,
    pub embed: wgpu::ComputePipeline,
    pub final_norm: wgpu::ComputePipeline,
    pub logits: wgpu::ComputePipeline,
    pub argmax: wgpu::ComputePipeline,
}

impl Shaders {
    /// The pipelines for `d` channels, compiled on the first call for that width and shared by
    /// every machine and lone layer of `gpu` after it.
    pub fn of(gpu: &Gpu, d: usize) -> Arc<Shaders> {
        // A panic while the lock was held leaves at worst a missing entry: build it again.
        let mut built = gpu.second.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, s)) = built.iter().find(|(w, _)| *w == d) {
            return s.clone();
        }
        let s = Arc::new(Shaders::new(gpu, d));
        built.push((d, s.clone()));
        s
    }

    fn new(gpu: &Gpu, d: usize) -> Shaders {
        let source: String = [
            header(d).as_str(),
            include_str!("exact.wgsl"),
            include_str!("second.wgsl"),
            include_str!("deltanet.wgsl"),
            include_str!("swiglu.wgsl"),
            include_str!("head.wgsl"),
        ]
        .concat();
        use Binding::{Read, ReadWrite, Uniform};
        let layout = [Uniform, Read, ReadWrite, ReadWrite, ReadWrite];
        let names = ["norm", "project", "heads", "output", "units", "down", "embed", "final_norm", "logits", "argmax"];
        let [norm, project, heads, output, units, down, embed, final_norm, logits, argmax] =
            gpu.pipelines("second machine", source, &layout, names);
        Shaders { norm, project, heads, output, units, down, embed, final_norm, logits, argmax }
    }

    pub fn pipeline(&self, step: Step) -> &wgpu::ComputePipeline {
        match step {
            Step::Norm => &self.norm,
            Step::Project => &self.project,
            Step::Heads => &self.heads,
            Step::Output => &self.output,
            Step::Units => &self.units,
            Step::Down => &self.down,
        }
    }

    /// `steps` as pipelines.
    pub fn passes<const N: usize>(&self, steps: [(Step, u32); N]) -> [(&wgpu::ComputePipeline, u32); N] {
        steps.map(|(step, n)| (self.pipeline(step), n))
    }
}

/// A layer's own bindings: its parameters, weights and (a DeltaNet's) state.
pub(super) struct Own {
    pub params: wgpu::Buffer,
    pub w: wgpu::Buffer,
    pub state: wgpu::Buffer,
    /// `work` words the layer needs after [`scratch_at`].
    pub scratch: usize,
}

impl Own {
    /// Uploads `words` with `params` (and a state of `state` words, at least one).
    pub fn new(gpu: &Gpu, what: &str, params: &Params, words: &[u32], state: usize) -> Result<Own, GpuError> {
        if words.len() > u32::MAX as usize {
            let what = alloc::format!("{what}'s weights (words)");
            return Err(GpuError::TooLarge { what, need: words.len() as u64, limit: u32::MAX as u64 });
        }
        Ok(Own {
            params: gpu.uniform(&params.words()),
            w: gpu.storage(what, &words_to_bytes(words))?,
            state: gpu.read_write(what, state.max(1))?,
            scratch: 0,
        })
    }

    pub fn group(&self, gpu: &Gpu, shaders: &Shaders, work: &wgpu::Buffer, out: &wgpu::Buffer) -> wgpu::BindGroup {
        gpu.bind_group(&shaders.norm, &[&self.params, &self.w, &self.state, work, out])
    }
}

/// The error an outcome (`second.wgsl`'s `fail`) names, if any, for a stream of `d` channels:
/// `whole` adds the layer and the position (a whole machine's run; a lone layer's caller knows
/// both).
pub(super) fn outcome(words: &[u32], d: usize, whole: bool) -> Result<(), GpuError> {
    let (code, at, arg) = (words[0], words[1], f32::from_bits(words[2]));
    let (step, place) = match code {
        0 | HALTED | ERR_TEXT => return Ok(()),
        ERR_TOKEN => {
            let why = alloc::format!("token id {} at position {at} (past the embedding's rows)", words[2]);
            return Err(GpuError::Unsupported(why));
        }
        ERR_FULL => {
            let what = String::from("a run's positions");
            return Err(GpuError::TooLarge { what, need: at as u64 + 2, limit: at as u64 + 1 });
        }
        ERR_PRE_NORM if at as usize == d => ("the norm's sum of squares", "stream"),
        _ => match CODES.iter().find(|c| c.1 == code) {
            Some(&(_, _, step, place)) => (step, place),
            None => return Err(GpuError::Gpu(alloc::format!("the second machine's shader failed with code {code}"))),
        },
    };
    let mut at = match place {
        "stream" => String::from("the stream"),
        _ => alloc::format!("{place} {at}"),
    };
    if whole {
        at = alloc::format!("layer {}, position {}, {at}", words[4], words[3]);
    }
    Err(GpuError::NotExact { step: step.into(), at, arg })
}

/// A layer in a whole machine: its bind group and its dispatches.
struct Layer {
    group: wgpu::BindGroup,
    steps: Vec<(Step, u32)>,
}

/// The second machine on the GPU, at some position of one context.
pub struct GpuMachine {
    shaders: Arc<Shaders>,
    layers: Vec<Layer>,
    ends: wgpu::BindGroup,
    head_groups: u32,
    /// Every layer's DeltaNet state buffer (`None` for the SwiGLU layers), for the tests.
    states: Vec<Option<(wgpu::Buffer, usize)>>,
    out: wgpu::Buffer,
    d: usize,
    capacity: usize,
    position: usize,
    /// After an error the states are not what the CPU would hold: nothing more runs.
    broken: bool,
}

/// What a [`GpuMachine::run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ran {
    /// Positions run in the context, this run's included.
    pub positions: usize,
    /// Ids the model chose (the last one may be a text token, which ends the run).
    pub chosen: usize,
    /// Whether the end token ran.
    pub ended: bool,
}

impl GpuMachine {
    /// Uploads `splice`'s layers and ends with `norms`, for at most `capacity` positions in all.
    pub fn new(gpu: &Gpu, splice: &Splice, norms: &StreamNorms, capacity: usize) -> Result<GpuMachine, GpuError> {
        let d = splice.width;
        if norms.machine.len() != d || norms.last.len() != d {
            return Err(GpuError::Unsupported(alloc::format!(
                "norms of {} channels for a {d}-channel stream",
                norms.machine.len()
            )));
        }
        let shaders = Shaders::of(gpu, d);
        let norm = (&norms.machine[..], norms.eps);
        let (mut owns, mut scratch) = (Vec::new(), splice.head.len());
        for (i, l) in splice.layers.iter().enumerate() {
            let own = match l {
                Compiled::DeltaNet(w) => super::deltanet::upload(gpu, w, norm, i as u32)?,
                Compiled::SwiGlu(l) => super::swiglu::upload(gpu, l, norm, i as u32)?,
            };
            scratch = scratch.max(own.scratch);
            owns.push(own);
        }
        let work = gpu.read_write("the machine's stream", scratch_at(d) + scratch)?;
        let out = gpu.read_write("the machine's token ids", IDS + capacity)?;
        gpu.queue.write_buffer(&out, 4 * CAPACITY as u64, &words_to_bytes(&[capacity as u32]));
        let ends = ends(gpu, splice, norms, splice.layers.len() as u32)?;
        let s = &shaders;
        let mut layers = Vec::new();
        let mut states = Vec::new();
        for (l, own) in splice.layers.iter().zip(&owns) {
            let steps: Vec<(Step, u32)> = match l {
                Compiled::DeltaNet(w) => [(Step::Norm, 1)].into_iter().chain(super::deltanet::steps(w)).collect(),
                Compiled::SwiGlu(l) => super::swiglu::steps(l.units.len(), d).to_vec(),
            };
            states.push(match l {
                Compiled::DeltaNet(w) => Some((own.state.clone(), w.heads * w.d_k * w.d_v)),
                Compiled::SwiGlu(_) => None,
            });
            layers.push(Layer { group: own.group(gpu, s, &work, &out), steps });
        }
        let ends = ends.group(gpu, s, &work, &out);
        let head_groups = groups_of_64(splice.head.len());
        gpu.check_workgroups(layers.iter().flat_map(|l| l.steps.iter().map(|&(_, n)| n)).chain([head_groups]))?;
        Ok(GpuMachine { shaders, layers, ends, head_groups, states, out, d, capacity, position: 0, broken: false })
    }

    /// Positions run so far.
    pub fn position(&self) -> usize {
        self.position
    }

    /// Positions there is room for in all.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs the machine ids `feed` (the host's), then up to `max_new` positions more, each on the
    /// id the one before it chose, until the end token (`next_record::END`) the model chose has run. `chosen`
    /// hears each chosen id in order (`None`: a text token, which ends the run); it stops the run
    /// by answering [`ControlFlow::Break`] (the positions already submitted, up to 256, have run).
    pub async fn run(
        &mut self,
        gpu: &Gpu,
        feed: &[usize],
        max_new: usize,
        mut chosen: impl FnMut(Option<usize>) -> ControlFlow<()>,
    ) -> Result<Ran, GpuError> {
        if self.broken {
            return Err(GpuError::Gpu("an earlier error left this machine's state unknown: build a new one".into()));
        }
        let start = self.position;
        let need = start + feed.len() + max_new + 1;
        if need > self.capacity {
            let what = String::from("a run's positions");
            return Err(GpuError::TooLarge { what, need: need as u64, limit: self.capacity as u64 });
        }
        let first = start + feed.len();
        // The outcome cleared (an earlier run's end), the positions, and where the host's end.
        let mut header = [0u32; CAPACITY];
        (header[CUR], header[NEXT], header[FEED]) = (start as u32, start as u32, first as u32);
        gpu.queue.write_buffer(&self.out, 0, &words_to_bytes(&header));
        let feed: Vec<u32> = feed.iter().map(|&id| id as u32).collect();
        gpu.queue.write_buffer(&self.out, 4 * (IDS + start) as u64, &words_to_bytes(&feed));
        let (total, mut submitted) = (feed.len() + max_new, 0);
        let mut ran = Ran { positions: start, chosen: 0, ended: false };
        // The next chosen id to report: position `first`'s comes from position `first - 1`.
        let mut reported = first;
        while submitted < total {
            let n = CHUNK.min(total - submitted);
            let read = (n + 1).min(self.capacity - reported);
            let words = self.submit(gpu, n, reported, read).await?;
            submitted += n;
            let (code, next) = (words[0], words[NEXT] as usize);
            ran.positions = next;
            // Position p (from `first - 1` on) writes p + 1's id; an error or the end stops at p.
            let valid = if code == 0 { next + 1 } else { next };
            for p in reported..valid.max(reported) {
                ran.chosen += 1;
                if chosen(Some(words[IDS + p - reported] as usize)).is_break() {
                    self.position = next;
                    return Ok(ran);
                }
            }
            reported = valid.max(reported);
            self.position = next;
            match code {
                0 => continue,
                HALTED => {
                    ran.ended = true;
                    return Ok(ran);
                }
                ERR_TEXT => {
                    ran.chosen += 1;
                    let _ = chosen(None);
                    self.broken = true;
                    return Ok(ran);
                }
                _ => {
                    self.broken = true;
                    outcome(&words, self.d, true)?;
                }
            }
        }
        Ok(ran)
    }

    /// Submits `n` positions, then reads `out`'s header and `read` ids from position `from`
    /// (as the header's words after [`IDS`]).
    async fn submit(&self, gpu: &Gpu, n: usize, from: usize, read: usize) -> Result<Vec<u32>, GpuError> {
        let s = &self.shaders;
        let errors = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for _ in 0..n {
                pass.set_bind_group(0, &self.ends, &[]);
                pass.set_pipeline(&s.embed);
                pass.dispatch_workgroups(1, 1, 1);
                for layer in &self.layers {
                    pass.set_bind_group(0, &layer.group, &[]);
                    for &(p, groups) in &layer.steps {
                        pass.set_pipeline(s.pipeline(p));
                        pass.dispatch_workgroups(groups, 1, 1);
                    }
                }
                pass.set_bind_group(0, &self.ends, &[]);
                for (p, groups) in [(&s.final_norm, 1), (&s.logits, self.head_groups), (&s.argmax, 1)] {
                    pass.set_pipeline(p);
                    pass.dispatch_workgroups(groups, 1, 1);
                }
            }
        }
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("the chosen ids"),
            size: 4 * (IDS + read) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(&self.out, 0, &staging, 0, 4 * IDS as u64);
        if read > 0 {
            encoder.copy_buffer_to_buffer(
                &self.out,
                4 * (IDS + from) as u64,
                &staging,
                4 * IDS as u64,
                4 * read as u64,
            );
        }
        gpu.queue.submit([encoder.finish()]);
        if let Some(e) = errors.pop().await {
            return Err(GpuError::Gpu(e.to_string()));
        }
        Ok(super::bytes_to_words(&gpu.map_read(&staging).await?))
    }

    /// Compiled layer `i`'s DeltaNet state (`DeltaNet::state`'s layout), if it has one.
    pub async fn state(&self, gpu: &Gpu, i: usize) -> Result<Option<Vec<f32>>, GpuError> {
        let Some(Some((buffer, len))) = self.states.get(i) else { return Ok(None) };
        let bytes = gpu.read(buffer, 4 * *len as u64).await?;
        Ok(Some(super::bytes_to_words(&bytes).into_iter().map(f32::from_bits).collect()))
    }

    /// The machine `splice` holds in this GPU's rows (as [`Splice::machine_rows`] reads a CPU
    /// runner's): the three row layers' states read back and decoded on the host.
    pub async fn machine_rows(
        &self,
        gpu: &Gpu,
        splice: &Splice,
        warps: (usize, usize),
        regs: usize,
        words: usize,
    ) -> Result<MachineRows, GpuError> {
        let at = splice.row_layers();
        let mut states = Vec::new();
        for i in [at.file, at.memory, at.pcs] {
            let (Some(state), Some(Compiled::DeltaNet(w))) = (self.state(gpu, i).await?, splice.layers.get(i)) else {
                return Err(GpuError::Unsupported(alloc::format!("the splice's layer {i} holds no machine rows")));
            };
            states.push((state, w));
        }
        // The states are decoded where they lie: no layer (its weights cloned, its matrices
        // packed) is built around them.
        let views: Vec<State> = states
            .iter()
            .map(|(state, w)| {
                State::of(state, w).ok_or_else(|| {
                    GpuError::Unsupported(alloc::format!(
                        "a state of {} values read back for another shape",
                        state.len()
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(splice.rows_of([&views[0], &views[1], &views[2]], warps, regs, words))
    }
}

/// The ends' bindings: the embedding rows, the final norm, the head rows (`head.wgsl`).
fn ends(gpu: &Gpu, splice: &Splice, norms: &StreamNorms, layer: u32) -> Result<Own, GpuError> {
    let d = splice.width;
    let tables = (splice.embed.len() + 1) + (splice.head.len() + 1);
    let (mut entries, mut embed_table, mut head_table) = (Vec::new(), Vec::new(), Vec::new());
    for (rows, table) in [(&splice.embed, &mut embed_table), (&splice.head, &mut head_table)] {
        for row in rows {
            table.push((tables + entries.len()) as u32);
            if let Some(&(c, _)) = row.iter().find(|&&(c, _)| c >= d) {
                return Err(GpuError::Unsupported(alloc::format!("a machine token's row on channel {c} of {d}")));
            }
            entries.extend(row.iter().flat_map(|&(c, v)| [c as u32, v.to_bits()]));
        }
        table.push((tables + entries.len()) as u32);
    }
    let norm_at = tables + entries.len();
    let vectors = norms.last.iter().chain([&norms.eps]).map(|v| v.to_bits());
    let words: Vec<u32> = embed_table.into_iter().chain(head_table).chain(entries).chain(vectors).collect();
    let end = splice.token_id(crate::qwengpu::next_record::END) - splice.text.vocab;
    let params = Params {
        embed_table: 0,
        embed_rows: splice.embed.len() as u32,
        head_table: (splice.embed.len() + 1) as u32,
        head_rows: splice.head.len() as u32,
        logits_at: scratch_at(d) as u32,
        end_id: end as u32,
        norm_at: norm_at as u32,
        eps_at: (norm_at + d) as u32,
        layer,
        ..Params::default()
    };
    Own::new(gpu, "the machine's embedding and head", &params, &words, 0)
}
