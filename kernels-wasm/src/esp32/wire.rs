//! The wire between the coordinator and a node: framed, versioned, checked.
//!
//! The framing is the esp32-llm-pipeline peer's `A5 5A | cmd | len | payload | CRC16`, with a
//! version byte and a sequence number added so that a resent request is recognised:
//!
//! ```text
//! A5 5A | ver u8 | cmd u8 | seq u16 | len u32 | hcrc u8 | payload (len bytes) | crc u16
//! ```
//!
//! Integers are little-endian. `hcrc` is a CRC-8 (poly 0x07) of `ver..len`: a damaged length is
//! caught before the reader waits for bytes that never come (without it, one flipped bit in
//! `len` stalls the link until a timeout). The CRC is CRC-16/CCITT-FALSE (poly 0x1021, init
//! 0xFFFF) over everything from `ver` to the end of the payload. A frame whose CRC fails is
//! dropped and the [`Decoder`] resynchronises on the next `A5 5A`.

use alloc::vec::Vec;

pub const MAGIC: [u8; 2] = [0xA5, 0x5A];
/// Bumped on every incompatible change to the frames or the messages.
pub const WIRE_VERSION: u8 = 1;
/// Header bytes before the payload.
pub const HEADER: usize = 11;
/// Largest payload: weights travel in chunks of [`CHUNK`], activations in batches that fit.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Weight bytes per load frame.
pub const CHUNK: usize = 16 * 1024;

/// One checked frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub cmd: u8,
    pub seq: u16,
    pub payload: Vec<u8>,
}

/// CRC-16/CCITT-FALSE, bit by bit: a few hundred bytes of code on a microcontroller, no table.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0xFFFFu16;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// CRC-8 (poly 0x07, init 0) of the header fields.
pub fn crc8(data: &[u8]) -> u8 {
    let mut crc = 0u8;
    for &b in data {
        crc ^= b;
        for _ in 0..8 {
            crc = if crc & 0x80 != 0 { (crc << 1) ^ 0x07 } else { crc << 1 };
        }
    }
    crc
}

/// CRC-32 (IEEE, reflected) of a whole tensor, checked once the last chunk has arrived.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// The bytes of a frame.
pub fn encode(cmd: u8, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len() + 2);
    out.extend_from_slice(&MAGIC);
    out.push(WIRE_VERSION);
    out.push(cmd);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.push(crc8(&out[2..10]));
    out.extend_from_slice(payload);
    let crc = crc16(&out[2..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// What a [`Decoder`] found in the byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    Frame(Frame),
    /// Bytes that were not a good frame: a failed CRC, an oversized length, another version.
    /// They are dropped; the sender should be asked to resend.
    Corrupt(&'static str),
}

/// Reassembles frames from a byte stream that may split, join or damage them.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed. Dropping them from the front at every step would cost
    /// the buffer's length each time, quadratic for a stream of bad magics (fuzzing found it);
    /// they are dropped in one go once they are half the buffer.
    start: usize,
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Bytes held that do not yet make a frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next frame or corruption in what has arrived, or `None` if more bytes are needed.
    pub fn next_frame(&mut self) -> Option<Decoded> {
        let buf = &self.buf[self.start..];
        // Skip to the first magic; junk before it is a damaged frame's tail.
        let start = buf.windows(2).position(|w| w == MAGIC);
        match start {
            Some(0) => {}
            Some(s) => {
                self.consume(s);
                return Some(Decoded::Corrupt("bytes outside a frame"));
            }
            None => {
                // Keep a last 0xA5: it may be the start of a magic.
                let keep = usize::from(buf.last() == Some(&MAGIC[0]));
                let junk = buf.len() - keep;
                self.consume(junk);
                return (junk > 0).then_some(Decoded::Corrupt("bytes outside a frame"));
            }
        }
        if buf.len() < HEADER {
            return None;
        }
        let len = u32::from_le_bytes([buf[6], buf[7], buf[8], buf[9]]) as usize;
        let bad = if crc8(&buf[2..10]) != buf[10] {
            Some("header CRC mismatch")
        } else if buf[2] != WIRE_VERSION {
            Some("unknown version")
        } else if len > MAX_PAYLOAD {
            Some("length over the limit")
        } else {
            None
        };
        if let Some(why) = bad {
            // Drop this magic and look for the next one.
            self.consume(2);
            return Some(Decoded::Corrupt(why));
        }
        let total = HEADER + len + 2;
        if buf.len() < total {
            return None;
        }
        let crc = u16::from_le_bytes([buf[total - 2], buf[total - 1]]);
        if crc16(&buf[2..total - 2]) != crc {
            self.consume(2);
            return Some(Decoded::Corrupt("CRC mismatch"));
        }
        let frame =
            Frame { cmd: buf[3], seq: u16::from_le_bytes([buf[4], buf[5]]), payload: buf[HEADER..total - 2].to_vec() };
        self.consume(total);
        Some(Decoded::Frame(frame))
    }
}

/// Little-endian payload writer.
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.u32(v.to_bits())
    }
    /// A length-prefixed byte string (u32 length).
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    pub fn f32s(&mut self, v: &[f32]) -> &mut Self {
        self.u32(v.len() as u32);
        v.iter().for_each(|x| self.0.extend_from_slice(&x.to_bits().to_le_bytes()));
        self
    }
}

