//! `native-host qwengpu run` on kernels outside the suite (`tests/kernels/`, ordinary integer
//! CUDA that uses PTX's bit instructions, funnel shifts, 64-bit addressing, device functions,
//! local arrays, module-scope tables, vector types, structs by value, 64-bit integers and CUDA's
//! integer intrinsics), each array checked against
//! plain Rust written here from the CUDA source; and its refusals of bad launches and of what the
//! machine cannot run.
//!
//! Every kernel runs twice: on the first design's compiled layers (`--design first`) and inside
//! the second machine spliced into SmolLM2 (`run`'s default, where `cargo xtask test` has fetched
//! the model), where the model's argmax picks every record and VAL token; both must give the
//! plain Rust arrays.

use std::ffi::{OsStr, OsString};
use std::process::{Command, Output};

const KERNELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernels");

fn run(file: &str, launch: &[&str], args: &[String]) -> Output {
    run_in(None, file, launch, args)
}

/// `run` inside the spliced text model `spliced` (the default design) where given, else on the
/// first design.
fn run_in(spliced: Option<&OsStr>, file: &str, launch: &[&str], args: &[String]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_native-host"));
    cmd.args(["qwengpu", "run", &format!("{KERNELS}/{file}"), "--json"]).args(launch);
    for a in args {
        cmd.arg(format!("--arg={a}"));
    }
    match spliced {
        Some(m) => cmd.arg("-m").arg(m),
        None => cmd.args(["--design", "first"]),
    };
    cmd.output().expect("run native-host")
}

/// SmolLM2's GGUF, where `cargo xtask test` has fetched it.
fn smollm2() -> Option<OsString> {
    std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").filter(|p| !p.is_empty())
}

/// The arrays of a successful run, on the first design and, with SmolLM2 at hand, inside the
/// spliced model: the same arrays both times.
fn arrays(file: &str, launch: &[&str], args: &[String]) -> Vec<Vec<u32>> {
    let first = json_arrays(run(file, launch, args), file);
    match smollm2() {
        Some(m) => {
            let second = json_arrays(run_in(Some(&m), file, launch, args), &format!("{file} inside SmolLM2"));
            assert_eq!(second, first, "{file}: the second design's arrays against the first's");
        }
        None => eprintln!("{file}: not run inside SmolLM2 (SUBSTRATES_SMOLLM2_GGUF not set)"),
    }
    first
}

/// The arrays of a successful `--json` run, its steps and tokens checked.
fn json_arrays(out: Output, what: &str) -> Vec<Vec<u32>> {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert!(v["steps"].as_u64().unwrap() > 0 && v["tokens"].as_u64().unwrap() > v["steps"].as_u64().unwrap(), "{v}");
    serde_json::from_value(v["arrays"].clone()).expect("arrays of u32")
}

fn list(v: &[u32]) -> String {
    format!("[{}]", v.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
}

fn words(n: usize, seed: u32) -> Vec<u32> {
    let mut x = seed;
    let mut v: Vec<u32> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        })
        .collect();
    // The edges every bit instruction must get right.
    for (slot, edge) in v.iter_mut().zip([0, u32::MAX, 0x8000_0000, 1]) {
        *slot = edge;
    }
    v
}

#[test]
fn bit_fields_extract_and_insert_like_plain_rust() {
    let n = 7;
    let (x, y) = (words(8, 0x1234_5678), words(8, 0x9abc_def0));
    let got = arrays(
        "bit_fields.cu",
        &["--grid", "2", "--block", "4"],
        &[list(&x), list(&y), "zeros:8".into(), n.to_string()],
    );
    let (mut want_y, mut want_s) = (y.clone(), vec![0u32; 8]);
    for i in 0..n {
        let v = x[i];
        let bits: u32 = (0..6).map(|k| (v >> k) & 1).sum();
        let (nibble, byte) = ((v >> 3) & 0xf, (v >> 12) & 0xff);
        want_y[i] = (y[i] & !(0xff << 8)) | (byte << 8) | (nibble << 28) | bits;
        want_s[i] = (((v << 20) as i32) >> 24) as u32;
    }
    assert_eq!(got, vec![x, want_y, want_s]);
}

