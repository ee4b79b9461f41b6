//! GGUF v2/v3, the llama.cpp model format: a header, typed key/value metadata, tensor
//! descriptors, then the tensor data, each tensor at an offset aligned to `general.alignment`.
//!
//! ```text
//! "GGUF" u32 version | u64 tensor_count | u64 kv_count
//! kv_count × (string key | u32 type | value)       string = u64 len | bytes (UTF-8)
//! tensor_count × (string name | u32 n_dims | n_dims × u64 ne | u32 ggml_type | u64 offset)
//! padding to `alignment` | tensor data (offsets relative to here)
//! ```
//!
//! `ne[0]` is the innermost (contiguous) dimension: a PyTorch `(out, in)` matrix is `ne = [in,
//! out]`. Parsing reads from a byte slice and checks every length against what is left, so a
//! hostile or truncated file is an error naming what was wrong, never a panic or a huge
//! allocation.

mod quant;
pub mod write;

pub use quant::{dequantize, f16_to_f32, f32_to_f16, GgmlType};
pub use write::GgufWriter;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GgufError {
    #[error("not a GGUF file (magic {0:02x?})")]
    Magic([u8; 4]),
    #[error("GGUF version {0} (this reader takes 2 and 3)")]
    Version(u32),
    #[error("truncated at byte {at}: {what} needs {need} bytes, {left} left")]
    Truncated { at: usize, what: &'static str, need: u64, left: usize },
    #[error("metadata {key}: {why}")]
    Metadata { key: String, why: String },
    #[error("tensor {name}: {why}")]
    Tensor { name: String, why: String },
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    /// Any non-negative integer value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's descriptor; `offset` is absolute in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// `ne`, innermost first.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub offset: usize,
    pub bytes: usize,
}

impl TensorInfo {
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file: its metadata and tensor descriptors (the data stays in the caller's bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct Gguf {
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let left = self.bytes.len() - self.at;
        if n > left as u64 {
            return Err(GgufError::Truncated { at: self.at, what, need: n, left });
        }
        let s = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let at = self.at;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| GgufError::Metadata { key: alloc::format!("({what} at byte {at})"), why: "not UTF-8".into() })
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value, GgufError> {
        let bad = |why: String| GgufError::Metadata { key: key.into(), why };
        Ok(match ty {
            0 => Value::U8(self.array::<1>("u8")?[0]),
            1 => Value::I8(self.array::<1>("i8")?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array("u16")?)),
            3 => Value::I16(i16::from_le_bytes(self.array("i16")?)),
            4 => Value::U32(self.u32("u32")?),
            5 => Value::I32(i32::from_le_bytes(self.array("i32")?)),
            6 => Value::F32(f32::from_le_bytes(self.array("f32")?)),
            7 => Value::Bool(self.array::<1>("bool")?[0] != 0),
            8 => Value::String(self.string("string value")?),
            9 if depth == 0 => {
                let (inner, count) = (self.u32("array type")?, self.u64("array length")?);
                // Every element takes at least one byte: a count beyond the bytes left is a lie,
                // refused before anything is allocated for it.
                if count > (self.bytes.len() - self.at) as u64 {
                    return Err(bad(alloc::format!("array of {count} elements in a file with fewer bytes left")));
                }
                (0..count).map(|_| self.value(inner, key, depth + 1)).collect::<Result<_, _>>().map(Value::Array)?
            }
            10 => Value::U64(self.u64("u64")?),
            11 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            12 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
            other => return Err(bad(alloc::format!("value type {other} (nested arrays are not GGUF)"))),
        })
    }
}

impl Gguf {
    /// Parses the header, metadata and tensor descriptors, and checks that every tensor's data
    /// lies inside `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Gguf, GgufError> {
        let mut r = Reader { bytes, at: 0 };
        let magic = r.array::<4>("magic")?;
        if &magic != b"GGUF" {
            return Err(GgufError::Magic(magic));
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version(version));
        }
        let (n_tensors, n_kv) = (r.u64("tensor count")?, r.u64("metadata count")?);
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let ty = r.u32("metadata type")?;
            let value = r.value(ty, &key, 0)?;
            metadata.insert(key, value);
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() && a <= 1 << 20 => a as usize,
                _ => return Err(GgufError::Metadata { key: "general.alignment".into(), why: alloc::format!("{v:?}") }),
            },
        };
        let mut tensors = Vec::new();
        for _ in 0..n_tensors {
            let name = r.string("tensor name")?;
            let bad = |why: String| GgufError::Tensor { name: name.clone(), why };
            let n_dims = r.u32("tensor dimensions")?;
            if n_dims == 0 || n_dims > 4 {
                return Err(bad(alloc::format!("{n_dims} dimensions (1 to 4)")));
            }
            let dims = (0..n_dims).map(|_| r.u64("tensor shape")).collect::<Result<Vec<_>, _>>()?;
            let ty_id = r.u32("tensor type")?;
            let offset = r.u64("tensor offset")?;
            let ty = GgmlType::from_id(ty_id).ok_or_else(|| bad(alloc::format!("unknown ggml type {ty_id}")))?;
            let bytes = ty
                .tensor_bytes(&dims)
                .ok_or_else(|| bad(alloc::format!("shape {dims:?} is empty, overflows or splits a {ty:?} block")))?;
            let (Ok(offset), Ok(bytes)) = (usize::try_from(offset), usize::try_from(bytes)) else {
                return Err(bad("offset or size beyond this machine's address space".into()));
            };
            // `offset` is relative to the data section until the loop below.
            tensors.push(TensorInfo { name, dims, ty, offset, bytes });
        }
        let data_start = r.at.next_multiple_of(alignment);
        for t in &mut tensors {
            let start = (t.offset as u64).checked_add(data_start as u64);
            let end = start.and_then(|s| s.checked_add(t.bytes as u64));
            match (start, end) {
                (Some(s), Some(e)) if e <= bytes.len() as u64 && (t.offset % alignment == 0) => t.offset = s as usize,
                _ => {
                    return Err(GgufError::Tensor {
                        name: t.name.clone(),
                        why: alloc::format!(
                        "data at offset {} + {} bytes lies outside the file ({} bytes) or is misaligned: truncated?",
                        t.offset,
                        t.bytes,
                        bytes.len().saturating_sub(data_start)
                    ),
                    })
                }
            }
        }
        Ok(Gguf { version, metadata, tensors })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's values as f32 (dequantised), row-major with `dims[0]` innermost.
    pub fn dequantize(&self, bytes: &[u8], t: &TensorInfo) -> Result<Vec<f32>, GgufError> {
        let data = bytes.get(t.offset..t.offset + t.bytes).ok_or_else(|| GgufError::Tensor {
            name: t.name.clone(),
            why: "data outside these bytes (not the bytes it was parsed from?)".into(),
        })?;
        dequantize(t.ty, data).ok_or_else(|| GgufError::Tensor {
            name: t.name.clone(),
            why: alloc::format!("type {:?} cannot be dequantised here (supported: {:?})", t.ty, GgmlType::SUPPORTED),
        })
    }
}

#[cfg(test)]
mod tests;
