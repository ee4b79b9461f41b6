//! `native-host esp32 node | run` end to end, with real node processes on loopback TCP: the
//! tokens against `bitnet run`, damaged frames, a node that dies, a node that goes silent, and
//! budgets refused before any weight moves (no timing is asserted).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/fixtures/bitnet-cpp/tiny.i2_s.gguf");
const PROMPT: &str = "The kernel runs the model.";

fn host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_native-host")).args(args).output().expect("run native-host")
}

/// `esp32 run` on bitnet.cpp's model and prompt, `n` tokens, with `extra` arguments.
fn run_fixture(n: &str, extra: &[&str]) -> Output {
    let mut args = vec!["esp32", "run", "-m", FIXTURE, "-p", PROMPT, "-n", n];
    args.extend_from_slice(extra);
    host(&args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A node process and its address; killed on drop.
struct NodeProc(Child, String);

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node(extra: &[&str]) -> NodeProc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["esp32", "node", "--listen", "127.0.0.1:0", "--link", "none"])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a node");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening on ").map(str::to_string))
        .expect("the node says where it listens");
    std::thread::spawn(move || lines.for_each(drop));
    NodeProc(child, addr)
}

fn single_machine(n: &str) -> Vec<u8> {
    let o = host(&["bitnet", "run", "-m", FIXTURE, "-p", PROMPT, "-n", n, "--temp", "0", "-t", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    o.stdout
}

#[test]
fn a_cluster_of_node_processes_prints_the_single_machines_bytes() {
    let want = single_machine("24");
    // Started by the coordinator: the fewest nodes, then one per block; and nodes started apart.
    for nodes in ["auto", "2"] {
        let o = run_fixture("24", &["--nodes", nodes, "--link", "none"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(o.stdout, want, "--nodes {nodes}");
        let err = stderr(&o);
        assert!(err.contains("modelled") && err.contains("tok/s") && err.contains("(emulated)"), "{err}");
    }
    let (a, b) = (node(&[]), node(&["--psram", "300KiB"]));
    let list = format!("{},tcp://{}", a.1, b.1);
    let o = run_fixture("24", &["--nodes", &list]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, want);
}

#[test]
fn damaged_frames_both_ways_are_resent_and_the_bytes_do_not_change() {
    let want = single_machine("16");
    let o = run_fixture(
        "16",
        &["--nodes", "2", "--link", "none", "--flip-every", "3", "--node-flip-every", "3", "--resend-ms", "200"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, want);
    let err = stderr(&o);
    let resent: u64 = err
        .lines()
        .find_map(|l| l.split(" frames resent").next().filter(|_| l.contains("frames resent")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(resent > 0, "{err}");
    // The nodes saw damaged frames too (the coordinator's flips), by their own count.
    assert!(err.lines().any(|l| l.contains("says:") && !l.contains(" 0 damaged frames")), "{err}");
}

#[test]
fn a_node_that_dies_mid_run_is_named_and_the_output_is_marked_incomplete() {
    // The first node holds one block, so the second gets the other.
    let (a, b) = (node(&["--psram", "300KiB"]), node(&["--die-after", "5"]));
    let o = run_fixture("20", &["--nodes", &format!("{},{}", a.1, b.1)]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(err.contains(&format!("node 1 ({})", b.1)) && err.contains("forward"), "{err}");
    assert!(err.contains("stopped after") && err.contains("incomplete"), "{err}");
}

#[test]
fn a_silent_node_times_out_by_name() {
    let a = node(&[]);
    // SIGSTOP: the node keeps its socket open and never answers.
    unsafe { libc::kill(a.0.id() as i32, libc::SIGSTOP) };
    let o = run_fixture("4", &["--nodes", &a.1, "--timeout-ms", "800", "--resend-ms", "200"]);
    unsafe { libc::kill(a.0.id() as i32, libc::SIGCONT) };
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains(&format!("node 0 ({})", a.1)) && err.contains("no answer"), "{err}");
}

#[test]
fn an_assignment_over_budget_is_refused_before_any_weight_moves() {
    let o = run_fixture("4", &["--nodes", "1", "--psram", "300KiB"]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("over budget") && err.contains("more nodes"), "{err}");
    assert!(!err.contains("loaded"), "{err}");
    let o = run_fixture("4", &["--nodes", "1", "--sram", "64KiB"]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("SRAM") && err.contains("64.0 KiB"), "{err}");
}

#[test]
fn bad_arguments_are_named() {
    for (args, want) in [
        (&["--nodes", "nohost"][..], "HOST:PORT"),
        (&["--link", "fast"][..], "uart:921600"),
        (&["--psram", "lots"][..], "8MiB"),
        (&["--nodes", "0"][..], "1 to 64"),
    ] {
        let o = run_fixture("32", args);
        assert!(!o.status.success() && stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    let o = host(&["esp32", "run", "-m", "/nonexistent.gguf"]);
    assert!(!o.status.success() && stderr(&o).contains("/nonexistent.gguf"));
}

#[test]
fn a_node_on_a_serial_line_runs_like_one_on_tcp() {
    use kernels_wasm::bitnet::backend::Backend;
    use kernels_wasm::esp32::msg::Caps;
    use kernels_wasm::esp32::wire::Decoder;
    use kernels_wasm::esp32::Node;
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    // A pseudo-terminal pair: the coordinator opens the tty as it would a USB-UART; the node
    // program answers on the other end, as a board's firmware would.
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors; no name buffer, default termios and size.
    let rc =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0, "openpty");
    let tty = std::fs::read_link(format!("/proc/self/fd/{slave}")).unwrap();
    // Raw mode on the line: no echo, no newline translation of the binary frames.
    // SAFETY: `slave` is an open terminal; termios is plain data.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        libc::tcgetattr(slave, &mut t);
        libc::cfmakeraw(&mut t);
        libc::tcsetattr(slave, libc::TCSANOW, &t);
    }
    // SAFETY: `master` is ours alone from here on.
    let mut line = unsafe { std::fs::File::from_raw_fd(master) };
    std::thread::spawn(move || {
        let caps = Caps {
            name: "serial".into(),
            sram: 512 << 10,
            psram: 8 << 20,
            clock_hz: 240_000_000,
            link_bps: 921_600,
            emulated: true,
        };
        let mut node = Node::new(caps, Backend::Scalar, None);
        let mut dec = Decoder::default();
        let mut buf = [0u8; 4096];
        while let Ok(n) = line.read(&mut buf) {
            if n == 0 {
                break;
            }
            dec.push(&buf[..n]);
            while let Some(d) = dec.next_frame() {
                if line.write_all(&node.on_decoded(d)).is_err() {
                    return;
                }
            }
        }
    });
    let want = single_machine("12");
    let o = run_fixture("12", &["--nodes", &format!("serial://{}@921600", tty.display())]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, want);
    // SAFETY: closing our copy of the slave descriptor.
    unsafe { libc::close(slave) };
}
