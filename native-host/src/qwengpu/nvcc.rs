//! `native-host qwengpu nvcc`: the suite's CUDA files on a real NVIDIA GPU, as qwenGPU checked
//! its kernels against a T4. `--emit DIR` writes one host program per kernel (the kernel's own
//! .cu, our `qwengpu_nvcc.h` in place of `qwengpu.h`, and a `main` that lays the arrays out in one
//! buffer exactly as the machine's global memory holds them, launches the same grid and block, and
//! prints every word afterwards) plus `run.sh`, which builds them with nvcc and runs them on the
//! GPU. `--compare FILE` reads what run.sh printed and checks every array against the kernel's
//! plain Rust version, the same arrays the interpreter and the compiled layers are held to.

use anyhow::{bail, Context, Result};
use kernels_wasm::qwengpu::suite::{kernels, Param, Prepared, SuiteKernel};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct Args {
    /// Write the harnesses and run.sh into this directory (made if missing).
    #[arg(long, value_name = "DIR")]
    emit: Option<PathBuf>,
    /// Check the results file that run.sh wrote against the plain Rust versions.
    #[arg(long, value_name = "FILE")]
    compare: Option<PathBuf>,
}

/// Words the GPU buffer holds. The machine's memory is 126 words; the spare words take the
/// writes that the machine wraps round to word 0 (see `MACHINE_DEFINED`), and are printed too.
pub const BUFFER_WORDS: usize = 256;

/// A kernel that exercises behaviour the machine defines and CUDA does not: why, and what the
/// GPU must hold instead (the plain Rust version's arrays, changed).
pub struct MachineDefined {
    pub name: &'static str,
    pub why: &'static str,
    pub on_gpu: fn(&Prepared, &mut [Vec<u32>]),
    /// What the GPU must hold in the first word past the machine's memory.
    pub past_memory: u32,
}

pub const MACHINE_DEFINED: [MachineDefined; 1] = [MachineDefined {
    name: "memory_full",
    why: "thread 0 writes one word past the 126-word memory: the machine wraps it to word 0 (a[0] = 7); \
          on the GPU it lands past the arrays and a[0] keeps its value",
    on_gpu: |p, arrays| arrays[0][0] = p.arrays[0][0],
    past_memory: 7,
}];

const HEADER: &str = include_str!("../../../assets/kernels/qwengpu_nvcc.h");

const RUN_SH: &str = r#"#!/bin/sh
# Builds every harness here with nvcc (in parallel) and runs each on the GPU; one line per
# kernel goes to results.txt. ARCH overrides the target (default: the GPU present).
cd "$(dirname "$0")" || exit 1
ARCH=${ARCH:-native}
export ARCH
nvcc --version | tail -n 2
ls *.cu | xargs -P "$(nproc)" -I{} sh -c 'n=$(basename {} .cu); nvcc -O2 -arch=$ARCH -o "$n" {} 2> "$n.log" || echo "$n: nvcc failed: $(head -c 2000 "$n.log")"'
: > results.txt
for f in *.cu; do
	n=${f%.cu}
	if [ -x "$n" ]; then ./"$n" >> results.txt || echo "$n error exit $?" >> results.txt
	else echo "$n error compile" >> results.txt; fi
done
echo "$(grep -c ' ok ' results.txt) of $(ls *.cu | wc -l) kernels ran; results in $(pwd)/results.txt"
"#;

pub fn run(args: Args) -> Result<()> {
    match (args.emit, args.compare) {
        (Some(dir), _) => emit(&dir),
        (_, Some(file)) => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let (report, identical) = compare(&text)?;
            print!("{report}");
            if !identical {
                bail!("the GPU's arrays differ from the plain Rust versions (see above)");
            }
            Ok(())
        }
        _ => bail!("give --emit DIR or --compare FILE"),
    }
}

