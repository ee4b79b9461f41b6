//! The qwenGPU front end with the host's clang-19: the committed PTX of every suite kernel is
//! what clang produces today, and the compile CLI lowers CUDA and refuses what the machine lacks.

use kernels_wasm::qwengpu::suite;
use native_host::qwengpu::{cuda_to_ptx, kernels_dir};
use std::ffi::OsStr;
use std::process::{Command, Output};

/// `native-host ARGS`, run to the end.
fn native_host(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_native-host")).args(args).output().unwrap()
}

#[test]
fn the_committed_ptx_is_what_clang_produces_today() {
    // Every .cu of assets/kernels/ is in the suite, and the other way round.
    let mut files: Vec<String> = std::fs::read_dir(kernels_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".cu").map(String::from))
        .collect();
    let mut names: Vec<String> = suite::kernels().iter().map(|k| k.name.to_string()).collect();
    files.sort();
    names.sort();
    assert_eq!(files, names);
    for k in suite::kernels() {
        let cu = kernels_dir().join(format!("{}.cu", k.name));
        let ptx = cuda_to_ptx(&cu, &kernels_dir()).unwrap();
        assert!(ptx == k.ptx, "{}: assets/kernels/{}.ptx is stale; regenerate it with clang-19", k.name, k.name);
    }
}

#[test]
fn the_compile_cli_lowers_cuda_and_names_what_it_refuses() {
    let run = |file: &std::path::Path| native_host([OsStr::new("qwengpu"), OsStr::new("compile"), file.as_os_str()]);
    let ok = run(&kernels_dir().join("vadd.cu"));
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let text = String::from_utf8_lossy(&ok.stdout);
    assert!(text.contains("of 32 ROM blocks, 4 parameters"), "{text}");
    let dir = std::env::temp_dir().join(format!("substrates-qwengpu-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let float = dir.join("float.cu");
    std::fs::write(&float, "#include \"qwengpu.h\"\n__global__ void f(float *x) { x[threadIdx.x] *= 2.5f; }\n")
        .unwrap();
    let out = run(&float);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("PTX line") && err.contains("floating point"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_bench_cli_checks_then_times_and_splits_the_time_by_token_kind() {
    let out = native_host(["qwengpu", "bench", "--kernels", "vadd,warp_scan", "--reps", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{text}", String::from_utf8_lossy(&out.stderr));
    for name in ["vadd", "warp_scan"] {
        let row = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} row:\n{text}"));
        assert!(row.ends_with("bit-exact"), "{row}");
    }
    assert!(text.lines().any(|l| l.starts_with("all ")), "{text}");
    // One CTRL and one FETCH per step; several EXEC tokens (lanes × instructions).
    let kinds = text
        .lines()
        .find(|l| l.starts_with("execution phase, time per token by kind:"))
        .unwrap_or_else(|| panic!("no time by kind:\n{text}"));
    assert!(kinds.contains("CTRL ") && kinds.contains("× 1.0 per step, FETCH "), "{kinds}");
    let exec: f64 = kinds
        .split("EXEC ")
        .nth(1)
        .and_then(|r| r.split("× ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no EXEC figure: {kinds}"));
    assert!(exec > 4.0, "{kinds}");
    let unknown = native_host(["qwengpu", "bench", "--kernels", "nosuch"]);
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success() && err.contains("no kernel \"nosuch\" in the suite"), "{err}");
}

#[test]
fn the_nvcc_harnesses_are_written_and_the_recorded_h200_run_still_matches_the_suite() {
    let dir = std::env::temp_dir().join(format!("substrates-nvcc-{}", std::process::id()));
    let out = native_host([OsStr::new("qwengpu"), OsStr::new("nvcc"), OsStr::new("--emit"), dir.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.iter().filter(|n| n.ends_with(".cu")).count(), kernels_wasm::qwengpu::suite::kernels().len());
    assert!(names.contains(&"run.sh".into()) && names.contains(&"qwengpu_nvcc.h".into()), "{names:?}");
    let _ = std::fs::remove_dir_all(&dir);

    // What the H200 printed (assets/fixtures/qwengpu-nvcc/README.md).
    let recorded = kernels_dir().join("../fixtures/qwengpu-nvcc/h200-results.txt");
    let out = native_host([OsStr::new("qwengpu"), OsStr::new("nvcc"), OsStr::new("--compare"), recorded.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("48 of 49 kernels bit-identical") && text.contains("1 more identical where CUDA defines"),
        "{text}"
    );

    let missing = native_host(["qwengpu", "nvcc", "--compare", "/nonexistent/results.txt"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && err.contains("reading /nonexistent/results.txt"), "{err}");
}
