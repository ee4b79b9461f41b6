//! `cargo xtask test`: every test. Native (`cargo test --workspace`), wasm in headless Chromium
//! (wasm-bindgen-test), the NEON kernels on aarch64 under qemu, the ESP32 node program built for
//! riscv32imc (no_std), the AVX-512 kernels (natively or
//! under Miri), and end to end (the real page, the real bridge, headless Chromium driven
//! by playwright-core). Every suite runs even if an earlier one failed; the summary says which.

use crate::procs::{self, Proc};
use crate::serve::build_native_host;
use crate::setup::{self, For};
use crate::{root, step};
use anyhow::{bail, Result};
use std::process::Command;
use std::time::{Duration, Instant};

/// Ports of the e2e stack, away from `cargo xtask serve`'s so both can run at once.
const E2E_BRIDGE_PORT: u16 = 18787;
const E2E_WEB_PORT: u16 = 18080;

/// The suites, in the order they run.
const SUITES: [&str; 10] =
    ["native", "wasm", "neon", "esp32", "avx512", "e2e", "fuzz", "spliced-suite", "gpu-suite", "gpu-suite-chromium"];
/// Run only when named with `--only`: the instrumented fuzz build would push a fresh machine's
/// run past an hour (the native suite replays the same corpora without libFuzzer), and the
/// spliced model through all 49 suite kernels takes minutes natively and longer in Chromium (the
/// default suites run seven kernels' first steps in both), and on lavapipe over an hour (the
/// default suites run two kernels natively and one in Chromium), on SwiftShader in Chromium
/// hours.
const ON_REQUEST: [&str; 4] = ["fuzz", "spliced-suite", "gpu-suite", "gpu-suite-chromium"];

#[derive(clap::Args)]
pub struct Args {
    /// Run only these suites, comma-separated: native, wasm, neon, esp32, avx512, e2e, fuzz,
    /// spliced-suite, gpu-suite, gpu-suite-chromium [default: all but fuzz and the three
    /// whole-suite campaigns].
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Seconds of fuzzing per target in the fuzz suite.
    #[arg(long, default_value_t = crate::fuzz::SHORT_RUN_S)]
    fuzz_seconds: u32,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(bad) = args.only.iter().find(|s| !SUITES.contains(&s.as_str())) {
        bail!("--only {bad}: the suites are {}", SUITES.join(", "));
    }
    let want = |suite: &str| {
        if args.only.is_empty() {
            !ON_REQUEST.contains(&suite)
        } else {
            args.only.iter().any(|s| s == suite)
        }
    };
    let tools = setup::prerequisites(For::Test)?;
    procs::catch_signals();
    let mut results: Vec<(&str, Duration, Result<()>)> = Vec::new();

    if want("native") {
        step("native tests: cargo test --workspace");
        let t = Instant::now();
        let tokenizer = tools.qwen3_tokenizer.as_ref().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let smollm2 = tools.smollm2.to_string_lossy().into_owned();
        let native = cargo(
            &["test", "--workspace"],
            &[("SUBSTRATES_QWEN3_TOKENIZER", tokenizer.as_str()), ("SUBSTRATES_SMOLLM2_GGUF", smollm2.as_str())],
        );
        results.push(("native (cargo test --workspace)", t.elapsed(), native));
    }

    let runner = tools.wasm_bindgen_test_runner.to_string_lossy().into_owned();
    let in_chromium =
        [("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER", runner.as_str()), ("CHROMEDRIVER", "/usr/bin/chromedriver")];
    if want("wasm") {
        step("wasm tests in headless Chromium (WebGPU on): cargo test --target wasm32-unknown-unknown -p kernels-wasm -p web --features kernels-wasm/gpu");
        let t = Instant::now();
        let wasm = cargo(
            &[
                "test",
                "--target",
                "wasm32-unknown-unknown",
                "-p",
                "kernels-wasm",
                "-p",
                "web",
                "--features",
                "kernels-wasm/gpu",
            ],
            &in_chromium,
        );
        results.push(("wasm (wasm-bindgen-test, Chromium)", t.elapsed(), wasm));
    }