fn emit(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("qwengpu_nvcc.h", HEADER)?;
    let suite = kernels();
    for k in &suite {
        write(&format!("{}.cu", k.name), &harness(k)?)?;
    }
    write("run.sh", RUN_SH)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("run.sh");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", path.display()))?;
    }
    println!(
        "wrote {} harnesses, qwengpu_nvcc.h and run.sh to {}; on a machine with nvcc and a GPU run \
         `sh run.sh`, then here `native-host qwengpu nvcc --compare {}/results.txt`",
        suite.len(),
        dir.display(),
        dir.display()
    );
    Ok(())
}

/// One kernel's host program. It prints `NAME ok W0 W1 …` (all `BUFFER_WORDS` words), or
/// `NAME error WHAT` when CUDA reports one.
pub fn harness(k: &SuiteKernel) -> Result<String> {
    const INCLUDE: &str = "#include \"qwengpu.h\"";
    if !k.cuda.contains(INCLUDE) {
        bail!("{}.cu does not include qwengpu.h", k.name);
    }
    let p = k.prepare();
    if p.memory.len() > BUFFER_WORDS {
        bail!("{}: {} words of memory do not fit the {BUFFER_WORDS}-word buffer", k.name, p.memory.len());
    }
    let mut s = String::new();
    let _ = writeln!(s, "// Generated by `native-host qwengpu nvcc --emit`: {} on the GPU.", k.name);
    s.push_str("#include <cstdio>\n");
    s.push_str(&k.cuda.replacen(INCLUDE, "#include \"qwengpu_nvcc.h\"", 1));
    let words: Vec<String> = p.memory.iter().map(|w| format!("{w}u")).collect();
    let _ = writeln!(s, "\nstatic const unsigned image[{}] = {{{}}};", words.len().max(1), words.join(", "));
    s.push_str("\nint main()\n{\n\tunsigned *mem;\n");
    let _ = writeln!(s, "\tunsigned out[{BUFFER_WORDS}];");
    let _ = writeln!(
        s,
        "\tif (cudaMalloc(&mem, sizeof out) != cudaSuccess || cudaMemset(mem, 0, sizeof out) != cudaSuccess ||\n\t    \
         cudaMemcpy(mem, image, {} * sizeof(unsigned), cudaMemcpyHostToDevice) != cudaSuccess) {{",
        p.memory.len()
    );
    let _ = writeln!(s, "\t\tprintf(\"{} error setup %s\\n\", cudaGetErrorString(cudaGetLastError()));", k.name);
    s.push_str("\t\treturn 1;\n\t}\n");
    // Each argument as the kernel takes it: an array is a pointer into the one buffer at the
    // array's word offset (the machine passes its byte address), a scalar a 32-bit value.
    let (mut array, mut args) = (0, Vec::new());
    for (i, param) in k.params.iter().enumerate() {
        match param {
            Param::Array { .. } => {
                let _ = writeln!(s, "\tunsigned *p{i} = mem + {};", p.offsets[array]);
                array += 1;
            }
            Param::Scalar(v) => {
                let _ = writeln!(s, "\tunsigned p{i} = {v}u;");
            }
        }
        args.push(format!("&p{i}"));
    }
    let _ = writeln!(s, "\tvoid *args[] = {{{}}};", if args.is_empty() { "0".into() } else { args.join(", ") });
    let _ = writeln!(
        s,
        "\tcudaError_t e = cudaLaunchKernel((const void *){}, dim3({}), dim3({}), args, 0, 0);",
        k.name, k.grid, k.block
    );
    s.push_str("\tif (e == cudaSuccess)\n\t\te = cudaDeviceSynchronize();\n");
    s.push_str("\tif (e == cudaSuccess)\n\t\te = cudaMemcpy(out, mem, sizeof out, cudaMemcpyDeviceToHost);\n");
    s.push_str("\tif (e != cudaSuccess) {\n");
    let _ = writeln!(s, "\t\tprintf(\"{} error %s\\n\", cudaGetErrorString(e));", k.name);
    s.push_str("\t\treturn 1;\n\t}\n");
    let _ = writeln!(s, "\tprintf(\"{} ok\");", k.name);
    let _ = writeln!(s, "\tfor (int w = 0; w < {BUFFER_WORDS}; w++)\n\t\tprintf(\" %u\", out[w]);");
    s.push_str("\tprintf(\"\\n\");\n\treturn 0;\n}\n");
    Ok(s)
}

