//! `native-host bitnet kernel-bench` runs end to end and refuses bad shapes clearly.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["bitnet", "kernel-bench"])
        .args(args)
        .output()
        .expect("run native-host")
}

#[test]
fn prints_a_row_per_format_backend_and_thread_count() {
    let out = bench(&["--shapes", "64x128", "--iters", "1", "--threads", "1,2", "--batch", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> =
        text.lines().filter(|l| l.starts_with("64x128")).map(|l| l.split_whitespace().collect()).collect();
    // f32 once; I2_S, TL1 and TL2 for scalar at 1 and 2 threads at least.
    assert!(text.contains("GEMM of 2 activation rows"), "{text}");
    assert!(rows.iter().any(|r| r[1] == "f32"), "{text}");
    for format in ["I2_S", "TL1", "TL2"] {
        for threads in ["1", "2"] {
            assert!(
                rows.iter().any(|r| r[1] == format && r[2] == "scalar" && r[3] == threads),
                "{format} x{threads}: {text}"
            );
        }
    }
    // Scalar, one thread, is its own baseline.
    let baseline = rows.iter().find(|r| r[1] == "I2_S" && r[2] == "scalar" && r[3] == "1").unwrap();
    assert_eq!(baseline[6], "1.00");
}

#[test]
fn bad_shapes_are_named() {
    for bad in ["64by128", "0x128", "64x", "99999999x99999999", "18446744073709551615x3"] {
        let out = bench(&["--shapes", bad, "--iters", "1"]);
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(bad), "{bad}: {err}");
    }
    for (flag, bad) in [("--batch", "0"), ("--threads", "0")] {
        let out = bench(&["--shapes", "64x128", "--iters", "1", flag, bad]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(flag), "{flag} {bad}");
    }
}
