//! WebGPU backends (feature `gpu`): the BitNet kernels as WGSL compute shaders, driven through
//! wgpu — Vulkan natively (Mesa lavapipe on a machine without a GPU), the browser's WebGPU in
//! wasm. The same Rust and the same WGSL run in both places.
//!
//! - [`Gpu`]: an adapter, its device and queue, and the compiled pipelines.
//! - [`qwengpu`]: one token of the compiled qwenGPU layers per dispatch (exact f32 on any
//!   adapter: `exact.wgsl` gives correctly rounded `sqrt` and `/`).
//! - [`deltanet`], [`swiglu`]: the second machine's Gated DeltaNet and SwiGLU layers, one token
//!   per pass, with the CPU's bits.
//! - [`bitnet`]: I2_S, TL1 and TL2 GEMV/GEMM. The GPU computes the exact int32 accumulators;
//!   the f32 epilogue stays on the CPU (`bitnet::dequantize`), because WGSL does not promise a
//!   correctly rounded division and the results must equal the CPU's bit for bit.
//!
//! Everything that waits for the GPU is `async` (a browser cannot block); natively
//! [`block_on`] drives it.

pub mod bitnet;
pub mod deltanet;
pub mod launch;
pub mod machine;
pub mod qwengpu;
pub mod swiglu;

use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::sync::Mutex;
use wgpu::util::DeviceExt;

/// What went wrong on the GPU path: each names the request or the limit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    #[error("the GPU adapter {adapter} refused a device: {why}")]
    Device { adapter: String, why: String },
    #[error("{what} needs {need}, over this adapter's limit of {limit}")]
    TooLarge { what: String, need: u64, limit: u64 },
    #[error("the GPU reported an error: {0}")]
    Gpu(String),
    #[error("reading results back from the GPU failed: {0}")]
    Readback(String),
    #[error(transparent)]
    Bitnet(#[from] crate::bitnet::BitnetError),
    #[error("{0} is not supported on the GPU")]
    Unsupported(String),
    /// A step of the second machine's layers whose argument lies where WGSL's `exp`, `ln`,
    /// `sqrt` or `/` could give other bits than the CPU (`qwengpu::deltanet::Regime`): refused
    /// rather than approximated.
    #[error("{step} at {at} has the argument {arg}, where the GPU cannot promise the CPU's bits")]
    NotExact { step: String, at: String, arg: f32 },
}

/// What the adapter is, for the tab and the bench to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    pub name: String,
    /// "vulkan", "webgpu", …
    pub backend: String,
    /// A CPU emulation (lavapipe, SwiftShader): its timings are for regressions only.
    pub software: bool,
    pub driver: String,
}

impl core::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({}", self.name, self.backend)?;
        if !self.driver.is_empty() {
            write!(f, ", {}", self.driver)?;
        }
        if self.software {
            write!(f, ", a CPU emulation: timings for regressions only")?;
        }
        write!(f, ")")
    }
}

/// An adapter's device and queue with the kernels' pipelines.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: AdapterSummary,
    pub limits: wgpu::Limits,
    /// Whether dispatches are timed on the GPU (`Features::TIMESTAMP_QUERY`).
    pub timestamps: bool,
    pipelines: bitnet::Pipelines,
    /// The second machine's pipelines, built once per stream width (`machine::Shaders::of`).
    second: Mutex<Vec<(usize, Arc<machine::Shaders>)>>,
}

/// A dispatch's output bytes and, with timestamp queries, its time on the GPU.
pub struct Dispatched {
    pub bytes: Vec<u8>,
    pub gpu_ns: Option<f64>,
}

impl Gpu {
    /// The first adapter wgpu finds (a real GPU before a software one), its device with the
    /// adapter's own limits (large matrices need more than WebGPU's defaults), and the
    /// pipelines.
    pub async fn new() -> Result<Gpu, GpuError> {
        Self::with_backends(wgpu::Backends::all()).await
    }