/// Checks every suite kernel's line of `results` (run.sh's output). Returns the report and
/// whether every kernel was identical: to its plain Rust version, or for a kernel in
/// `MACHINE_DEFINED`, to that version changed as CUDA defines the case.
pub fn compare(results: &str) -> Result<(String, bool)> {
    let mut lines = std::collections::BTreeMap::new();
    for (n, line) in results.lines().enumerate() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(status)) = (fields.next(), fields.next()) else { continue };
        let rest: Vec<&str> = fields.collect();
        let words = match status {
            "ok" => Ok(rest
                .iter()
                .map(|w| w.parse::<u32>().with_context(|| format!("line {}: {w:?} is not a 32-bit word", n + 1)))
                .collect::<Result<Vec<u32>>>()?),
            "error" => Err(rest.join(" ")),
            other => bail!("line {}: {name}: expected `ok` or `error`, found {other:?}", n + 1),
        };
        if lines.insert(name.to_string(), words).is_some() {
            bail!("line {}: a second line for {name}", n + 1);
        }
    }
    let suite = kernels();
    let (mut report, mut same, mut cuda_defined, mut all_good) = (String::new(), 0, 0, true);
    for k in &suite {
        let p = k.prepare();
        let mut want = k.expected(&p);
        let defined = MACHINE_DEFINED.iter().find(|d| d.name == k.name);
        if let Some(d) = defined {
            (d.on_gpu)(&p, &mut want);
        }
        let verdict = match lines.get(k.name) {
            None => Err("no line in the results".to_string()),
            Some(Err(e)) => Err(format!("CUDA error: {e}")),
            Some(Ok(words)) if words.len() < p.memory.len() => {
                Err(format!("{} words printed, the arrays need {}", words.len(), p.memory.len()))
            }
            Some(Ok(words)) => {
                let got = p.read_arrays(words);
                let past = words.get(p.memory.len()).copied();
                match first_difference(&got, &want) {
                    None if defined.is_some_and(|d| past != Some(d.past_memory)) => {
                        Err(format!("the word past memory holds {past:?}, not the stray write"))
                    }
                    None => Ok(()),
                    Some((a, i)) => Err(format!("array {a} [{i}]: GPU {}, expected {}", got[a][i], want[a][i])),
                }
            }
        };
        let line = match (verdict, defined) {
            (Ok(()), None) => {
                same += 1;
                "identical".to_string()
            }
            (Ok(()), Some(d)) => {
                cuda_defined += 1;
                format!("identical where CUDA defines it; the machine differs by design: {}", d.why)
            }
            (Err(e), _) => {
                all_good = false;
                format!("DIFFERS: {e}")
            }
        };
        let _ = writeln!(report, "{:<18} {line}", k.name);
    }
    let _ = writeln!(
        report,
        "{same} of {} kernels bit-identical between the GPU and the plain Rust versions; {cuda_defined} more \
         identical where CUDA defines the case",
        suite.len()
    );
    Ok((report, all_good))
}

