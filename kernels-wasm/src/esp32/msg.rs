//! The messages a coordinator and a node exchange, one per [`super::wire`] frame. The coordinator
//! asks, the node answers each request with exactly one response of the same sequence number.

use super::wire::{PayloadError, Reader, Writer};
use crate::bitnet::model::Config;
use alloc::string::String;
use alloc::vec::Vec;

/// What a node is and can hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Caps {
    pub name: String,
    /// Bytes for activations, tables, frame buffers and stack.
    pub sram: u64,
    /// Bytes for weights and the KV cache.
    pub psram: u64,
    pub clock_hz: u64,
    /// Link bits per second (UART baud); 0 for an unthrottled link.
    pub link_bps: u64,
    /// An emulation on a host, not a board: everything it reports is modelled.
    pub emulated: bool,
}

/// One tensor of an assignment: what the node should expect in the load chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    pub name: String,
    /// The GGML type id.
    pub ty: u32,
    pub dims: Vec<u64>,
    pub bytes: u32,
    pub crc32: u32,
}

/// Blocks `first..first + count` of a model shaped `config`, for sequences up to `context`.
#[derive(Debug, Clone, PartialEq)]
pub struct Assign {
    pub config: Config,
    pub first: u32,
    pub count: u32,
    pub context: u32,
    pub tensors: Vec<TensorMeta>,
}

/// Operations counted during a forward, from which the cost model gives modelled time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Weight bytes streamed from PSRAM.
    pub weight_bytes: u64,
    /// Ternary multiply-adds on the SIMD multiply-add path (I2_S).
    pub simd_macs: u64,
    /// Table lookups on the scalar LUT path (TL1: 2 weights each, TL2: 3).
    pub lut_lookups: u64,
    /// Table entries built for the LUT path.
    pub lut_entries: u64,
    /// f32 multiply-adds (attention, norms, RoPE, SiLU products).
    pub flops: u64,
    /// Transcendentals (exp, sin, cos, sqrt).
    pub transcendentals: u64,
    /// KV-cache bytes read and written in PSRAM.
    pub kv_bytes: u64,
}

/// A node's running totals.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    pub sram_used: u64,
    pub psram_used: u64,
    pub forwards: u64,
    pub rows: u64,
    pub frames_in: u64,
    pub frames_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Damaged frames it received (and asked to be resent).
    pub corrupt_in: u64,
    /// Responses it sent again for a repeated request.
    pub resent: u64,
    /// Modelled compute time of all forwards, microseconds.
    pub modelled_us: u64,
    /// Wall time the host spent computing, microseconds (0 on a board without a timer).
    pub wall_us: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Hello,
    Assign(Assign),
    /// `data` is bytes `offset..` of tensor `tensor` of the assignment; chunks come in order.
    Chunk {
        tensor: u32,
        offset: u32,
        data: Vec<u8>,
    },
    /// All chunks sent: check each tensor's CRC-32 and build the layers.
    Commit,
    /// `rows` activation rows at positions `start..start + rows`, through the node's blocks.
    Forward {
        start: u32,
        rows: Vec<f32>,
    },
    Stats,
    /// Forget the KV cache (`weights`: and the assignment).
    Reset {
        weights: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    Caps(Caps),
    Ok,
    /// The rows after the node's blocks, with what it took.
    Rows {
        rows: Vec<f32>,
        counts: Counts,
        wall_us: u64,
    },
    Stats(Stats),
    /// The request was refused; the text names what and why.
    Error(String),
    /// The request frame arrived damaged: send it again.
    Resend,
}

// Command bytes: requests below 0x80, responses above.
const HELLO: u8 = 0x01;
const ASSIGN: u8 = 0x02;
const CHUNK: u8 = 0x03;
const COMMIT: u8 = 0x04;
const FORWARD: u8 = 0x05;
const STATS: u8 = 0x06;
const RESET: u8 = 0x07;
const CAPS: u8 = 0x81;
const OK: u8 = 0x82;
const ROWS: u8 = 0x83;
const STATS_R: u8 = 0x84;
const ERROR: u8 = 0x85;
const RESEND: u8 = 0x86;

