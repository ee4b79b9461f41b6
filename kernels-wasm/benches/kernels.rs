//! `cargo bench -p kernels-wasm`: every format × backend × thread count on the 125M layout's
//! GEMV shapes, with throughput in ternary weights per second. (`native-host bitnet
//! kernel-bench` prints the same cases as one table, beside an f32 sgemm.)
//!
//! criterion is a dev-dependency on x86-64 hosts only (see Cargo.toml); elsewhere this is empty.

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod imp {
    use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
    use kernels_wasm::bitnet::backend::Backend;
    use kernels_wasm::bitnet::i2s::{I2sLayout, I2sMatrix};
    use kernels_wasm::bitnet::pool::Pool;
    use kernels_wasm::bitnet::random::Rng;
    use kernels_wasm::bitnet::threads::{i2s_gemv, lut_gemv};
    use kernels_wasm::bitnet::tl1::Tl1Matrix;
    use kernels_wasm::bitnet::tl2::Tl2Matrix;

    const SHAPES: [(usize, usize); 3] = [(768, 3072), (3072, 768), (768, 768)];

    fn gemv(c: &mut Criterion) {
        let pools: Vec<Pool> = [1, 2].into_iter().map(|n| Pool::new(n).expect("threads")).collect();
        for (m, k) in SHAPES {
            let mut rng = Rng::new((m * 31 + k) as u64);
            let t = rng.ternary(m, k);
            let x = rng.f32s(k, 1.0);
            let mut y = vec![0f32; m];
            let i2s = I2sMatrix::pack(&t, I2sLayout::X86).expect("K is a multiple of 128");
            let tl1 = Tl1Matrix::pack(&t).expect("shape tiles");
            let tl2 = Tl2Matrix::pack(&t).expect("shape tiles");
            let mut group = c.benchmark_group(format!("gemv {m}x{k}"));
            group.throughput(Throughput::Elements((m * k) as u64));
            for pool in &pools {
                for backend in Backend::available() {
                    let id = |f: &str| BenchmarkId::new(f, format!("{} x{}", backend.name(), pool.threads()));
                    group.bench_function(id("I2_S"), |b| b.iter(|| i2s_gemv(&i2s, &x, backend, pool, &mut y)));
                    if backend != Backend::Avx512 {
                        group.bench_function(id("TL1"), |b| b.iter(|| lut_gemv(&tl1, &x, backend, pool, &mut y)));
                    }
                    group.bench_function(id("TL2"), |b| b.iter(|| lut_gemv(&tl2, &x, backend, pool, &mut y)));
                }
            }
            group.finish();
        }
    }

    criterion_group!(benches, gemv);

    pub fn run() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}

fn main() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    imp::run();
}