fn first_difference(got: &[Vec<u32>], want: &[Vec<u32>]) -> Option<(usize, usize)> {
    got.iter().zip(want).enumerate().find_map(|(a, (g, w))| g.iter().zip(w).position(|(x, y)| x != y).map(|i| (a, i)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_wasm::qwengpu::isa::MachineSpec;

    /// The results a GPU that agrees with the interpreter would print.
    fn interpreter_results() -> String {
        let spec = MachineSpec::default();
        let mut text = String::new();
        for k in kernels() {
            let (_, p, mut m) = k.machine(k.ptx, &spec).unwrap();
            m.run(1_000_000).unwrap();
            let mut words = m.global[..p.memory.len()].to_vec();
            words.resize(BUFFER_WORDS, 0);
            let w: Vec<String> = words.iter().map(u32::to_string).collect();
            let _ = writeln!(text, "{} ok {}", k.name, w.join(" "));
        }
        text
    }

    #[test]
    fn every_harness_lays_out_the_machines_memory_and_launch() {
        for k in kernels() {
            let h = harness(&k).unwrap();
            let p = k.prepare();
            assert!(h.contains("#include \"qwengpu_nvcc.h\"") && !h.contains("#include \"qwengpu.h\""), "{}", k.name);
            let image = format!("static const unsigned image[{}] = {{", p.memory.len());
            assert!(h.contains(&image), "{}: {image}", k.name);
            let launch = format!("(const void *){}, dim3({}), dim3({}), args", k.name, k.grid, k.block);
            assert!(h.contains(&launch), "{}: {launch}", k.name);
            let arrays = k.params.iter().filter(|p| matches!(p, Param::Array { .. })).count();
            assert_eq!(h.matches(" = mem + ").count(), arrays, "{}", k.name);
        }
    }

    /// The interpreter's results with memory_full's line as the GPU prints it: a[0] unwrapped,
    /// the stray 7 at word 126.
    fn gpu_results() -> String {
        let good = interpreter_results();
        let k = kernels().into_iter().find(|k| k.name == "memory_full").unwrap();
        let p = k.prepare();
        let line = good.lines().find(|l| l.starts_with("memory_full ")).unwrap();
        let mut words: Vec<u32> = line.split_whitespace().skip(2).map(|w| w.parse().unwrap()).collect();
        words[0] = p.memory[0];
        words[p.memory.len()] = 7;
        let w: Vec<String> = words.iter().map(u32::to_string).collect();
        good.replace(line, &format!("memory_full ok {}", w.join(" ")))
    }

    #[test]
    fn results_like_the_interpreters_pass_and_one_changed_word_is_named() {
        let good = gpu_results();
        let (report, ok) = compare(&good).unwrap();
        assert!(ok, "{report}");
        let n = kernels().len();
        assert!(report.contains(&format!("{} of {n} kernels bit-identical", n - 1)), "{report}");
        assert!(report.contains("1 more identical where CUDA defines the case"), "{report}");

        let bad = good.replacen("vadd ok ", "vadd ok 12345 ", 1);
        let (report, ok) = compare(&bad).unwrap();
        assert!(!ok && report.lines().any(|l| l.starts_with("vadd") && l.contains("DIFFERS: array 0 [0]")), "{report}");

        let missing: String = good.lines().filter(|l| !l.starts_with("saxpy ")).map(|l| format!("{l}\n")).collect();
        let (report, ok) = compare(&missing).unwrap();
        assert!(!ok && report.contains("DIFFERS: no line in the results"), "{report}");

        let err = compare("vadd ok 1 x 3\n").unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("\"x\""), "{err}");
        let err = compare(&format!("{good}vadd ok 1\n")).unwrap_err().to_string();
        assert!(err.contains("a second line for vadd"), "{err}");
    }

    #[test]
    fn the_machine_defined_kernel_must_match_what_cuda_defines() {
        let (report, ok) = compare(&gpu_results()).unwrap();
        assert!(ok && report.contains("memory_full        identical where CUDA defines it"), "{report}");
        // The stray write must be where CUDA puts it.
        let lost = gpu_results()
            .lines()
            .map(|l| {
                if !l.starts_with("memory_full ") {
                    return l.to_string();
                }
                let mut w: Vec<&str> = l.split_whitespace().collect();
                w[2 + 126] = "0";
                w.join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let (report, ok) = compare(&lost).unwrap();
        assert!(!ok && report.contains("memory_full        DIFFERS: the word past memory holds Some(0)"), "{report}");
        // The machine's own (wrapped) result is not what a GPU can print.
        let (report, ok) = compare(&interpreter_results()).unwrap();
        assert!(!ok && report.contains("memory_full        DIFFERS: array 0 [0]"), "{report}");
    }
}