#[test]
fn bit_intrinsics_are_cudas() {
    let n = 4;
    let (x, z) = (words(4, 7), words(4, 0xdead_beef).into_iter().rev().collect::<Vec<_>>());
    let got = arrays("bit_intrinsics.cu", &["--block", "4"], &[list(&x), list(&z), "zeros:20".into(), n.to_string()]);
    let mut out = Vec::new();
    for (&a, &b) in x.iter().zip(&z) {
        // __byte_perm(a, b, 0x0123): result byte k is byte 3 − k of a.
        let perm = a.swap_bytes();
        let umulhi = ((u64::from(a) * u64::from(b)) >> 32) as u32;
        out.extend([a.count_ones(), a.reverse_bits(), a.leading_zeros(), perm, umulhi.wrapping_add(b)]);
    }
    assert_eq!(got, vec![x, z, out]);
}

#[test]
fn a_rotate_hash_runs_its_funnel_shifts() {
    let (n, rounds) = (8, 3);
    let x = words(8, 42);
    let got = arrays(
        "rotate_hash.cu",
        &["--grid", "2", "--block", "4"],
        &[list(&x), "zeros:8".into(), rounds.to_string(), n.to_string()],
    );
    let h: Vec<u32> = x
        .iter()
        .map(|&v| {
            (0..rounds).fold(v, |v, r| (v.rotate_left(5) ^ 0x9e37_79b9u32.wrapping_add(r)).wrapping_mul(0x85eb_ca6b))
        })
        .collect();
    assert_eq!(got, vec![x, h]);
}

#[test]
fn strided_rows_address_through_64_bit_pointers() {
    let (stride, cols, rows) = (5usize, 4usize, 3usize);
    let m = words(stride * rows, 99);
    let got = arrays(
        "strided_rows.cu",
        &["--block", "4"],
        &[list(&m), "zeros:3".into(), stride.to_string(), cols.to_string(), rows.to_string()],
    );
    let sums: Vec<u32> = (0..rows)
        .map(|r| (0..cols).fold(0u32, |s, c| s.wrapping_add(m[r * stride + c].wrapping_mul(c as u32 + 1))))
        .collect();
    assert_eq!(got, vec![m, sums]);
}

/// `arrays` of one kernel of a file with several.
fn arrays_of(file: &str, kernel: &str, launch: &[&str], args: &[String]) -> Vec<Vec<u32>> {
    let launch: Vec<&str> = ["--kernel", kernel].into_iter().chain(launch.iter().copied()).collect();
    arrays(file, &launch, args)
}

#[test]
fn device_functions_are_inlined_call_by_call() {
    let n = 7u32;
    let x = [0, 1, 9, 10, 255, 256, u32::MAX, 12345];
    let got = arrays(
        "device_calls.cu",
        &["--grid", "2", "--block", "4"],
        &[list(&x), "zeros:8".into(), "zeros:1".into(), n.to_string()],
    );
    let digits = |mut v: u32, base: u32| {
        let mut d = 0;
        loop {
            v /= base;
            d += 1;
            if v == 0 {
                return d;
            }
        }
    };
    let y: Vec<u32> = (0..8u32)
        .map(|i| {
            if i >= n {
                return 0;
            }
            let v = x[i as usize];
            let w = digits(v, i % 3 + 9) * 100 + (v & 7) as i32;
            (if w & 1 == 1 { w } else { -w }) as u32
        })
        .collect();
    assert_eq!(got, vec![x.to_vec(), y, vec![n]]);
}

