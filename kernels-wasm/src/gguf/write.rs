//! Writes GGUF v3: what [`super::Gguf::parse`] reads (for generated models and tests).

use super::{GgmlType, Value};
use alloc::string::String;
use alloc::vec::Vec;

/// A GGUF file being assembled: metadata in insertion order, then tensors.
#[derive(Debug, Default, Clone)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

/// Tensor data alignment (`general.alignment`'s default).
pub const ALIGNMENT: usize = 32;

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(items) => {
            // An empty array's element type is irrelevant; u8 is as good as any.
            out.extend_from_slice(&items.first().map(type_id).unwrap_or(0).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
    }
}

impl GgufWriter {
    pub fn meta(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.push((key.into(), value));
        self
    }

    /// Adds a tensor of already-encoded `data`; `dims` innermost first.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.into(), dims.to_vec(), ty, data));
        self
    }

    /// Adds an f32 tensor.
    pub fn f32_tensor(&mut self, name: &str, dims: &[u64], values: &[f32]) -> &mut Self {
        self.tensor(name, dims, GgmlType::F32, values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let plan: Vec<_> = self.tensors.iter().map(|(n, d, t, data)| (n.clone(), d.clone(), *t, data.len())).collect();
        let mut out = header(&self.metadata, &plan);
        for (_, _, _, data) in &self.tensors {
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(ALIGNMENT), 0);
        }
        out
    }
}

/// Everything before the tensor data: header, metadata, tensor descriptors (`(name, dims, type,
/// bytes)`), padding. The data follows, each tensor padded to [`ALIGNMENT`] bytes (see
/// [`padding`]), so a large file can be written one tensor at a time.
pub fn header(metadata: &[(String, Value)], tensors: &[(String, Vec<u64>, GgmlType, usize)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_string(&mut out, key);
        out.extend_from_slice(&type_id(value).to_le_bytes());
        put_value(&mut out, value);
    }
    let mut offset = 0usize;
    for (name, dims, ty, bytes) in tensors {
        put_string(&mut out, name);
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ty.id().to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        offset = (offset + bytes).next_multiple_of(ALIGNMENT);
    }
    out.resize(out.len().next_multiple_of(ALIGNMENT), 0);
    out
}

/// Zero bytes that follow a tensor of `bytes` bytes.
pub fn padding(bytes: usize) -> usize {
    bytes.next_multiple_of(ALIGNMENT) - bytes
}
