//! Tiles and shape rules of the LUT formats, with bitnet.cpp's names: a weight matrix of M rows
//! and K columns is cut into row tiles of **BM** rows; each row tile is walked along K in
//! blocks of **BK** columns (the int16 partial sums are widened to int32 after every block);
//! inside a tile, **bm** rows are processed together (one SIMD register of table results).
//!
//! bitnet.cpp's `setup_env.py` fixes BM/BK/bm per shape for the models it ships kernels for
//! ([`preset`]); for other shapes [`Tile::choose`] picks values that satisfy the same rules.

use super::BitnetError;
use alloc::format;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LutFormat {
    /// 2 weights → 4-bit index (ARM in bitnet.cpp).
    Tl1,
    /// 3 weights → 4-bit magnitude + sign bit (x86 in bitnet.cpp).
    Tl2,
}

impl LutFormat {
    pub fn name(self) -> &'static str {
        match self {
            LutFormat::Tl1 => "TL1",
            LutFormat::Tl2 => "TL2",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// Rows per row tile (`BM`).
    pub bm_tile: usize,
    /// Columns per K block (`BK`).
    pub bk: usize,
    /// Rows processed together inside a tile (`bm`).
    pub bm: usize,
}

/// (format, M, K, BM, BK, bm) as bitnet.cpp's `setup_env.py` passes them to its kernel
/// generators (M output rows, K inputs).
const PRESETS: &[(LutFormat, usize, usize, usize, usize, usize)] = &[
    // bitnet_b1_58-large (700M)
    (LutFormat::Tl1, 1536, 4096, 256, 128, 32),
    (LutFormat::Tl1, 1536, 1536, 128, 64, 64),
    (LutFormat::Tl1, 4096, 1536, 256, 128, 32),
    (LutFormat::Tl2, 1536, 4096, 256, 96, 32),
    (LutFormat::Tl2, 1536, 1536, 128, 192, 32),
    (LutFormat::Tl2, 4096, 1536, 256, 96, 32),
    // bitnet_b1_58-3B (also BitNet-b1.58-2B-4T)
    (LutFormat::Tl1, 3200, 8640, 160, 64, 32),
    (LutFormat::Tl1, 3200, 3200, 320, 128, 64),
    (LutFormat::Tl1, 8640, 3200, 320, 64, 32),
    (LutFormat::Tl2, 3200, 8640, 160, 96, 32),
    (LutFormat::Tl2, 3200, 3200, 320, 96, 32),
    (LutFormat::Tl2, 8640, 3200, 320, 96, 32),
    // Llama3-8B-1.58 (also the Falcon3 family)
    (LutFormat::Tl1, 14336, 4096, 256, 128, 32),
    (LutFormat::Tl1, 4096, 14336, 128, 64, 64),
    (LutFormat::Tl1, 1024, 4096, 256, 128, 32),
    (LutFormat::Tl1, 4096, 4096, 128, 64, 64),
    (LutFormat::Tl2, 14336, 4096, 256, 96, 32),
    (LutFormat::Tl2, 4096, 14336, 128, 96, 32),
    (LutFormat::Tl2, 1024, 4096, 256, 96, 32),
    (LutFormat::Tl2, 4096, 4096, 128, 96, 32),
];

/// Every preset as (format, M, K, tile).
pub fn presets() -> impl Iterator<Item = (LutFormat, usize, usize, Tile)> {
    PRESETS.iter().map(|p| (p.0, p.1, p.2, Tile { bm_tile: p.3, bk: p.4, bm: p.5 }))
}

/// bitnet.cpp's preset for a shape, if it ships one.
pub fn preset(format: LutFormat, m: usize, k: usize) -> Option<Tile> {
    PRESETS.iter().find(|p| p.0 == format && p.1 == m && p.2 == k).map(|p| Tile { bm_tile: p.3, bk: p.4, bm: p.5 })
}

/// BK ≤ 256 keeps TL1's int16 block sums exact: 128 pairs × |a0| + |a1| ≤ 255 → ≤ 32,640.
pub const TL1_MAX_BK: usize = 256;
/// TL2's BK holds whole weight triples and its remainder whole 32-column TL1-style groups.
pub const TL2_BKS: [usize; 2] = [192, 96];
const BM_CHOICES: [usize; 6] = [256, 160, 128, 96, 64, 32];

impl Tile {
    /// The preset for this shape, else the largest tiles the format's rules allow.
    pub fn choose(format: LutFormat, m: usize, k: usize) -> Result<Tile, BitnetError> {
        if let Some(t) = preset(format, m, k) {
            return Ok(t);
        }
        let refuse = |why: alloc::string::String| BitnetError::Shape { format: format.name(), m, k, why };
        let bm_tile = BM_CHOICES
            .into_iter()
            .find(|b| m.is_multiple_of(*b))
            .ok_or_else(|| refuse(format!("M must be a multiple of 32 (a tile holds bm = 32 rows); {m} is not")))?;
        let bk = match format {
            LutFormat::Tl1 => [256, 128, 64, 32]
                .into_iter()
                .find(|b| k.is_multiple_of(*b))
                .ok_or_else(|| refuse(format!("K must be a multiple of 32 for TL1; {k} is not")))?,
            LutFormat::Tl2 => TL2_BKS.into_iter().find(|b| k >= *b && (k % b).is_multiple_of(32)).ok_or_else(|| {
                refuse(format!(
                    "K must leave a remainder that is a multiple of 32 after blocks of 192 or 96; {k} does not"
                ))
            })?,
        };
        let tile = Tile { bm_tile, bk, bm: 32 };
        tile.check(format, m, k)?;
        Ok(tile)
    }