/// Little-endian payload reader; every read names what ran short.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

/// A payload that does not parse: too short, or a field out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payload: {0}")]
pub struct PayloadError(pub &'static str);

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, at: 0 }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], PayloadError> {
        let s = self.data.get(self.at..self.at.checked_add(n).ok_or(PayloadError(what))?).ok_or(PayloadError(what))?;
        self.at += n;
        Ok(s)
    }
    pub fn u8(&mut self, what: &'static str) -> Result<u8, PayloadError> {
        Ok(self.take(1, what)?[0])
    }
    pub fn u16(&mut self, what: &'static str) -> Result<u16, PayloadError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self, what: &'static str) -> Result<u32, PayloadError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self, what: &'static str) -> Result<u64, PayloadError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub fn f32(&mut self, what: &'static str) -> Result<f32, PayloadError> {
        Ok(f32::from_bits(self.u32(what)?))
    }
    pub fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], PayloadError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    pub fn str(&mut self, what: &'static str) -> Result<alloc::string::String, PayloadError> {
        core::str::from_utf8(self.bytes(what)?).map(Into::into).map_err(|_| PayloadError(what))
    }
    pub fn f32s(&mut self, what: &'static str) -> Result<Vec<f32>, PayloadError> {
        let n = self.u32(what)? as usize;
        let b = self.take(n.checked_mul(4).ok_or(PayloadError(what))?, what)?;
        Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
    /// Fails unless every byte was read.
    pub fn end(&self) -> Result<(), PayloadError> {
        if self.at == self.data.len() {
            Ok(())
        } else {
            Err(PayloadError("trailing bytes"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crcs_match_their_standard_check_values() {
        // The catalogue check value of each CRC over "123456789".
        assert_eq!(crc8(b"123456789"), 0xF4);
        assert_eq!(crc16(b"123456789"), 0x29B1);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn frames_survive_splitting_and_every_single_bit_flip_is_caught() {
        let a = encode(3, 7, b"hello, node");
        let b = encode(4, 8, &[0u8; 300]);
        let mut d = Decoder::default();
        let stream: Vec<u8> = a.iter().chain(&b).copied().collect();
        let mut got = Vec::new();
        for byte in stream.chunks(5) {
            d.push(byte);
            while let Some(x) = d.next_frame() {
                got.push(x);
            }
        }
        assert_eq!(
            got,
            [
                Decoded::Frame(Frame { cmd: 3, seq: 7, payload: b"hello, node".to_vec() }),
                Decoded::Frame(Frame { cmd: 4, seq: 8, payload: alloc::vec![0; 300] })
            ]
        );
        // Flip each bit of the first frame in turn: it never decodes as a frame, and the second
        // frame behind it always does.
        for bit in 0..a.len() * 8 {
            let mut bad = a.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut d = Decoder::default();
            d.push(&bad);
            d.push(&b);
            let mut frames = Vec::new();
            while let Some(x) = d.next_frame() {
                if let Decoded::Frame(f) = x {
                    frames.push(f);
                }
            }
            assert_eq!(frames.len(), 1, "bit {bit}");
            assert_eq!(frames[0].seq, 8, "bit {bit}");
        }
    }

    #[test]
    fn readers_name_what_ran_short() {
        let mut w = Writer::default();
        w.u16(5).str("abc").f32s(&[1.5, -2.0]);
        let mut r = Reader::new(&w.0);
        assert_eq!(r.u16("a"), Ok(5));
        assert_eq!(r.str("b").as_deref(), Ok("abc"));
        assert_eq!(r.f32s("c"), Ok(alloc::vec![1.5, -2.0]));
        assert_eq!(r.end(), Ok(()));
        assert_eq!(Reader::new(&w.0[..3]).u32("the count"), Err(PayloadError("the count")));
        assert_eq!(Reader::new(&[255, 255, 255, 255]).f32s("rows"), Err(PayloadError("rows")));
    }
}
