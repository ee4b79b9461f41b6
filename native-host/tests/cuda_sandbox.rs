//! CUDA source that tries to make clang-19 read a host file, compiled with the line filter off:
//! natively and through a running bridge, no reply, diagnostic or PTX may carry the canary's
//! contents in any encoding. A control run of plain (unsandboxed) clang shows the sources do reach
//! the file and the detector does see it, so these tests can fail.

mod common;

use common::*;
use kernels_wasm::protocol::{Reply, Request, ServerMessage};
use native_host::qwengpu::source::compile_planted;
use native_host::qwengpu::{cuda_source_to_ptx, Filter};
use std::path::Path;

/// Every way we found for a source to name a file. `{P}` is the canary's absolute path, `{R}` the
/// same relative to the compile directory's parent (both live in the temporary directory), `{D}`
/// the canary's directory.
const HOSTILE: &[&str] = &[
    "#include \"{P}\"",
    "#include <{P}>",
    "  #   include \"{P}\"",
    "#include \"../{R}\"",
    "#include \"/proc/self/root{P}\"",
    "#include \"/proc/self/cwd/../{R}\"",
    "#include \"/proc/1/root{P}\"",
    "#include_next \"{P}\"",
    "#import \"{P}\"",
    "#__include_macros \"{P}\"",
    "#include \"qwengpu.h\"\n__device__ const char d[] = {\n#embed \"{P}\"\n};\n__global__ void k(char *o) { o[threadIdx.x] = d[threadIdx.x]; }",
    "#include \"qwengpu.h\"\n__device__ const char d[] = {\n#embed \"{P}\" limit(64) prefix(1,) suffix(,2) if_empty(3)\n};\n__global__ void k(char *o) { o[threadIdx.x] = d[threadIdx.x]; }",
    "#include \"qwengpu.h\"\n__device__ const char d[] = {\n#embed \"{P}\" clang::offset(0) limit(100)\n};\n__global__ void k(char *o) { o[threadIdx.x] = d[threadIdx.x]; }",
    "#if __has_embed(\"{P}\")\nint found_embed;\n#endif",
    "#if __has_include(\"{P}\")\nint found_include;\n#endif",
    "#line 1 \"{P}\"\nint x = ;",
    "_Pragma(\"GCC dependency \\\"{P}\\\"\")",
    "_Pragma(\"include_alias(\\\"a.h\\\", \\\"{P}\\\")\")\n#include \"a.h\"",
    "#define F \"{P}\"\n#include F",
    "#define S(x) #x\n#define T(x) S(x)\n#include T({P})",
    "#define H <{P}>\n#include H",
    "/* a comment */ #include \"{P}\"",
    "/* a\n multi-line comment */ # include \"{P}\"",
    "// a comment \\\n#include \"{P}\"",
    "#inc\\\nlude \"{P}\"",
    "#\\\ninclude \"{P}\"",
    "%:include \"{P}\"",
    "%:   include <{P}>",
    "??=include \"{P}\"",
    "#include \"/proc/self/environ\"",
    "#include \"/proc/self/fd/0\"",
    "#include \"/etc/passwd\"",
    "#include \"{D}\"",
];

fn sources(c: &Canary) -> Vec<String> {
    let tmp = std::env::temp_dir().canonicalize().unwrap();
    let rel = c.path.strip_prefix(&tmp).unwrap().display().to_string();
    let p = c.path.display().to_string();
    let d = c.path.parent().unwrap().display().to_string();
    HOSTILE.iter().map(|s| format!("{}\n", s.replace("{P}", &p).replace("{R}", &rel).replace("{D}", &d))).collect()
}

/// Whether `text` carries 8 or more consecutive bytes of `secret` in any encoding we can think of:
/// as text, hex (either case), base64, or as a run of integers (decimal, hex or octal, as PTX
/// writes `.b8` arrays).
fn leaks(text: &str, secret: &str) -> bool {
    let s = secret.as_bytes();
    let windows: Vec<&[u8]> = s.windows(8).collect();
    let lower = text.to_ascii_lowercase();
    let hex: String = s.iter().map(|b| format!("{b:02x}")).collect();
    if text.contains(secret) || lower.contains(&hex[..16]) || windows.iter().any(|w| text.contains(&b64(w)[..8])) {
        return true;
    }
    // Every maximal run of integers in the text, as byte values.
    let mut run: Vec<u8> = Vec::new();
    let mut runs = Vec::new();
    for token in text.split(|ch: char| !(ch.is_ascii_alphanumeric())) {
        let v = if let Some(h) = token.strip_prefix("0x").or_else(|| token.strip_prefix("0X")) {
            u64::from_str_radix(h, 16).ok()
        } else if token.len() > 1 && token.starts_with('0') {
            u64::from_str_radix(token, 8).ok()
        } else {
            token.parse::<u64>().ok()
        };
        match v {
            Some(v) if v < 256 => run.push(v as u8),
            _ if token.is_empty() => {}
            _ => runs.push(std::mem::take(&mut run)),
        }
    }
    runs.push(run);
    runs.iter().any(|r| windows.iter().any(|w| r.windows(8).any(|x| x == *w)))
}

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
        }
    }
    out
}