fn config(w: &mut Writer, c: &Config) {
    for v in [c.vocab, c.dim, c.ffn, c.layers, c.heads, c.kv_heads, c.context] {
        w.u32(v as u32);
    }
    w.f32(c.rope_base).f32(c.eps);
}

fn read_config(r: &mut Reader) -> Result<Config, PayloadError> {
    let mut v = [0usize; 7];
    for x in v.iter_mut() {
        *x = r.u32("config")? as usize;
    }
    let [vocab, dim, ffn, layers, heads, kv_heads, context] = v;
    Ok(Config { vocab, dim, ffn, layers, heads, kv_heads, context, rope_base: r.f32("rope base")?, eps: r.f32("eps")? })
}

impl Counts {
    const FIELDS: usize = 7;
    fn array(&self) -> [u64; Counts::FIELDS] {
        [
            self.weight_bytes,
            self.simd_macs,
            self.lut_lookups,
            self.lut_entries,
            self.flops,
            self.transcendentals,
            self.kv_bytes,
        ]
    }
    fn from_array(a: [u64; Counts::FIELDS]) -> Counts {
        let [weight_bytes, simd_macs, lut_lookups, lut_entries, flops, transcendentals, kv_bytes] = a;
        Counts { weight_bytes, simd_macs, lut_lookups, lut_entries, flops, transcendentals, kv_bytes }
    }
    pub fn add(&mut self, o: &Counts) {
        let (a, b) = (self.array(), o.array());
        *self = Counts::from_array(core::array::from_fn(|i| a[i] + b[i]));
    }
}

impl Stats {
    const FIELDS: usize = 12;
    fn array(&self) -> [u64; Stats::FIELDS] {
        [
            self.sram_used,
            self.psram_used,
            self.forwards,
            self.rows,
            self.frames_in,
            self.frames_out,
            self.bytes_in,
            self.bytes_out,
            self.corrupt_in,
            self.resent,
            self.modelled_us,
            self.wall_us,
        ]
    }
    fn from_array(a: [u64; Stats::FIELDS]) -> Stats {
        let [sram_used, psram_used, forwards, rows, frames_in, frames_out, bytes_in, bytes_out, corrupt_in, resent, modelled_us, wall_us] =
            a;
        Stats {
            sram_used,
            psram_used,
            forwards,
            rows,
            frames_in,
            frames_out,
            bytes_in,
            bytes_out,
            corrupt_in,
            resent,
            modelled_us,
            wall_us,
        }
    }
}

fn u64s<const N: usize>(r: &mut Reader, what: &'static str) -> Result<[u64; N], PayloadError> {
    let mut a = [0u64; N];
    for x in a.iter_mut() {
        *x = r.u64(what)?;
    }
    Ok(a)
}

impl Request {
    /// Whether a command moves weights (assignment, chunk, commit): bulk traffic that a real
    /// cluster would flash once rather than send every run.
    pub fn is_load(cmd: u8) -> bool {
        matches!(cmd, ASSIGN | CHUNK | COMMIT)
    }

