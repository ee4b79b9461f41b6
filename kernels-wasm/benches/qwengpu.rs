//! `cargo bench -p kernels-wasm --bench qwengpu`: launches of suite kernels on the compiled
//! layers (one thread, lockstep off), with throughput in machine steps per second.
//! (`native-host qwengpu bench` prints the whole suite as one table.)

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod imp {
    use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
    use kernels_wasm::qwengpu::compiled::Compiled;
    use kernels_wasm::qwengpu::isa::MachineSpec;
    use kernels_wasm::qwengpu::run::Runner;
    use kernels_wasm::qwengpu::suite::kernels;

    fn compiled(c: &mut Criterion) {
        let spec = MachineSpec::default();
        let mut runner = Runner::new(Compiled::new(spec).expect("the default machine compiles"));
        runner.lockstep = false;
        let mut group = c.benchmark_group("qwengpu compiled layers");
        group.sample_size(10);
        for k in kernels().into_iter().filter(|k| ["vadd", "collatz", "reduce_shared", "divmod"].contains(&k.name)) {
            let (kernel, p, _) = k.machine(k.ptx, &spec).expect("suite kernels lower");
            let steps = runner.launch(&kernel.program, &p.memory, &p.launch, 1_000_000).expect("runs").steps;
            group.throughput(Throughput::Elements(steps));
            group.bench_function(BenchmarkId::new("launch", k.name), |b| {
                b.iter(|| runner.launch(&kernel.program, &p.memory, &p.launch, 1_000_000).expect("runs"))
            });
        }
        group.finish();
    }

    criterion_group!(benches, compiled);

    pub fn run() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}

fn main() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    imp::run();
}