    if want("neon") {
        step("NEON kernels on aarch64 under qemu: cargo test --target aarch64-unknown-linux-gnu -p kernels-wasm --lib");
        let t = Instant::now();
        // The compiled qwenGPU suite and the second machine's limb layers, register file, executor
        // and the splice's kernel runs (launches, the chat) have no architecture-specific code
        // (the layers rely on f32 exp only where it overflows or underflows); under qemu they
        // would only be slow (the launches and the chat took 500 s of the phase's 572, 2026-12-06).
        let neon = cargo(
            &[
                "test",
                "--target",
                setup::AARCH64,
                "-p",
                "kernels-wasm",
                "--lib",
                "--",
                "--skip",
                "qwengpu::run::",
                "--skip",
                "qwengpu::limb",
                "--skip",
                "qwengpu::register_file",
                "--skip",
                "qwengpu::exec",
                "--skip",
                "qwengpu::splice::tests::the_spliced_model_runs",
                "--skip",
                "qwengpu::splice::tests::launched_kernels",
                "--skip",
                "qwengpu::splice::tests::kernels_run_one_after_the_other",
                "--skip",
                "qwengpu::splice::tests::a_launch_stops",
                "--skip",
                "qwengpu::splice::tests_machine::",
                "--skip",
                "qwengpu::splice::chat::",
            ],
            &[],
        );
        results.push(("NEON (aarch64 under qemu-user)", t.elapsed(), neon));
    }

    if want("esp32") {
        step("ESP32 node program for a microcontroller: cargo build --target riscv32imc-unknown-none-elf");
        let t = Instant::now();
        // The library without std, then the node program linked into a bare-metal image.
        let mcu = cargo(&["build", "-p", "kernels-wasm", "--no-default-features", "--target", setup::RISCV32], &[])
            .and_then(|()| {
                cargo(
                    &[
                        "build",
                        "--release",
                        "-p",
                        "kernels-wasm",
                        "--no-default-features",
                        "--features",
                        "node-image",
                        "--example",
                        "node_image",
                        "--target",
                        setup::RISCV32,
                    ],
                    &[],
                )
            });
        results.push(("ESP32 node program (riscv32imc, no_std)", t.elapsed(), mcu));
    }

    if want("avx512") {
        step("AVX-512 kernels (I2_S VNNI, TL2 VBMI)");
        let t = Instant::now();
        let avx512 = avx512();
        results.push(("AVX-512 kernels", t.elapsed(), avx512));
    }

    if want("e2e") {
        step("end-to-end tests: playground + bridge in headless Chromium");
        let t = Instant::now();
        let e2e = e2e(&tools);
        results.push(("end to end (node --test, playwright-core)", t.elapsed(), e2e));
    }

    if want("spliced-suite") {
        const TEST: &str = "the_spliced_model_runs_the_suite";
        step("the spliced model through all 49 suite kernels, natively (release) and in headless Chromium");
        let t = Instant::now();
        let native =
            cargo(&["test", "--release", "-p", "kernels-wasm", "--lib", "--", "--ignored", TEST, "--nocapture"], &[]);
        results.push(("spliced suite, native (release)", t.elapsed(), native));
        let t = Instant::now();
        let args =
            ["test", "--target", "wasm32-unknown-unknown", "-p", "kernels-wasm", "--lib", "--", "--include-ignored"];
        let wasm = cargo(&[&args[..], &[TEST]].concat(), &in_chromium);
        results.push(("spliced suite, Chromium (wasm-bindgen-test)", t.elapsed(), wasm));
    }

    if want("gpu-suite") {
        // About 90 minutes on lavapipe with 2 cores (22–25 positions a second, 2026-12-07).
        step("the second machine on WebGPU (lavapipe) through all 49 suite kernels in one context");
        let t = Instant::now();
        const TEST: &str = "gpu::tests::the_machine_runs_kernels_in_lockstep";
        let args = ["test", "--release", "-p", "kernels-wasm", "--features", "gpu", "--lib", "--", TEST, "--nocapture"];
        let native = cargo(&args, &[("QWENGPU_MACHINE_KERNELS", "all")]);
        results.push(("the machine on WebGPU, the whole suite (lavapipe, release)", t.elapsed(), native));
    }

