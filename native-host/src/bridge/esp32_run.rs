//! `esp32_run`: a BitNet model across emulated ESP32-S3 nodes that the bridge starts as
//! processes (`native-host esp32 node`), streamed to the page event by event. One run at a time
//! per host.

use super::connection::Outbound;
use super::job::{bad, Job};
use super::requests::Failure;
use crate::bitnet::dummy::{parse_quant, write_model, Target};
use crate::esp32::run::{cluster_run, Args};
use crate::esp32::Board;
use kernels_wasm::bitnet::model::{dummy, Config};
use kernels_wasm::esp32::budget::{KIB, MIB};
use kernels_wasm::gguf::GgmlType;
use kernels_wasm::protocol::esp32::{Esp32Model, Esp32Run, MAX_ESP32_NODES, MAX_ESP32_PROMPT_TEXT, MAX_ESP32_TOKENS};
use kernels_wasm::protocol::{ErrorCode, Event, FileRoot, Reply, ServerMessage};
use std::path::PathBuf;

/// The fixture, under `assets/`.
pub const FIXTURE: &str = "fixtures/bitnet-cpp/tiny.i2_s.gguf";
/// Dummy layouts the bridge makes on request (about a second each).
pub const DUMMY_SIZES: [&str; 2] = ["tiny", "125M"];

/// A dummy model in this host's private cache directory, written once (the bridge's own file: no
/// user path is involved; a failed write leaves only its removed `.partial`).
fn dummy_file(size: &str, quant: &str) -> Result<PathBuf, Failure> {
    let Some(c) = DUMMY_SIZES.iter().find(|s| s.eq_ignore_ascii_case(size)).and_then(|s| Config::dummy(s)) else {
        return Err(bad(format!("dummy size {size:?}: give one of {}", DUMMY_SIZES.join(", "))));
    };
    let q = parse_quant(quant).map_err(|e| bad(e.to_string()))?;
    let dir = crate::files::private_dir("esp32")
        .map_err(|e| Failure { code: ErrorCode::Io, message: format!("the dummy models' directory: {e}") })?;
    let path = dir.join(format!("dummy-{}-{}.gguf", size.to_ascii_lowercase(), q.name()));
    if !path.exists() {
        let name = format!("bitnet-dummy-{}", size.to_uppercase());
        let target = Target {
            name: &name,
            quant: q,
            embed: GgmlType::F16,
            output_ty: GgmlType::F16,
            output: false,
            path: &path,
        };
        write_model(&c, target, dummy::metadata(&c, &name, q), |t, k| Ok(dummy::values(0, t, k)))
            .map_err(|e| Failure { code: ErrorCode::Io, message: format!("writing the dummy model: {e:#}") })?;
    }
    Ok(path)
}

impl Job {
    pub fn esp32_run(self, req: Esp32Run) -> Result<Reply, Failure> {
        if req.nodes > MAX_ESP32_NODES {
            return Err(bad(format!("nodes {}: give 0 (as few as fit) to {MAX_ESP32_NODES}", req.nodes)));
        }
        if req.max_tokens == 0 || req.max_tokens > MAX_ESP32_TOKENS {
            return Err(bad(format!("max_tokens {}: give 1 to {MAX_ESP32_TOKENS}", req.max_tokens)));
        }
        if req.prompt.len() > MAX_ESP32_PROMPT_TEXT {
            return Err(bad(format!("prompt: at most {MAX_ESP32_PROMPT_TEXT} bytes (got {})", req.prompt.len())));
        }
        let sram = req.sram.unwrap_or(512 * KIB);
        let psram = req.psram.unwrap_or(8 * MIB);
        let link = req.link_bps.unwrap_or(921_600);
        if !(16 * KIB..=16 * MIB).contains(&sram) || !(64 * KIB..=64 * MIB).contains(&psram) {
            return Err(bad("sram: give 16 KiB to 16 MiB; psram: 64 KiB to 64 MiB"));
        }
        if link != 0 && !(300..=100_000_000).contains(&link) {
            return Err(bad(format!("link_bps {link}: give 0 (unthrottled) or 300 to 100000000")));
        }
        let Ok(_held) = self.lock.try_lock() else {
            return Err(Failure { code: ErrorCode::Busy, message: "another ESP32 cluster run is going".into() });
        };
        let model = match &req.model {
            Esp32Model::Fixture => self.roots.resolve(FileRoot::Assets, FIXTURE)?,
            Esp32Model::Dummy { size, quant } => dummy_file(size, quant)?,
            Esp32Model::Path { path } => self.roots.resolve(FileRoot::Models, path)?,
        };
        let args = Args {
            model,
            nodes: if req.nodes == 0 { "auto".into() } else { req.nodes.to_string() },
            prompt: req.prompt,
            n_predict: req.max_tokens as usize,
            ctx_size: None,
            temp: 0.0,
            seed: 0,
            board: Board { sram, psram, clock: 240_000_000, link },
            flip_every: 0,
            node_flip_every: 0,
            resend_ms: 2_000,
            timeout_ms: 20_000,
            verbose: false,
        };
        let stop = || self.cancelled();
        let summary = cluster_run(&args, &stop, &mut |event| {
            let _ = self
                .out
                .blocking_send(Outbound::Frame(ServerMessage::Event { id: self.id, event: Event::Esp32 { event } }));
        });
        match summary {
            Ok(s) => Ok(Reply::Esp32Done(s)),
            Err(_) if stop() => Err(Failure { code: ErrorCode::Cancelled, message: "cancelled".into() }),
            Err(e) => Err(Failure { code: ErrorCode::BadRequest, message: format!("{e:#}") }),
        }
    }
}
