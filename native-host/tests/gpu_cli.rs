//! `native-host gpu bench` on this machine's adapter (Mesa lavapipe under `cargo xtask test`):
//! every row is checked against the CPU, and bad arguments are named.

use std::process::{Command, Output};

fn native_host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_native-host")).args(args).output().unwrap()
}

#[test]
fn the_bench_times_every_format_and_checks_it_against_the_cpu() {
    if std::env::var_os("SUBSTRATES_SKIP_GPU").is_some() {
        eprintln!("SKIPPED (SUBSTRATES_SKIP_GPU is set)");
        return;
    }
    let out = native_host(&[
        "gpu",
        "bench",
        "--shapes",
        "64x256,96x192",
        "--batch",
        "1,3",
        "--iters",
        "2",
        "--qwengpu",
        "vadd",
        "--tokens-per-submit",
        "1,64",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("adapter: "), "{text}");
    // 64x256 takes all three formats, 96x192 TL1 and TL2 (K is not a multiple of 128 for
    // I2_S), each at both batch sizes: ten rows, all equal to the CPU.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("64x256") || l.starts_with("96x192")).collect();
    assert_eq!(rows.len(), 10, "{text}");
    assert!(rows.iter().all(|r| r.ends_with("bit-identical")), "{text}");
    for format in ["I2_S", "TL1", "TL2"] {
        assert!(rows.iter().any(|r| r.split_whitespace().nth(1) == Some(format)), "{format}: {text}");
    }
    // vadd on the compiled qwenGPU layers on the GPU: checked in lockstep, then timed per
    // tokens-per-submission size, each with the same arrays.
    let vadd: Vec<Vec<&str>> =
        text.lines().filter(|l| l.starts_with("vadd")).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(vadd.iter().map(|r| r[3]).collect::<Vec<_>>(), ["1", "64"], "{text}");
    assert!(vadd.iter().all(|r| r[1] == "28" && r.last() == Some(&"bit-exact")), "{text}");
}

#[test]
fn bad_bench_arguments_are_named() {
    for (args, says) in [
        (["--batch", "0"], "--batch 0: give 1 to 512 activation rows"),
        (["--shapes", "12by4"], "expected MxK"),
        (["--tokens-per-submit", "0"], "--tokens-per-submit 0: give 1 to"),
        (["--qwengpu", "nope"], "--qwengpu: no kernel \"nope\" in the suite"),
    ] {
        let out = native_host(&["gpu", "bench", args[0], args[1]]);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