    if want("gpu-suite-chromium") {
        // About 10 positions a second on SwiftShader (warp_broadcast, 2026-12-07): the suite's
        // 113,708 positions take three to four hours, so the test binary's limit is raised.
        step("the second machine on WebGPU (SwiftShader in headless Chromium) through all 49 suite kernels");
        let t = Instant::now();
        const TEST: &str = "gpu::web_tests::the_machine_runs_a_kernel_in_lockstep";
        let args = ["test", "--target", "wasm32-unknown-unknown", "-p", "kernels-wasm", "--features", "gpu", "--lib"];
        let env =
            [&in_chromium[..], &[("QWENGPU_MACHINE_KERNELS", "all"), ("WASM_BINDGEN_TEST_TIMEOUT", "21600")]].concat();
        let wasm = cargo(&[&args[..], &["--", TEST, "--nocapture"]].concat(), &env);
        results.push(("the machine on WebGPU, the whole suite (SwiftShader, Chromium)", t.elapsed(), wasm));
    }

    if want("fuzz") {
        step("fuzzing: every target's corpus and a short coverage-guided run (cargo fuzz)");
        let t = Instant::now();
        let fuzz = crate::fuzz::run(args.fuzz_seconds);
        results.push(("fuzz (cargo fuzz, libFuzzer)", t.elapsed(), fuzz));
    }

    step("summary");
    let mut failed = 0;
    for (name, took, result) in &results {
        match result {
            Ok(()) => println!("  PASS  {name}  ({:.0?})", took),
            Err(e) => {
                failed += 1;
                println!("  FAIL  {name}  ({:.0?}): {e:#}", took)
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} test suites failed", results.len());
    }
    Ok(())
}

fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let what = format!("cargo {}", args.join(" "));
    let status =
        crate::logged::status(&what, Command::new("cargo").args(args).envs(env.iter().copied()).current_dir(root()))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    Ok(())
}

/// The AVX-512 kernels run natively in the native suite where the CPU has AVX-512; the BitNet
/// tests then run once more with AVX-512 off, so the AVX2 paths (what AVX2-only CPUs run) are
/// exercised end to end; where it has AMX too, the whole-model tests run once more with AMX
/// off, so the VNNI GEMM (what Zen 4 runs) is too. Elsewhere Miri interprets them (it implements the intrinsics
/// they use) on small shapes, against the plain forms; the I2_S test is compiled to insist that
/// the AVX-512 backend was among those it ran.
fn avx512() -> Result<()> {
    if setup::host_has_avx512() {
        println!("this CPU has AVX-512: the native suite ran those kernels");
        println!("the BitNet tests again on the AVX2 paths (SUBSTRATES_NO_AVX512=1)");
        cargo(&["test", "-p", "kernels-wasm", "--lib", "--", "bitnet::"], &[("SUBSTRATES_NO_AVX512", "1")])?;
        if setup::host_has_amx() {
            println!("it has AMX too: the model tests again on the VNNI GEMM (SUBSTRATES_NO_AMX=1)");
            return cargo(
                &["test", "-p", "kernels-wasm", "--lib", "--", "bitnet::model::", "bitnet::i2s::"],
                &[("SUBSTRATES_NO_AMX", "1")],
            );
        }
        return Ok(());
    }
    println!("this CPU has no AVX-512: running those kernels under Miri");
    setup::miri()?;
    let features = "-C target-feature=+avx2,+fma,+f16c,+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512vbmi,+avx512vnni";
    cargo(
        &[
            "+nightly",
            "miri",
            "test",
            "-p",
            "kernels-wasm",
            "--target-dir",
            "target/miri",
            "--lib",
            "--",
            // The I2_S and TL2 tiles (streaming and unpacked); attention's eight-key scores and
            // 64-wide sums, for one query or two; the element-wise loops compiled for AVX-512
            // (`wide_fn!`); the F16, Q8_0 and Q6_K output-layer kernels. AMX is inline
            // assembly, which Miri cannot run: it is tested natively where the CPU has it.
            "wide_kernels_match_scalar_small",
            "unpacked_blocks_equal",
            "the_blocked_",
            "the_softmax_and_silu",
            "the_simd_output_layer",
            "the_q8_0_kernels",
            "the_q6_k_kernel",
        ],
        // Miri otherwise perturbs some float intrinsics by an ulp or so at random, and these
        // tests compare bits.
        &[("RUSTFLAGS", features), ("MIRIFLAGS", "-Zmiri-deterministic-floats"), ("SUBSTRATES_EXPECT_AVX512", "1")],
    )
}

fn e2e(tools: &setup::Tools) -> Result<()> {
    run_e2e(tools, &root().join("target/e2e/screenshots"), &[], "end-to-end tests failed")
}