    /// [`Gpu::new`] among the given backends only.
    pub async fn with_backends(backends: wgpu::Backends) -> Result<Gpu, GpuError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = backends;
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::NoAdapter(e.to_string()))?;
        let info = adapter.get_info();
        let summary = AdapterSummary {
            // Browsers may withhold the description.
            name: match info.name.is_empty() {
                true => "unnamed adapter (the browser withholds its description)".to_string(),
                false => info.name.clone(),
            },
            backend: info.backend.to_str().to_string(),
            software: info.device_type == wgpu::DeviceType::Cpu
                || ["llvmpipe", "lavapipe", "swiftshader"].iter().any(|s| info.name.to_lowercase().contains(s)),
            driver: [info.driver.as_str(), info.driver_info.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
        };
        let limits = adapter.limits();
        // Timestamp queries time each dispatch on the GPU itself, where the adapter offers them.
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("substrates"),
                required_limits: limits.clone(),
                required_features: match timestamps {
                    true => wgpu::Features::TIMESTAMP_QUERY,
                    false => wgpu::Features::empty(),
                },
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::Device { adapter: summary.name.clone(), why: e.to_string() })?;
        let pipelines = bitnet::Pipelines::new(&device);
        Ok(Gpu { device, queue, adapter: summary, limits, pipelines, timestamps, second: Mutex::new(Vec::new()) })
    }

    /// A storage buffer holding `data` (padded to whole u32 words, as WGSL reads them).
    fn storage(&self, label: &str, data: &[u8]) -> Result<wgpu::Buffer, GpuError> {
        let mut padded = data.to_vec();
        padded.resize(data.len().next_multiple_of(4).max(4), 0);
        self.check_binding(label, padded.len() as u64)?;
        Ok(self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: &padded,
            usage: wgpu::BufferUsages::STORAGE,
        }))
    }

    /// A zeroed storage buffer of `words` u32 words (at least one) that the host can write and
    /// read back.
    fn read_write(&self, label: &str, words: usize) -> Result<wgpu::Buffer, GpuError> {
        let bytes = 4 * words.max(1) as u64;
        self.check_binding(label, bytes)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    /// Refuses a dispatch of more workgroups in one dimension than the adapter takes.
    fn check_workgroups(&self, counts: impl IntoIterator<Item = u32>) -> Result<(), GpuError> {
        let max = self.limits.max_compute_workgroups_per_dimension;
        match counts.into_iter().find(|&n| n > max) {
            Some(n) => {
                let what = alloc::format!("a dispatch of {n} workgroups in one dimension");
                Err(GpuError::TooLarge { what, need: n as u64, limit: max as u64 })
            }
            None => Ok(()),
        }
    }

    /// Binding i = buffer i, in the layout of `pipeline`'s group 0.
    fn bind_group(&self, pipeline: &wgpu::ComputePipeline, bindings: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    fn check_binding(&self, what: &str, bytes: u64) -> Result<(), GpuError> {
        let limit = self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size);
        match bytes > limit {
            true => Err(GpuError::TooLarge { what: alloc::format!("{what} ({bytes} bytes)"), need: bytes, limit }),
            false => Ok(()),
        }
    }

    fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("params"),
            contents: &words_to_bytes(words),
            usage: wgpu::BufferUsages::UNIFORM,
        })
    }

    /// One dispatch of `pipeline` over `workgroups` with `bindings` (binding i = buffer i;
    /// the last is the output), then its first `out_bytes` read back. Validation errors come
    /// back as [`GpuError::Gpu`] rather than wgpu's default panic.
    async fn dispatch(
        &self,
        pipeline: &wgpu::ComputePipeline,
        bindings: &[&wgpu::Buffer],
        workgroups: [u32; 3],
        out_bytes: u64,
    ) -> Result<Dispatched, GpuError> {
        self.dispatch_steps(&[(pipeline, workgroups)], bindings, out_bytes).await
    }

    /// [`Self::dispatch`] of several pipelines in turn, each over its own workgroups, in one
    /// compute pass and one submission (each sees the last one's writes); they share one bind
    /// group layout.
    async fn dispatch_steps(
        &self,
        steps: &[(&wgpu::ComputePipeline, [u32; 3])],
        bindings: &[&wgpu::Buffer],
        out_bytes: u64,
    ) -> Result<Dispatched, GpuError> {
        let (pipeline, _) = *steps.first().ok_or_else(|| GpuError::Gpu("a dispatch without a pipeline".into()))?;
        self.check_workgroups(steps.iter().flat_map(|(_, w)| *w))?;
        let errors = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let group = self.bind_group(pipeline, bindings);
        let queries = self.timestamps.then(|| {
            let set = self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("dispatch time"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            });
            let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamps"),
                size: 16,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            (set, resolve)
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: queries.as_ref().map(|(set, _)| wgpu::ComputePassTimestampWrites {
                    query_set: set,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                }),
            });
            pass.set_bind_group(0, &group, &[]);
            for (step, [x, y, z]) in steps {
                pass.set_pipeline(step);
                pass.dispatch_workgroups(*x, *y, *z);
            }
        }
        // The output, then the two timestamps, in one mappable buffer.
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size: out_bytes.next_multiple_of(8) + 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let out = bindings.last().ok_or_else(|| GpuError::Gpu("a dispatch without an output buffer".into()))?;
        encoder.copy_buffer_to_buffer(out, 0, &staging, 0, out_bytes);
        if let Some((set, resolve)) = &queries {
            encoder.resolve_query_set(set, 0..2, resolve, 0);
            encoder.copy_buffer_to_buffer(resolve, 0, &staging, out_bytes.next_multiple_of(8), 16);
        }
        self.queue.submit([encoder.finish()]);
        if let Some(e) = errors.pop().await {
            return Err(GpuError::Gpu(e.to_string()));
        }
        let data = self.map_read(&staging).await?;
        let at = out_bytes.next_multiple_of(8) as usize;
        let stamp = |i: usize| u64::from_le_bytes(data[at + 8 * i..at + 8 * i + 8].try_into().unwrap_or_default());
        let gpu_ns = queries
            .is_some()
            .then(|| stamp(1).saturating_sub(stamp(0)) as f64 * self.queue.get_timestamp_period() as f64);
        Ok(Dispatched { bytes: data[..out_bytes as usize].to_vec(), gpu_ns })
    }

    /// The named entry points of a WGSL module as compute pipelines sharing one bind group
    /// layout (so one bind group serves a pass through several), binding i of kind
    /// `bindings[i]`.
    fn pipelines<const N: usize>(
        &self,
        label: &str,
        source: String,
        bindings: &[Binding],
        entries: [&str; N],
    ) -> [wgpu::ComputePipeline; N] {
        let desc = wgpu::ShaderModuleDescriptor { label: Some(label), source: wgpu::ShaderSource::Wgsl(source.into()) };
        let module = self.device.create_shader_module(desc);
        let entry = |(binding, kind): (usize, &Binding)| wgpu::BindGroupLayoutEntry {
            binding: binding as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: match kind {
                    Binding::Uniform => wgpu::BufferBindingType::Uniform,
                    Binding::Read => wgpu::BufferBindingType::Storage { read_only: true },
                    Binding::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout_entries: Vec<_> = bindings.iter().enumerate().map(entry).collect();
        let group = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(label),
            entries: &layout_entries,
        });
        let layout = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(label),
            bind_group_layouts: &[Some(&group)],
            immediate_size: 0,
        });
        entries.map(|entry| {
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: Some(&layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        })
    }

    /// Tokens one after another through `steps` (each pipeline over its workgroups, all with
    /// `group`), a pass each submitted without waiting: before each, the token's words are
    /// written to `input` at word `at` and `outcome`'s first [`OUTCOME`] words are cleared. Those
    /// words and `output`'s `words` from word `from` come back [`CHUNK`] tokens at a time, one
    /// vector per token (a wait per token costs more than a small layer's work).
    async fn passes(
        &self,
        steps: &[(&wgpu::ComputePipeline, u32)],
        group: &wgpu::BindGroup,
        (input, at): (&wgpu::Buffer, usize),
        tokens: &[Vec<u32>],
        outcome: &wgpu::Buffer,
        (output, from, words): (&wgpu::Buffer, usize, usize),
    ) -> Result<Vec<Vec<u32>>, GpuError> {
        self.check_workgroups(steps.iter().map(|(_, n)| *n))?;
        let stride = 4 * (OUTCOME + words) as u64;
        let mut outs = Vec::with_capacity(tokens.len());
        for chunk in tokens.chunks(CHUNK) {
            let errors = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("outputs"),
                size: stride * chunk.len() as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            for (t, token) in chunk.iter().enumerate() {
                self.queue.write_buffer(input, 4 * at as u64, &words_to_bytes(token));
                self.queue.write_buffer(outcome, 0, &[0; 4 * OUTCOME]);
                let mut encoder = self.device.create_command_encoder(&Default::default());
                {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    pass.set_bind_group(0, group, &[]);
                    for (pipeline, n) in steps {
                        pass.set_pipeline(pipeline);
                        pass.dispatch_workgroups(*n, 1, 1);
                    }
                }
                let to = stride * t as u64;
                encoder.copy_buffer_to_buffer(outcome, 0, &staging, to, 4 * OUTCOME as u64);
                encoder.copy_buffer_to_buffer(
                    output,
                    4 * from as u64,
                    &staging,
                    to + 4 * OUTCOME as u64,
                    4 * words as u64,
                );
                self.queue.submit([encoder.finish()]);
            }
            if let Some(e) = errors.pop().await {
                return Err(GpuError::Gpu(e.to_string()));
            }
            let got = bytes_to_words(&self.map_read(&staging).await?);
            outs.extend(got.chunks_exact(OUTCOME + words).map(<[u32]>::to_vec));
        }
        Ok(outs)
    }

    /// Maps a `MAP_READ` buffer (its commands submitted) and copies it out.
    async fn map_read(&self, staging: &wgpu::Buffer) -> Result<Vec<u8>, GpuError> {
        let (tx, rx) = oneshot();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| tx.send(r.map_err(|e| e.to_string())));
        // Natively nothing runs the callback but a poll; in the browser the event loop does.
        #[cfg(not(target_arch = "wasm32"))]
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| GpuError::Gpu(e.to_string()))?;
        rx.await.map_err(GpuError::Readback)?;
        let data = staging.slice(..).get_mapped_range().map_err(|e| GpuError::Readback(e.to_string()))?.to_vec();
        staging.unmap();
        Ok(data)
    }

    /// The first `bytes` of a `COPY_SRC` buffer, after the work already submitted.
    async fn read(&self, buffer: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>, GpuError> {
        let size = bytes.next_multiple_of(4).max(4);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        let mut data = self.map_read(&staging).await?;
        data.truncate(bytes as usize);
        Ok(data)
    }

    /// An empty output buffer of `bytes`.
    fn output(&self, bytes: u64) -> Result<wgpu::Buffer, GpuError> {
        self.check_binding("the output", bytes)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("output"),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }
}