#[test]
fn local_arrays_live_in_each_threads_own_words() {
    // 5 threads in blocks of 3: the padding lane of each block's warp has a local array too,
    // and must not write the next block's.
    let n = 5usize;
    let input = [4, 3, 2, 1, 5, -1, 7, 0, 9, 9, 1, 1, 0, 0, 0, 0, -5, 8, -9, 2, 6, 5, 4, 7];
    let words: Vec<u32> = input.iter().map(|&v: &i32| v as u32).collect();
    let got =
        arrays("local_sort.cu", &["--grid", "2", "--block", "3"], &[list(&words), "zeros:24".into(), n.to_string()]);
    let mut want = vec![0u32; 24];
    for (t, chunk) in input.chunks(4).take(n).enumerate() {
        let mut sorted = chunk.to_vec();
        sorted.sort();
        for (k, v) in sorted.into_iter().enumerate() {
            want[4 * t + k] = v as u32;
        }
    }
    assert_eq!(got, vec![words, want]);
}

#[test]
fn constant_and_device_tables_are_laid_out_before_the_arguments() {
    let x: Vec<u32> = [1, 2, 3, 4, 5, 6, 7, -8, 13, -1].iter().map(|&v: &i32| v as u32).collect();
    let got = arrays("tables.cu", &["--grid", "3", "--block", "4"], &[list(&x), "zeros:10".into(), "10".into()]);
    let (lut, primes) = ([3, 1, 4, 1, 5, 9, 2, 6], [2, 3, 5, 7, 11, 13]);
    let y = x.iter().map(|&v| (lut[(v & 7) as usize] * 10 + primes[(v % 6) as usize] - 7) as u32).collect();
    assert_eq!(got, vec![x, y]);
}

#[test]
fn cudas_integer_intrinsics_match_their_definitions() {
    let (a, b) = (words(8, 0x5eed), words(8, 0xfeed).into_iter().rev().collect::<Vec<_>>());
    let launch = ["--grid", "2", "--block", "4"];
    let args = |out: usize| vec![list(&a), list(&b), format!("zeros:{out}"), "8".into()];
    let got = arrays_of("intrinsics.cu", "abs_ffs_sad", &launch, &args(32));
    let mut want = Vec::new();
    for (&x, &y) in a.iter().zip(&b) {
        let (sx, sy) = (x as i32, y as i32);
        want.extend([
            sx.wrapping_abs() as u32,
            if x == 0 { 0 } else { x.trailing_zeros() + 1 },
            ((i64::from(sx) - i64::from(sy)).unsigned_abs() as u32).wrapping_add(5),
            x.abs_diff(y).wrapping_add(1),
        ]);
    }
    assert_eq!(got[2], want, "abs, __ffs, __sad, __usad");

    // The 64-bit hi:lo shifted left (high word kept) or right (low word kept).
    let wide = |lo: u32, hi: u32| (u64::from(hi) << 32) | u64::from(lo);
    let left = |lo, hi, s: u32| ((wide(lo, hi) << s) >> 32) as u32;
    let right = |lo, hi, s: u32| (wide(lo, hi) >> s) as u32;
    let got = arrays_of("intrinsics.cu", "funnel", &launch, &args(8));
    let want: Vec<u32> = (0..8u32)
        .map(|i| {
            let (x, y) = (a[i as usize], b[i as usize]);
            left(x, y, (i * 5) & 31)
                ^ right(x, y, (i * 7) & 31)
                ^ left(x, y, (i * 9).min(32))
                ^ right(y, x, (i * 9).min(32))
        })
        .collect();
    assert_eq!(got[2], want, "__funnelshift_l/r/lc/rc");

    let got = arrays_of("intrinsics.cu", "halves", &launch, &args(8));
    let low24 = |v: u32| i64::from(((v << 8) as i32) >> 8);
    let want: Vec<u32> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| {
            let (sx, sy, ux, uy) = (i64::from(x as i32), i64::from(y as i32), u64::from(x), u64::from(y));
            let terms = [
                (low24(x) * low24(y)) as u32,
                (x & 0xff_ffff).wrapping_mul(y & 0xff_ffff),
                ((sx + sy) >> 1) as u32,
                (((ux + uy + 1) >> 1) as u32).wrapping_mul(3),
                x.min(y).wrapping_mul(5),
                x.max(y),
                (((sx + sy + 1) >> 1) as u32).wrapping_mul(7),
                (((ux + uy) >> 1) as u32).wrapping_mul(11),
            ];
            terms.into_iter().fold(0u32, u32::wrapping_add)
        })
        .collect();
    assert_eq!(got[2], want, "__mul24, __umul24, __hadd, __rhadd, __uhadd, __urhadd, umin, umax");

    let n = 7u32;
    let got = arrays_of("intrinsics.cu", "launch_dims", &launch, &["zeros:8".into(), "[1000]".into(), n.to_string()]);
    let out: Vec<u32> = (0..8).map(|i| if i < n { i * 10000 + 101 } else { 0 }).collect();
    assert_eq!(got, vec![out, vec![1000 - (0..n).sum::<u32>()]], "y and z of a 1-D launch, atomicSub");
}