/// `cargo xtask screenshots`: the e2e test that visits every tab, run alone, saving its pictures
/// into docs/screenshots (the README's).
pub fn screenshots() -> Result<()> {
    let tools = setup::prerequisites(For::Test)?;
    procs::catch_signals();
    step("screenshots of every tab: the e2e suite's tab tour, into docs/screenshots");
    let failed = "the screenshot test failed; docs/screenshots may be partly updated";
    run_e2e(&tools, &root().join("docs/screenshots"), &["--test-name-pattern=screenshot"], failed)
}

/// The e2e tests (`node --test` in web/e2e, with `extra` arguments) against a fresh build of the
/// bridge and the page, screenshots into `shots`; `failed` says what a failure means.
fn run_e2e(tools: &setup::Tools, shots: &std::path::Path, extra: &[&str], failed: &str) -> Result<()> {
    let native_host = build_native_host()?;
    procs::ensure_free(E2E_BRIDGE_PORT, "another `cargo xtask test` running?")?;
    std::fs::create_dir_all(shots)?;
    let mut web = serve_e2e_page(tools)?;
    let root = root();
    // The test itself starts, stops and restarts the bridge (reconnection is part of what it checks).
    let status = crate::logged::status(
        "node --test (web/e2e)",
        Command::new("node")
            .args(["--test", "--test-concurrency=1"])
            .args(extra)
            .current_dir(root.join("web/e2e"))
            .env("E2E_WEB_URL", format!("http://127.0.0.1:{E2E_WEB_PORT}"))
            .env("E2E_BRIDGE_PORT", E2E_BRIDGE_PORT.to_string())
            .env("NATIVE_HOST_BIN", &native_host)
            .env("E2E_SCREENSHOTS", shots)
            .env("E2E_MODELS_DIR", tools.smollm2.parent().unwrap_or(&root)),
    );
    web.stop();
    let status = status?;
    if !status.success() {
        bail!("{failed} ({status})");
    }
    println!("screenshots: {}", shots.display());
    Ok(())
}

/// `trunk serve` of the playground on the e2e port (the same build as Trunk.toml), ready to load.
fn serve_e2e_page(tools: &setup::Tools) -> Result<Proc> {
    procs::ensure_free(E2E_WEB_PORT, "another `cargo xtask test` running?")?;
    let root = root();
    let dir = root.join("target/e2e");
    std::fs::create_dir_all(&dir)?;
    // The same playground as Trunk.toml, on the e2e ports. Absolute paths: trunk resolves them
    // against the config's own directory.
    let config = format!(
        "[build]\ntarget = {index:?}\ndist = {dist:?}\n\n[watch]\nignore = [{target:?}]\n\n[serve]\naddresses = [\"127.0.0.1\"]\nport = {E2E_WEB_PORT}\n\n[[proxy]]\nbackend = \"ws://127.0.0.1:{E2E_BRIDGE_PORT}/ws\"\nws = true\n",
        index = root.join("web/index.html"),
        dist = root.join("target/dist"),
        target = root.join("target"),
    );
    std::fs::write(dir.join("Trunk.toml"), config)?;
    let mut web = Proc::spawn(
        "trunk",
        Command::new(&tools.trunk)
            .args(["serve", "--offline", "--no-autoreload", "--config"])
            .arg(dir.join("Trunk.toml"))
            .current_dir(&root)
            .env("PATH", procs::path_with(&tools.trunk)),
    )?;
    procs::wait_http_ok(&mut web, E2E_WEB_PORT, Duration::from_secs(30 * 60))?;
    Ok(web)
}

/// `cargo xtask wasm-bench`: the BitNet tab's in-page benchmark (wasm scalar vs simd128) for every
/// format on the 125M layout's shapes, in headless Chromium, printed as a table.
pub fn wasm_bench() -> Result<()> {
    let tools = setup::prerequisites(For::Test)?;
    procs::catch_signals();
    step("serving the playground and timing the kernels in headless Chromium");
    let mut web = serve_e2e_page(&tools)?;
    let status = crate::logged::status(
        "node wasm-bench.mjs",
        Command::new("node")
            .arg("wasm-bench.mjs")
            .current_dir(root().join("web/e2e"))
            .env("E2E_WEB_URL", format!("http://127.0.0.1:{E2E_WEB_PORT}")),
    );
    web.stop();
    if !status?.success() {
        bail!("the wasm benchmark failed");
    }
    Ok(())
}