fn words_to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bytes_to_words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// The words an outcome of [`Gpu::passes`] has: error code, where, argument bits, position and
/// layer (`second.wgsl`).
const OUTCOME: usize = 5;

/// What a binding of [`Gpu::pipelines`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    Uniform,
    Read,
    ReadWrite,
}

/// `n` storage bindings, the first read-only.
fn storage_bindings(n: usize) -> Vec<Binding> {
    (0..n).map(|i| if i == 0 { Binding::Read } else { Binding::ReadWrite }).collect()
}
/// Tokens whose outputs are read back together, at most.
pub const CHUNK: usize = 256;

/// Workgroups of 64 for `n` invocations.
fn groups_of_64(n: usize) -> u32 {
    n.div_ceil(64) as u32
}

/// A one-value channel whose receiving end is a future (wgpu's map callback → `async`).
type Slot<T> = Arc<Mutex<(Option<Result<(), T>>, Option<Waker>)>>;

struct Sender<T>(Slot<T>);
struct Receiver<T>(Slot<T>);

fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let slot: Slot<T> = Arc::new(Mutex::new((None, None)));
    (Sender(slot.clone()), Receiver(slot))
}

impl<T> Sender<T> {
    fn send(self, value: Result<(), T>) {
        let waker = match self.0.lock() {
            Ok(mut s) => {
                s.0 = Some(value);
                s.1.take()
            }
            Err(_) => None,
        };
        waker.into_iter().for_each(Waker::wake);
    }
}

impl<T: From<String>> Future for Receiver<T> {
    type Output = Result<(), T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Ok(mut s) = self.0.lock() else {
            return Poll::Ready(Err(T::from("the read-back callback panicked".to_string())));
        };
        match s.0.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Runs a future to completion on this thread (natively; the browser has its own executor).
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

#[cfg(test)]
mod checks;
#[cfg(test)]
mod deltanet_checks;
#[cfg(test)]
mod machine_checks;
#[cfg(test)]
mod swiglu_checks;
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
#[cfg(all(test, target_arch = "wasm32"))]
mod web_tests;
