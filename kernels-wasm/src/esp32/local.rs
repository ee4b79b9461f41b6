//! A node in the same process as its coordinator: the browser tab's cluster, and the tests'.
//! Bytes still go through the framing, so corruption and loss behave as on a wire.

use super::coord::{Flipper, Link, LinkError};
use super::node::Node;
use super::wire::Decoder;
use alloc::vec::Vec;

pub struct Local {
    pub node: Node,
    dec: Decoder,
    out: Vec<u8>,
    /// Damage the node's answers.
    pub flip: Option<Flipper>,
    /// The node dies (its link closes) once it has answered this many forwards.
    pub die_after_forwards: Option<u64>,
}

impl Local {
    pub fn new(node: Node) -> Local {
        Local { node, dec: Decoder::default(), out: Vec::new(), flip: None, die_after_forwards: None }
    }

    fn dead(&self) -> bool {
        self.die_after_forwards.is_some_and(|n| self.node.stats().forwards >= n)
    }
}

impl Link for Local {
    fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        if self.dead() {
            return Err(LinkError::Closed);
        }
        self.dec.push(bytes);
        while let Some(d) = self.dec.next_frame() {
            let mut frame = self.node.on_decoded(d);
            if let Some(f) = &mut self.flip {
                f.apply(&mut frame);
            }
            self.out.extend_from_slice(&frame);
        }
        Ok(())
    }

    fn recv(&mut self, _wait_ms: u32, into: &mut Vec<u8>) -> Result<usize, LinkError> {
        if self.out.is_empty() && self.dead() {
            return Err(LinkError::Closed);
        }
        let n = self.out.len();
        into.append(&mut self.out);
        Ok(n)
    }
}