    /// The command byte and payload.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut w = Writer::default();
        let cmd = match self {
            Request::Hello => HELLO,
            Request::Assign(a) => {
                config(&mut w, &a.config);
                w.u32(a.first).u32(a.count).u32(a.context).u32(a.tensors.len() as u32);
                for t in &a.tensors {
                    w.str(&t.name).u32(t.ty).u32(t.dims.len() as u32);
                    t.dims.iter().for_each(|&d| {
                        w.u64(d);
                    });
                    w.u32(t.bytes).u32(t.crc32);
                }
                ASSIGN
            }
            Request::Chunk { tensor, offset, data } => {
                w.u32(*tensor).u32(*offset).bytes(data);
                CHUNK
            }
            Request::Commit => COMMIT,
            Request::Forward { start, rows } => {
                w.u32(*start).f32s(rows);
                FORWARD
            }
            Request::Stats => STATS,
            Request::Reset { weights } => {
                w.u8(*weights as u8);
                RESET
            }
        };
        (cmd, w.0)
    }

    pub fn decode(cmd: u8, payload: &[u8]) -> Result<Request, PayloadError> {
        let mut r = Reader::new(payload);
        let req = match cmd {
            HELLO => Request::Hello,
            ASSIGN => {
                let config = read_config(&mut r)?;
                let (first, count, context) = (r.u32("first")?, r.u32("count")?, r.u32("context")?);
                let n = r.u32("tensor count")?;
                // Each tensor takes at least 20 bytes: a count beyond that is a lie.
                if n as usize > payload.len() / 20 {
                    return Err(PayloadError("tensor count"));
                }
                let mut tensors = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let name = r.str("tensor name")?;
                    let ty = r.u32("tensor type")?;
                    let nd = r.u32("tensor dims")?;
                    if nd > 4 {
                        return Err(PayloadError("tensor dims"));
                    }
                    let dims = (0..nd).map(|_| r.u64("tensor dims")).collect::<Result<_, _>>()?;
                    tensors.push(TensorMeta {
                        name,
                        ty,
                        dims,
                        bytes: r.u32("tensor bytes")?,
                        crc32: r.u32("tensor crc")?,
                    });
                }
                Request::Assign(Assign { config, first, count, context, tensors })
            }
            CHUNK => {
                Request::Chunk { tensor: r.u32("tensor")?, offset: r.u32("offset")?, data: r.bytes("data")?.to_vec() }
            }
            COMMIT => Request::Commit,
            FORWARD => Request::Forward { start: r.u32("start")?, rows: r.f32s("rows")? },
            STATS => Request::Stats,
            RESET => Request::Reset { weights: r.u8("weights")? != 0 },
            _ => return Err(PayloadError("unknown request command")),
        };
        r.end()?;
        Ok(req)
    }
}

impl Response {
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut w = Writer::default();
        let cmd = match self {
            Response::Caps(c) => {
                w.str(&c.name).u64(c.sram).u64(c.psram).u64(c.clock_hz).u64(c.link_bps).u8(c.emulated as u8);
                CAPS
            }
            Response::Ok => OK,
            Response::Rows { rows, counts, wall_us } => {
                w.f32s(rows);
                counts.array().iter().for_each(|&v| {
                    w.u64(v);
                });
                w.u64(*wall_us);
                ROWS
            }
            Response::Stats(s) => {
                s.array().iter().for_each(|&v| {
                    w.u64(v);
                });
                STATS_R
            }
            Response::Error(e) => {
                w.str(e);
                ERROR
            }
            Response::Resend => RESEND,
        };
        (cmd, w.0)
    }

    pub fn decode(cmd: u8, payload: &[u8]) -> Result<Response, PayloadError> {
        let mut r = Reader::new(payload);
        let resp = match cmd {
            CAPS => Response::Caps(Caps {
                name: r.str("name")?,
                sram: r.u64("sram")?,
                psram: r.u64("psram")?,
                clock_hz: r.u64("clock")?,
                link_bps: r.u64("link")?,
                emulated: r.u8("emulated")? != 0,
            }),
            OK => Response::Ok,
            ROWS => Response::Rows {
                rows: r.f32s("rows")?,
                counts: Counts::from_array(u64s(&mut r, "counts")?),
                wall_us: r.u64("wall")?,
            },
            STATS_R => Response::Stats(Stats::from_array(u64s(&mut r, "stats")?)),
            ERROR => Response::Error(r.str("error")?),
            RESEND => Response::Resend,
            _ => return Err(PayloadError("unknown response command")),
        };
        r.end()?;
        Ok(resp)
    }
}