    /// The rules bitnet.cpp's kernels rely on. A shape that breaks one is refused, never
    /// computed wrongly.
    pub fn check(&self, format: LutFormat, m: usize, k: usize) -> Result<(), BitnetError> {
        let refuse = |why: alloc::string::String| Err(BitnetError::Shape { format: format.name(), m, k, why });
        if m == 0 || k == 0 {
            return refuse("empty matrix".into());
        }
        if !m.is_multiple_of(self.bm_tile) {
            return refuse(format!("M must be a multiple of BM = {}", self.bm_tile));
        }
        if !self.bm_tile.is_multiple_of(self.bm) {
            return refuse(format!("BM = {} must be a multiple of bm = {}", self.bm_tile, self.bm));
        }
        match format {
            LutFormat::Tl1 => {
                if !matches!(self.bm, 32 | 64) {
                    return refuse(format!("TL1 needs bm in {{32, 64}}, not {}", self.bm));
                }
                if !self.bk.is_multiple_of(2) || self.bk > TL1_MAX_BK || !k.is_multiple_of(self.bk) {
                    return refuse(format!("TL1 needs an even BK ≤ {TL1_MAX_BK} dividing K (BK = {})", self.bk));
                }
            }
            LutFormat::Tl2 => {
                if self.bm != 32 {
                    return refuse(format!("TL2 needs bm = 32, not {}", self.bm));
                }
                if !TL2_BKS.contains(&self.bk) || !(k % self.bk).is_multiple_of(32) {
                    return refuse(format!("TL2 needs BK of 96 or 192 with (K % BK) % 32 == 0 (BK = {})", self.bk));
                }
            }
        }
        Ok(())
    }

    /// TL2 splits K: `three_k` columns through the 3-weight tables, the rest (a multiple of 32)
    /// through 2-weight tables.
    pub fn tl2_split(&self, k: usize) -> (usize, usize) {
        let three_k = k / self.bk * self.bk;
        (three_k, k - three_k)
    }
}

/// The float type of bitnet.cpp's scales (`bitnet_float_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatType {
    F32,
    F16,
}

/// `ggml_bitnet_mul_mat_get_wsize`: bytes of workspace for the tables (int8), the scales and,
/// with f16 scales, a conversion buffer; rounded up to 64. `ne10` = K, `ne11` = activation rows,
/// `ne01` = M.
pub fn wsize(format: LutFormat, ne10: usize, ne11: usize, ne01: usize, float: FloatType) -> usize {
    let fsize = match float {
        FloatType::F32 => 4,
        FloatType::F16 => 2,
    };
    let mut w = match format {
        LutFormat::Tl1 => ne10 * ne11 * 15 + ne11 * 2 * fsize,
        LutFormat::Tl2 => ne10 * ne11 * 11 + 2 * ne11 * 2 * fsize,
    };
    if fsize == 2 {
        w += ne10.max(ne01) * ne11 * fsize;
    }
    (w.saturating_sub(1) / 64 + 1) * 64
}

/// The ggml tensor types `can_mul_mat` looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Tl1,
    Tl2,
    I2S,
}

/// Which of bitnet.cpp's two builds is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `GGML_BITNET_ARM_TL1`.
    ArmTl1,
    /// `GGML_BITNET_X86_TL2`.
    X86Tl2,
}

