//! Running one request: its events and its single final frame, in order, from one task.

use super::connection::Outbound;
use super::job::{CancelOnDrop, Job};
use super::Config;
use crate::probe;
use kernels_wasm::protocol::{ErrorCode, Event, Reply, Request, RequestId, ServerMessage, MAX_PING_DELAY_MS};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A request's failure, reported as its final error frame.
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
}

impl Failure {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure { code, message: message.into() }
    }
}

impl From<crate::files::FileError> for Failure {
    fn from(e: crate::files::FileError) -> Self {
        Failure::new(e.code(), e.to_string())
    }
}

pub struct Task {
    pub id: RequestId,
    pub out: mpsc::Sender<Outbound>,
    pub config: Arc<Config>,
}

impl Task {
    pub async fn run(self, request: Request, cancel: oneshot::Receiver<()>, done: mpsc::UnboundedSender<RequestId>) {
        let outcome = tokio::select! {
            r = self.handle(request) => r,
            // A dropped sender (connection gone) also lands here; the frame is then discarded.
            _ = cancel => Err(Failure::new(ErrorCode::Cancelled, "cancelled by the client")),
        };
        let id = self.id;
        let last = match outcome {
            Ok(result) => ServerMessage::Result { id, result },
            Err(f) => ServerMessage::error(Some(id), f.code, f.message),
        };
        // Free the in-flight slot before the final frame is visible, so a client that reuses the
        // id as soon as it sees the reply never races the bookkeeping.
        let _ = done.send(id);
        let _ = self.out.send(Outbound::Frame(last)).await;
    }

    /// A long run for a blocking thread, holding `lock` while it goes.
    fn job(&self, lock: &Arc<std::sync::Mutex<()>>) -> (Job, CancelOnDrop) {
        Job::new(self.id, self.out.clone(), lock.clone(), self.config.roots.clone())
    }

    async fn event(&self, event: Event) {
        let _ = self.out.send(Outbound::Frame(ServerMessage::Event { id: self.id, event })).await;
    }

    async fn handle(&self, request: Request) -> Result<Reply, Failure> {
        match request {
            Request::Ping { nonce, delay_ms } => {
                if delay_ms > MAX_PING_DELAY_MS {
                    return Err(Failure::new(
                        ErrorCode::BadRequest,
                        format!("delay_ms {delay_ms} is over the limit of {MAX_PING_DELAY_MS}"),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(delay_ms.into())).await;
                Ok(Reply::Pong { nonce })
            }
            Request::Probe => {
                let ebpf = blocking(probe::ebpf).await?;
                self.event(Event::Probe { name: "ebpf".into(), result: ebpf.clone() }).await;
                let clang = blocking(probe::clang).await?;
                self.event(Event::Probe { name: "clang".into(), result: clang.clone() }).await;
                Ok(Reply::Capabilities(kernels_wasm::protocol::Capabilities { ebpf, clang }))
            }
            Request::ListModels => {
                let roots = self.config.roots.clone();
                let models = blocking(move || roots.list()).await?;
                Ok(Reply::Models { models })
            }
            Request::ModelInfo { root, path } => {
                let roots = self.config.roots.clone();
                Ok(Reply::ModelInfo(blocking(move || roots.info(root, &path)).await??))
            }
            Request::QwengpuCompile { cuda } => {
                use crate::qwengpu::SourceError;
                use crate::sandbox::SandboxError;
                let filter = self.config.include_filter;
                let ptx = blocking(move || crate::qwengpu::cuda_source_to_ptx(&cuda, filter)).await?;
                ptx.map(|ptx| Reply::QwengpuPtx { ptx }).map_err(|e| {
                    let code = match e {
                        SourceError::TooLarge(_) | SourceError::Compiler(_) => ErrorCode::BadRequest,
                        SourceError::Sandbox(SandboxError::Timeout { .. } | SandboxError::TooMuchOutput { .. }) => {
                            ErrorCode::BadRequest
                        }
                        SourceError::Include(_) => ErrorCode::PathRefused,
                        SourceError::Busy => ErrorCode::Busy,
                        SourceError::Sandbox(_) | SourceError::Io(_) => ErrorCode::Internal,
                    };
                    Failure::new(code, e.to_string())
                })
            }
            Request::EbpfRun { model, prompt, max_tokens, threads } => {
                let (job, _cancel) = self.job(&self.config.ebpf_run);
                blocking(move || job.ebpf_run(model, prompt, max_tokens, threads)).await?
            }
            Request::QwengpuChat(turn) => {
                // The slot is the lock: one turn at a time on the host's one conversation.
                let (job, _cancel) = self.job(&Arc::default());
                let (slot, filter) = (self.config.qwengpu_chat.clone(), self.config.include_filter);
                blocking(move || job.qwengpu_chat(turn, slot, filter)).await?
            }
            Request::Esp32Run(req) => {
                let (job, _cancel) = self.job(&self.config.esp32_run);
                blocking(move || job.esp32_run(req)).await?
            }
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Failure::new(ErrorCode::Internal, format!("worker failed: {e}")))
}
