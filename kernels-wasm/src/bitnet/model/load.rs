//! A BitNet model from a GGUF file as bitnet.cpp writes it. The ternary matrices and the
//! embedding table stay where they are in the file's buffer (a memory map, natively); only the
//! norms are copied. The tensor layout is in [`super::build`].

use super::build::{self, Source};
use super::config::Config;
use super::forward::Model;
use super::table::Table;
use super::tokenizer::Tokenizer;
use super::ModelError;
use crate::bitnet::blob::{Blob, Shared};
use crate::gguf::{GgmlType, Gguf};
use alloc::vec::Vec;

pub use build::block_tensor;

/// Loads a model from the whole file in `data`.
pub fn load(data: Shared) -> Result<Model, ModelError> {
    let g = Gguf::parse((*data).as_ref())?;
    let c = Config::from_gguf(&g)?;
    let mut f = File { g: &g, data: &data };
    let embed = table(&mut f, "token_embd.weight", c.vocab, c.dim)?;
    let output = match g.tensor("output.weight") {
        Some(_) => Some(table(&mut f, "output.weight", c.vocab, c.dim)?),
        None => None,
    };
    let blocks = (0..c.layers).map(|i| build::block(&mut f, &c, i)).collect::<Result<Vec<_>, _>>()?;
    Ok(Model {
        embed,
        output,
        blocks,
        output_norm: build::norm(&mut f, "output_norm.weight", c.dim, c.eps)?,
        tokenizer: Tokenizer::from_gguf(&g)?,
        config: c,
    })
}

fn table(f: &mut File, name: &str, rows: usize, cols: usize) -> Result<Table, ModelError> {
    let (ty, data) = f.take(name, Some(&[cols as u64, rows as u64]))?;
    Table::new(name, rows, cols, ty, data)
}

/// Tensors as windows of the file's shared buffer.
pub(crate) struct File<'a> {
    pub g: &'a Gguf,
    pub data: &'a Shared,
}

impl Source for File<'_> {
    fn take(&mut self, name: &str, dims: Option<&[u64]>) -> Result<(GgmlType, Blob), ModelError> {
        let t = self.g.tensor(name).ok_or_else(|| ModelError::tensor(name, "missing"))?;
        if let Some(dims) = dims.filter(|d| t.dims != *d) {
            return Err(ModelError::tensor(name, alloc::format!("shape {:?}, expected {dims:?}", t.dims)));
        }
        let blob = Blob::shared(self.data.clone(), t.offset..t.offset + t.bytes).ok_or_else(|| {
            ModelError::tensor(name, alloc::format!("its {} bytes run past the end of the file (truncated?)", t.bytes))
        })?;
        Ok((t.ty, blob))
    }

    fn has(&self, name: &str) -> bool {
        self.g.tensor(name).is_some()
    }
}
