//! A long request (`ebpf_run`, `esp32_run`) on a blocking thread: where its events go, the
//! host-wide lock its kind takes, the file roots it may read, and the flag its cancellation sets.

use super::connection::Outbound;
use super::requests::Failure;
use crate::files::Roots;
use kernels_wasm::protocol::{ErrorCode, Event, RequestId, ServerMessage};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Set when the request's future is dropped (cancel, or the connection went away): the run stops
/// at its next step and releases what it holds.
pub struct CancelOnDrop(pub Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub struct Job {
    pub id: RequestId,
    pub out: mpsc::Sender<Outbound>,
    /// Held by the one run of this kind the host allows at a time.
    pub lock: Arc<Mutex<()>>,
    pub roots: Roots,
    pub cancelled: Arc<AtomicBool>,
}

impl Job {
    /// A job, and the guard that cancels it when the request's future is dropped.
    pub fn new(id: RequestId, out: mpsc::Sender<Outbound>, lock: Arc<Mutex<()>>, roots: Roots) -> (Job, CancelOnDrop) {
        let cancelled = Arc::new(AtomicBool::new(false));
        (Job { id, out, lock, roots, cancelled: cancelled.clone() }, CancelOnDrop(cancelled))
    }

    /// Sends `event`, unless the request is over: a cancelled request's final frame is already
    /// out, and the protocol has no events after it.
    pub fn event(&self, event: Event) {
        if self.cancelled() {
            return;
        }
        let _ = self.out.blocking_send(Outbound::Frame(ServerMessage::Event { id: self.id, event }));
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// A request the client got wrong, in its words.
pub fn bad(message: impl Into<String>) -> Failure {
    Failure { code: ErrorCode::BadRequest, message: message.into() }
}
