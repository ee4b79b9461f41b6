//! Compiles the BPF programs in `bpf/` with clang-19 (`-O2 -target bpf`) into OUT_DIR; the driver
//! embeds the objects with `include_bytes!`. clang-19 is installed by `cargo xtask serve|test|setup`.

use std::path::Path;
use std::process::Command;

/// Programs built more than once, with a define per variant: (source, [(object suffix, flag)]).
/// The matvec's weight storage (qwen3::weights): Q24 words, BF16 + table, INT4 groups.
const VARIANTS: &[(&str, &[(&str, &str)])] =
    &[("qwen3_matvec", &[("", "-DWEIGHTS_Q24"), ("_bf16", "-DWEIGHTS_BF16"), ("_int4", "-DWEIGHTS_INT4")])];

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rerun-if-changed=bpf");
    let clang = std::env::var("BPF_CLANG").unwrap_or_else(|_| "clang-19".into());
    let entries = std::fs::read_dir("bpf").expect("native-host/bpf exists");
    let mut sources: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    sources.sort();
    for src in sources.iter().filter(|p| p.to_string_lossy().ends_with(".bpf.c")) {
        let name = src.file_name().and_then(|n| n.to_str()).unwrap_or_default().trim_end_matches(".bpf.c");
        let variants = VARIANTS.iter().find(|v| v.0 == name).map(|v| v.1).unwrap_or(&[("", "-DSUBSTRATES")]);
        for (suffix, define) in variants {
            compile(&clang, src, define, &Path::new(&out).join(format!("{name}{suffix}.bpf.o")));
        }
    }
}

fn compile(clang: &str, src: &Path, define: &str, obj: &Path) {
    let result = Command::new(clang)
        // -mcpu=v4: sign-extending loads and 32-bit jumps (kernel ≥ 6.6; this one is 6.18).
        .args([
            "-O2",
            "-g",
            "-Wall",
            "-Werror",
            "-target",
            "bpf",
            "-mcpu=v4",
            "-I/usr/include/x86_64-linux-gnu",
            define,
            "-c",
        ])
        .arg(src)
        .arg("-o")
        .arg(obj)
        .output();
    match result {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("{clang} failed on {}:\n{}", src.display(), String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!(
            "cannot run {clang} to compile the BPF programs ({e}): install it with `cargo xtask setup` \
                 (Debian package clang-19), or point BPF_CLANG at a clang that targets bpf"
        ),
    }
}