#[test]
fn vector_types_and_structs_by_value_move_word_by_word() {
    let v: Vec<u32> = (1..=12).map(|k: i32| (k * k - 20) as u32).collect();
    let got = arrays_of("vectors.cu", "vectors", &["--block", "4"], &[list(&v), "zeros:6".into(), "3".into()]);
    let s = |k: usize| v[k] as i32;
    let out: Vec<u32> = (0..3)
        .flat_map(|i| {
            let q = |c: usize| s(4 * i + c);
            [(q(0) + q(1) * 2 + q(2) * 3 + q(3) * 4) as u32, (q(3) - q(0)) as u32]
        })
        .collect();
    assert_eq!(got, vec![v.clone(), out], "int4 in, int2 out");

    let x: Vec<u32> = [5, 1, 2, 9, -3, -4, 7, 7].iter().map(|&k: &i32| k as u32).collect();
    let got = arrays_of("vectors.cu", "ordered", &["--block", "4"], &[list(&x), "zeros:8".into(), "4".into()]);
    let y: Vec<u32> = (0..4)
        .flat_map(|i| {
            let (a, b) = (x[2 * i] as i32, x[2 * i + 1] as i32);
            [a.min(b) as u32, ((a.max(b) + i as i32) * 10) as u32]
        })
        .collect();
    assert_eq!(got, vec![x, y], "a struct through a device function");
}