fn reply_text(r: Result<String, native_host::qwengpu::SourceError>) -> String {
    match r {
        Ok(ptx) => ptx,
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_detector_sees_each_encoding() {
    let secret = "canary_0123456789abcdef";
    let bytes: Vec<String> = secret.bytes().map(|b| b.to_string()).collect();
    assert!(leaks(&format!("x {secret} y"), secret));
    assert!(leaks(&format!(".b8 d[23] = {{{}}};", bytes.join(", ")), secret));
    assert!(leaks(&secret.bytes().map(|b| format!("0x{b:X},")).collect::<String>(), secret));
    assert!(leaks(&secret.bytes().map(|b| format!("0{b:o} ")).collect::<String>(), secret));
    assert!(leaks(&secret.bytes().map(|b| format!("{b:02x}")).collect::<String>(), secret));
    assert!(leaks(&b64(secret.as_bytes()), secret));
    assert!(!leaks(".b8 d[4] = {1, 2, 3, 4}; canary_", secret));
}

/// The control: unsandboxed clang on a few of the sources does show the canary, in its messages
/// and in its PTX, and the detector sees it.
#[test]
fn without_the_sandbox_these_sources_do_read_the_canary() {
    let c = canary();
    let all = sources(&c);
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    for i in [0, 4, 10, 18, 26] {
        let cu = dir.path().join("k.cu");
        std::fs::write(&cu, &all[i]).unwrap();
        std::fs::copy(native_host::qwengpu::kernels_dir().join("qwengpu.h"), dir.path().join("qwengpu.h")).unwrap();
        let out = std::process::Command::new("clang-19")
            .args(native_host::qwengpu::CLANG_ARGS)
            .args(["-nostdlibinc", "-o", "-"])
            .arg(&cu)
            .output()
            .unwrap();
        let both = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(leaks(&both, &c.secret), "source {i} did not reach the canary unsandboxed:\n{}\n{both}", all[i]);
    }
}

#[test]
fn sandboxed_clang_reads_no_host_file() {
    let c = canary();
    let (mut compiled, mut denied) = (0, 0);
    for src in sources(&c) {
        let r = cuda_source_to_ptx(&src, Filter::Off);
        compiled += r.is_ok() as usize;
        let text = reply_text(r);
        denied += text.contains("Permission denied") as usize;
        assert!(!leaks(&text, &c.secret), "leaked by:\n{src}\n{text}");
        assert!(!text.contains("could not be started in its sandbox"), "{text}");
    }
    // The harmless ones (a false __has_include, a GCC dependency pragma) still compile.
    assert!(compiled >= 1, "nothing compiled: the sandbox may be refusing everything");
    // Most are refused by the kernel itself (EACCES from Landlock), not by clang's parser.
    assert!(denied >= 20, "only {denied} sources met Landlock's refusal");
    // And the filter, on, refuses the direct forms before the compiler runs.
    let e = cuda_source_to_ptx(&sources(&c)[0], Filter::On).unwrap_err();
    assert!(e.to_string().contains("only `#include \"qwengpu.h\"`"), "{e}");
}

#[test]
fn symlinks_planted_in_the_compile_directory_lead_nowhere() {
    let c = canary();
    let secret = c.path.clone();
    let plant = move |dir: &Path| {
        std::os::unix::fs::symlink(&secret, dir.join("evil.h"))?;
        std::fs::remove_file(dir.join("qwengpu.h"))?;
        std::os::unix::fs::symlink(&secret, dir.join("qwengpu.h"))?;
        std::os::unix::fs::symlink("/", dir.join("root"))
    };
    let rel = c.path.display().to_string();
    for src in ["#include \"evil.h\"\n", "#include \"qwengpu.h\"\n", &format!("#include \"root{rel}\"\n")] {
        let text = reply_text(compile_planted(src, Filter::Off, &plant));
        assert!(!leaks(&text, &c.secret), "leaked by {src}: {text}");
        assert!(text.contains("error"), "{text}");
    }
}

#[test]
fn a_kernel_still_compiles_to_the_committed_ptx() {
    for name in ["bitonic_step", "vadd"] {
        let k = kernels_wasm::qwengpu::suite::kernels().into_iter().find(|k| k.name == name).unwrap();
        assert!(cuda_source_to_ptx(k.cuda, Filter::Off).unwrap() == k.ptx, "{name}: not the committed PTX");
    }
}

#[tokio::test]
async fn through_the_bridge_no_reply_carries_the_canary() {
    let c = canary();
    let server = start_with("cuda-canary", &["--no-include-filter"]);
    let mut ws = connect(&server).await;
    for (i, src) in sources(&c).into_iter().enumerate() {
        let id = 100 + i as u64;
        request(&mut ws, id, Request::QwengpuCompile { cuda: src.clone() }).await;
        let frame = recv(&mut ws).await;
        let text = match &frame {
            ServerMessage::Result { id: got, result: Reply::QwengpuPtx { ptx } } if *got == id => ptx.clone(),
            ServerMessage::Error(e) if e.id == Some(id) => e.message.clone(),
            other => panic!("{src}: unexpected {other:?}"),
        };
        assert!(!leaks(&format!("{text}{}", frame.to_json()), &c.secret), "leaked by:\n{src}\n{text}");
    }
    assert_alive(&mut ws, 1).await;
}