/// `ggml_bitnet_can_mul_mat`: the weight type is the build's LUT type or Q4_0, activations and
/// output are F32; the ARM build also takes only one activation row.
pub fn can_mul_mat(arch: Arch, src0: GgmlType, src1: GgmlType, dst: GgmlType, src1_ne1: usize) -> bool {
    let supported = match arch {
        Arch::ArmTl1 => matches!(src0, GgmlType::Tl1 | GgmlType::Q4_0),
        Arch::X86Tl2 => matches!(src0, GgmlType::Tl2 | GgmlType::Q4_0),
    };
    supported && src1 == GgmlType::F32 && dst == GgmlType::F32 && (arch != Arch::ArmTl1 || src1_ne1 <= 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The seed's shapes and the dummy-model layouts: every one gets valid tiles.
    pub const SHAPES: [(usize, usize); 19] = [
        (1536, 4096),
        (1536, 1536),
        (4096, 1536),
        (3200, 8640),
        (3200, 3200),
        (8640, 3200),
        (14336, 4096),
        (4096, 14336),
        (1024, 4096),
        (4096, 4096),
        (768, 3072),
        (3072, 768),
        (768, 768),
        (1024, 3072),
        (3072, 1024),
        (1024, 1024),
        (1536, 9216),
        (9216, 1536),
        (2048, 3584),
    ];

    #[test]
    fn every_listed_shape_tiles_in_both_formats() {
        for (m, k) in SHAPES {
            for f in [LutFormat::Tl1, LutFormat::Tl2] {
                let t = Tile::choose(f, m, k).unwrap_or_else(|e| panic!("{e}"));
                t.check(f, m, k).unwrap();
                assert_eq!(m % t.bm_tile, 0);
                if f == LutFormat::Tl2 {
                    let (three, two) = t.tl2_split(k);
                    assert_eq!((three % t.bk, two % 32, three + two), (0, 0, k), "{m}x{k} {t:?}");
                }
            }
        }
        assert_eq!(Tile::choose(LutFormat::Tl1, 3200, 8640).unwrap(), Tile { bm_tile: 160, bk: 64, bm: 32 });
    }

    #[test]
    fn shapes_a_format_cannot_take_are_refused() {
        assert!(Tile::choose(LutFormat::Tl1, 100, 4096).is_err());
        assert!(Tile::choose(LutFormat::Tl1, 128, 100).is_err());
        assert!(Tile::choose(LutFormat::Tl2, 128, 80).is_err()); // smaller than a block
        assert!(Tile::choose(LutFormat::Tl2, 128, 200).is_err()); // 200 % 192 = 8, 200 % 96 = 8
        let bad = Tile { bm_tile: 128, bk: 96, bm: 64 };
        let err = bad.check(LutFormat::Tl2, 256, 768).unwrap_err();
        assert!(format!("{err}").contains("bm = 32"), "{err}");
        assert!(Tile { bm_tile: 128, bk: 512, bm: 32 }.check(LutFormat::Tl1, 128, 1024).is_err());
    }

    #[test]
    fn workspace_sizes_follow_the_formula() {
        // TL1, K = 4096, one row, f32: 4096·15 + 8 = 61,448 → 61,504 (next multiple of 64).
        assert_eq!(wsize(LutFormat::Tl1, 4096, 1, 1536, FloatType::F32), 61_504);
        // TL2: 4096·11 + 16 = 45,072 → 45,120.
        assert_eq!(wsize(LutFormat::Tl2, 4096, 1, 1536, FloatType::F32), 45_120);
        // f16 adds max(K, M)·N·2: 4096·11 + 8 + 4096·2 = 53,256 → 53,312.
        assert_eq!(wsize(LutFormat::Tl2, 4096, 1, 1536, FloatType::F16), 53_312);
        for n in 1..5 {
            assert_eq!(wsize(LutFormat::Tl1, 768, n, 768, FloatType::F32) % 64, 0);
        }
    }

    #[test]
    fn can_mul_mat_rules() {
        use GgmlType::*;
        assert!(can_mul_mat(Arch::ArmTl1, Tl1, F32, F32, 1));
        assert!(!can_mul_mat(Arch::ArmTl1, Tl1, F32, F32, 2));
        assert!(can_mul_mat(Arch::ArmTl1, Q4_0, F32, F32, 0));
        assert!(!can_mul_mat(Arch::ArmTl1, Tl2, F32, F32, 1));
        assert!(can_mul_mat(Arch::X86Tl2, Tl2, F32, F32, 8));
        assert!(!can_mul_mat(Arch::X86Tl2, Tl2, F16, F32, 1));
        assert!(!can_mul_mat(Arch::X86Tl2, Tl2, F32, F16, 1));
        assert!(!can_mul_mat(Arch::X86Tl2, I2S, F32, F32, 1));
    }
}
