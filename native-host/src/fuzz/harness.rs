//! What the fuzz targets share: scratch directories, the ESP32 record format, a node and a
//! coordinator driven by a script.

use super::*;

// ---------------------------------------------------------------------------------------------
// What the targets share.

/// Texts a tokenizer is asked to encode: what a prompt box holds, chat markup, odd Unicode.
pub(crate) const SAMPLE_TEXTS: [&str; 5] =
    ["Hello, world!", "<|im_start|>user\nhi<|im_end|>\n", " 12345  ünïcode 😀\r\n\tend", "", "\u{0}\u{feff}x"];

pub(crate) fn use_tokenizer(t: &TextTokenizer) {
    let chat = t.chat_prompt("hi");
    let mut texts: Vec<&str> = SAMPLE_TEXTS.to_vec();
    texts.push(&chat);
    for text in texts {
        if let Ok(ids) = t.encode(text) {
            let _ = t.decode(&ids);
        }
    }
    let _ = t.decode(&[0, 1, 2, 3, u32::MAX as usize]);
}

pub(crate) fn bitnet_execs() -> [Exec<'static>; 3] {
    [
        Exec { backend: Backend::Scalar, par: &Single, simd: false, reference: false },
        Exec::best(&Single),
        Exec { backend: Backend::Scalar, par: &Single, simd: false, reference: true },
    ]
}

/// This process's scratch directories live here: `temp_dir()/substrates-fuzz-<pid>`.
pub fn scratch_root() -> PathBuf {
    std::env::temp_dir().join(format!("substrates-fuzz-{}", std::process::id()))
}

pub(crate) static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    /// Each thread its own scratch directories: `cargo test` runs the targets in parallel.
    static THREAD: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn thread_scratch() -> PathBuf {
    scratch_root().join(format!("thread-{}", THREAD.with(|t| *t)))
}

/// A scratch directory for the loaders that read files (made if missing).
pub(crate) fn scratch(what: &str) -> Option<PathBuf> {
    let dir = thread_scratch().join(what);
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// A valid safetensors file with no tensors, from the crate's own writer.
pub(crate) fn empty_safetensors() -> Vec<u8> {
    let none: Vec<(String, ::safetensors::tensor::TensorView<'static>)> = Vec::new();
    ::safetensors::serialize(none, None).unwrap_or_else(|_| {
        let mut b = 8u64.to_le_bytes().to_vec();
        b.extend_from_slice(b"{}      ");
        b
    })
}

/// The ESP32 targets' inputs: `cmd u8 | flags u8 | len u32 LE | payload`, one frame's contents
/// each; a short last payload takes what is left.
#[derive(Debug, Clone)]
pub struct Records<'a>(&'a [u8]);

/// The records of `data`.
pub fn records(data: &[u8]) -> Records<'_> {
    Records(data)
}

impl Records<'_> {
    fn done(&self) -> bool {
        self.0.len() < 6
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = (u8, u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (head, rest) = self.0.split_at_checked(6)?;
        let len = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
        let (payload, rest) = rest.split_at(len.min(rest.len()));
        self.0 = rest;
        Some((head[0], head[1], payload))
    }
}

/// One record, as [`records`] reads it back.
pub fn record(cmd: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![cmd, flags];
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Flips one bit of `frame`, chosen by `salt`.
pub(crate) fn damage(frame: &mut [u8], salt: usize) {
    if !frame.is_empty() {
        let bit = salt.wrapping_mul(2_654_435_761) % (frame.len() * 8);
        frame[bit / 8] ^= 1 << (bit % 8);
    }
}

/// Every frame `chunks` hold, pushed into one decoder chunk by chunk.
pub(crate) fn decode_frames<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<Frame> {
    let (mut d, mut out) = (Decoder::default(), Vec::new());
    for c in chunks {
        d.push(c);
        while let Some(x) = d.next_frame() {
            if let Decoded::Frame(f) = x {
                out.push(f);
            }
        }
    }
    out
}

/// The emulated nodes' board (`native-host esp32 node`'s defaults).
pub(crate) fn node_caps() -> Caps {
    Caps {
        name: "fuzz node".into(),
        sram: 512 * KIB,
        psram: 8 * MIB,
        clock_hz: 240_000_000,
        link_bps: 921_600,
        emulated: true,
    }
}

/// Runs a node on `data`'s records; returns its answers.
pub(crate) fn node_session(data: &[u8]) -> Vec<Response> {
    let mut node = Node::new(node_caps(), Backend::Scalar, None);
    let (mut link, mut back, mut answers) = (Decoder::default(), Decoder::default(), Vec::new());
    let mut seq = 0u16;
    for (i, (cmd, flags, payload)) in records(data).take(MAX_RECORDS).enumerate() {
        // Bit 0: the previous sequence number again (a resent request).
        if flags & 1 == 0 {
            seq = seq.wrapping_add(1);
        }
        let mut frame = wire::encode(cmd, seq, payload);
        if flags & 2 != 0 {
            damage(&mut frame, i);
        }
        if flags & 4 != 0 {
            node.reconnect();
        }
        link.push(&frame);
        while let Some(d) = link.next_frame() {
            back.push(&node.on_decoded(d));
            while let Some(a) = back.next_frame() {
                match a {
                    Decoded::Frame(f) => answers.push(
                        Response::decode(f.cmd, &f.payload)
                            .unwrap_or_else(|e| panic!("the node's answer 0x{:02x} does not decode: {e}", f.cmd)),
                    ),
                    Decoded::Corrupt(why) => panic!("the node sent a frame its own decoder refuses: {why}"),
                }
            }
        }
    }
    answers
}

/// A node that answers every request with the next record of a script.
pub(crate) struct Scripted<'a> {
    script: Records<'a>,
    requests: Decoder,
    out: Vec<u8>,
    answered: usize,
}