#[test]
fn sixty_four_bit_integers_keep_their_high_words() {
    let launch = ["--block", "4"];
    let (x, y): (Vec<i32>, Vec<i32>) = (vec![100_000, 3, 70_000, -100_000], vec![100_000, 5, -90_000, 123_456]);
    let w = |v: &[i32]| list(&v.iter().map(|&k| k as u32).collect::<Vec<_>>());
    let got = arrays_of("wide.cu", "fixed", &launch, &[w(&x), w(&y), "zeros:4".into(), "zeros:4".into(), "4".into()]);
    let fixed: Vec<u32> = x.iter().zip(&y).map(|(&a, &b)| ((i64::from(a) * i64::from(b)) >> 20) as u32).collect();
    let high: Vec<u32> = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| {
            let u = u64::from(a as u32) * u64::from(b as u32);
            ((u >> 32) as u32) ^ ((u >> 40) as u32)
        })
        .collect();
    assert_eq!(&got[2..], &[fixed, high], "(long long)a * b >> 20, and an unsigned product's high word");

    let (x, y) = (vec![1, -2, 3, 1000, 0, -1, 7, 1], vec![1, -3, 1, -1, 0, -1, 5, 3]);
    let got = arrays_of(
        "wide.cu",
        "compare",
        &["--grid", "2", "--block", "4"],
        &[w(&x), w(&y), "zeros:8".into(), "8".into()],
    );
    let want: Vec<u32> = x
        .iter()
        .zip(&y)
        .map(|(&p, &q)| {
            let (a, b) = (i64::from(p) << 33, i64::from(q) * 3_000_000_000);
            let bits = i32::from(a < b) + 2 * i32::from(a == b) + 4 * i32::from((a as u64) > (b as u64));
            (bits + 8 * ((a.max(b) >> 35) as i32)) as u32
        })
        .collect();
    assert_eq!(got[2], want, "signed and unsigned comparisons and max past 32 bits");

    let x = vec![100_000, -3, 70_000, 65_536, 99_999, 7];
    let got = arrays_of("wide.cu", "sums", &launch, &[w(&x), "zeros:8".into(), "6".into()]);
    let want: Vec<u32> = (0..4)
        .flat_map(|t| {
            let s: i64 = x.iter().skip(t).step_by(4).map(|&v| i64::from(v) * i64::from(v)).sum();
            [s as u32, (s >> 32) as u32]
        })
        .collect();
    assert_eq!(got[1], want, "a long long sum over a long index, stored as 64 bits");

    let v: Vec<i64> = vec![1, -1, i64::MIN / 3, 0x5_075b_cd15, -7];
    let words: Vec<u32> = v.iter().flat_map(|&k| [k as u32, (k >> 32) as u32]).collect();
    let got =
        arrays_of("wide.cu", "scale", &["--grid", "2", "--block", "4"], &[list(&words), "zeros:10".into(), "5".into()]);
    let want: Vec<u32> = v
        .iter()
        .flat_map(|&k| {
            let r = (k >> 3).wrapping_add(k << 29).wrapping_sub(((k as u64) >> 61) as i64);
            [r as u32, (r >> 32) as u32]
        })
        .collect();
    assert_eq!(got[1], want, "64-bit loads, shifts by constants and stores");
}