impl Link for Scripted<'_> {
    fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        self.requests.push(bytes);
        while let Some(d) = self.requests.next_frame() {
            let Decoded::Frame(request) = d else { continue };
            if self.answered >= MAX_RECORDS {
                return Err(LinkError::Closed);
            }
            let Some((cmd, flags, payload)) = self.script.next() else { return Err(LinkError::Closed) };
            let seq = match flags & 3 {
                1 => 0,
                2 => request.seq.wrapping_add(1),
                _ => request.seq,
            };
            let mut frame = wire::encode(cmd, seq, payload);
            if flags & 4 != 0 {
                damage(&mut frame, self.answered);
            }
            self.answered += 1;
            self.out.extend_from_slice(&frame);
        }
        Ok(())
    }

    fn recv(&mut self, _wait_ms: u32, into: &mut Vec<u8>) -> Result<usize, LinkError> {
        if self.out.is_empty() && (self.script.done() || self.answered >= MAX_RECORDS) {
            return Err(LinkError::Closed);
        }
        let n = self.out.len();
        into.append(&mut self.out);
        Ok(n)
    }
}

/// No real waiting happens: a scripted or in-process node answers at once, and silence is
/// counted in polls.
pub(crate) const TIMING: Timing = Timing { resend_ms: 2, give_up_ms: 8, poll_ms: 1 };
/// The context, prompt and generated tokens of the coordinator's session.
pub(crate) const CONTEXT: usize = 16;
pub(crate) const PROMPT: [u32; 3] = [1, 5, 9];
pub(crate) const TOKENS: usize = 2;

/// The coordinator's model: the small I2_S BitNet of the seeds.
pub(crate) fn coordinator_file() -> Option<Shared> {
    static FILE: OnceLock<Option<Shared>> = OnceLock::new();
    FILE.get_or_init(|| bitnet_seed(&small_bitnet(2), Quant::I2s, GgmlType::F16, false).map(|b| Arc::new(b) as Shared))
        .clone()
}

/// The coordinator's whole session against `link`: connect, load, generate.
pub(crate) fn run_coordinator<L: Link>(
    link: L,
) -> Result<(Cluster<L>, kernels_wasm::protocol::esp32::Esp32Summary), String> {
    let file = coordinator_file().ok_or("no coordinator model")?;
    let bytes: &[u8] = (*file).as_ref();
    let g = Gguf::parse(bytes).map_err(|e| e.to_string())?;
    let model = load::load(file.clone()).map_err(|e| e.to_string())?;
    let mut cluster = Cluster::connect(vec![Peer::new("node", link)], TIMING, None).map_err(|e| e.to_string())?;
    cluster.load(bytes, &g, CONTEXT, ("fuzz", ""), &mut |_| {}).map_err(|e| e.to_string())?;
    let ex = Exec { backend: Backend::Scalar, par: &Single, simd: false, reference: false };
    let summary = cluster
        .generate(&model, &PROMPT, TOKENS, &mut Sampler::new(0.0, 1), &ex, &mut |_| {})
        .map_err(|e| e.to_string())?;
    Ok((cluster, summary))
}

pub(crate) fn coordinator_session(data: &[u8]) -> Result<kernels_wasm::protocol::esp32::Esp32Summary, String> {
    let link = Scripted { script: records(data), requests: Decoder::default(), out: Vec::new(), answered: 0 };
    run_coordinator(link).map(|(_, summary)| summary)
}

/// A node in this process whose traffic is kept.
pub(crate) struct Recorder {
    node: Local,
    sent: Vec<u8>,
    received: Vec<u8>,
}

impl Link for Recorder {
    fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        self.sent.extend_from_slice(bytes);
        self.node.send(bytes)
    }

    fn recv(&mut self, wait_ms: u32, into: &mut Vec<u8>) -> Result<usize, LinkError> {
        let at = into.len();
        let n = self.node.recv(wait_ms, into)?;
        self.received.extend_from_slice(&into[at..]);
        Ok(n)
    }
}

/// The bytes both ways of a real session: the coordinator of [`esp32_coordinator`] against a
/// real node of [`esp32_node`]'s board.
pub(crate) fn recorded_session() -> Option<(Vec<u8>, Vec<u8>)> {
    let node = Local::new(Node::new(node_caps(), Backend::Scalar, None));
    let (mut cluster, _) = run_coordinator(Recorder { node, sent: Vec::new(), received: Vec::new() }).ok()?;
    let r = cluster.peers.first_mut()?.link_mut();
    Some((std::mem::take(&mut r.sent), std::mem::take(&mut r.received)))
}