#[test]
fn recursion_function_pointers_and_64_bit_division_are_refused_by_line() {
    let dir = std::env::temp_dir().join(format!("substrates-qwengpu-calls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "fib.cu",
            "__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
             __global__ void k(const int *x, int *y) { y[threadIdx.x] = fib(x[threadIdx.x]); }\n",
            "recursion cannot be inlined",
        ),
        (
            "pointer.cu",
            "__device__ __noinline__ int inc(int v) { return v + 1; }\n\
             __device__ __noinline__ int dec(int v) { return v - 1; }\n\
             __global__ void k(const int *x, int *y) {\n\
             int (*f)(int) = x[threadIdx.x] & 1 ? inc : dec; y[threadIdx.x] = f(x[threadIdx.x]); }\n",
            "function pointer",
        ),
        (
            "divide.cu",
            "__global__ void k(const int *x, int *y) {\n\
             long long v = (long long)x[threadIdx.x] << 40; y[threadIdx.x] = (int)(v / 3); }\n",
            "64-bit division",
        ),
    ];
    for (name, body, needle) in cases {
        let file = dir.join(name);
        std::fs::write(&file, format!("#include \"qwengpu.h\"\n{body}")).unwrap();
        // Both designs lower the same PTX; the default (second) refuses before loading a model.
        for design in [&["--design", "first"][..], &[]] {
            let out = Command::new(env!("CARGO_BIN_EXE_native-host"))
                .args(["qwengpu", "run"])
                .arg(&file)
                .args(["--block", "4", "--arg", "[1,2,3,4]", "--arg", "zeros:4"])
                .args(design)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains("PTX line") && err.contains(needle),
                "{name} {design:?}: {err}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_text_output_names_each_array_and_the_steps() {
    let model = smollm2();
    let mut designs = vec![vec![OsString::from("--design"), "first".into()]];
    designs.extend(model.map(|m| vec![OsString::from("-m"), m]));
    for design in designs {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_native-host"));
        cmd.args(["qwengpu", "run", &format!("{KERNELS}/strided_rows.cu"), "--block", "1"]).args(&design);
        cmd.args(["--arg", "[1,2,3]", "--arg", "zeros:1", "--arg", "3", "--arg", "3", "--arg", "1"]);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{design:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("arg 1 = [1, 2, 3]") && text.contains("arg 2 = [14]"), "{design:?}: {text}");
        assert!(text.contains("machine steps") && text.contains("tokens"), "{design:?}: {text}");
    }
}

#[test]
fn the_default_design_without_a_model_says_how_to_get_one() {
    // No SmolLM2 anywhere `run` looks: an empty cache and no environment variable.
    let home = std::env::temp_dir().join(format!("substrates-qwengpu-nomodel-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let launch = ["--block", "1", "--arg=[1,2,3]", "--arg=zeros:1", "--arg=3", "--arg=3", "--arg=1"];
    let out = Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["qwengpu", "run", &format!("{KERNELS}/strided_rows.cu")])
        .args(launch)
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("SUBSTRATES_SMOLLM2_GGUF")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("cargo xtask setup") && err.contains("--design first"), "{err}");
    // The second design's options are refused with the first design, by name.
    for (flag, value) in [("--gpu", None), ("--load", Some("dir")), ("-m", Some("model.gguf"))] {
        let out = Command::new(env!("CARGO_BIN_EXE_native-host"))
            .args(["qwengpu", "run", &format!("{KERNELS}/strided_rows.cu"), "--design", "first", flag])
            .args(value)
            .args(launch)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(flag) && err.contains("--design first"), "{flag}: {err}");
    }
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn bad_launches_and_arguments_are_named() {
    let four = |a: &str| vec!["[1,2]".to_string(), "zeros:2".into(), a.to_string(), "2".into()];
    let cases: Vec<(&str, Vec<&str>, Vec<String>, &str)> = vec![
        ("rotate_hash.cu", vec!["--block", "2"], four("x1"), "argument 3 (\"x1\")"),
        ("rotate_hash.cu", vec!["--block", "2"], four("[1,2"), "must end with `]`"),
        ("rotate_hash.cu", vec!["--block", "2"], four("4294967296"), "not a 32-bit word"),
        ("rotate_hash.cu", vec!["--block", "2"], four("1")[..3].to_vec(), "takes 4 parameters"),
        (
            "rotate_hash.cu",
            vec!["--block", "2"],
            vec!["zeros:100".into(), "zeros:27".into(), "1".into(), "2".into()],
            "global memory holds 126",
        ),
        ("rotate_hash.cu", vec!["--block", "64"], four("1"), "64 threads"),
        ("rotate_hash.cu", vec!["--grid", "0", "--block", "4"], four("1"), "launch of 0"),
    ];
    // A launch is refused before any model is read, so without SmolLM2 a path that does not
    // exist serves to check the default design.
    let model = smollm2().unwrap_or_else(|| "no-such-model.gguf".into());
    for (file, launch, args, needle) in cases {
        for spliced in [None, Some(model.as_os_str())] {
            let out = run_in(spliced, file, &launch, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success() && err.contains(needle), "{launch:?} {args:?} in {spliced:?}: {err}");
        }
    }
}

#[test]
fn a_kernel_over_the_rom_is_refused_by_line() {
    let dir = std::env::temp_dir().join(format!("substrates-qwengpu-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.cu");
    let body = "#include \"qwengpu.h\"\n__global__ void big(unsigned *x)\n{\n#pragma unroll\n\
                for (int k = 0; k < 40; k++)\n\tx[k] = (x[k] * (k + 3)) ^ (k * 7);\n}\n";
    std::fs::write(&big, body).unwrap();
    // The second design's ROM holds 64 blocks: the same loop is past it at 40 iterations too. It
    // is refused before any model is loaded, so the default needs no SmolLM2 here.
    for (design, needle) in [(&["--design", "first"][..], "ROM's 32 blocks"), (&[], "ROM's 64 blocks")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_native-host"));
        cmd.args(["qwengpu", "run"]).arg(&big).args(["--block", "1", "--arg", "zeros:40"]).args(design);
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("PTX line") && err.contains(needle), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
