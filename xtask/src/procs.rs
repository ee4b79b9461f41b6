//! Child processes for serve and test: each in its own process group (so stopping it stops
//! whatever it spawned, e.g. trunk's cargo builds), output streamed with a prefix, stopped on
//! drop, and Ctrl-C / SIGTERM turned into an orderly shutdown.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Set by the signal handler; a signal handler can only touch async-signal-safe state.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Ctrl-C and SIGTERM now ask the main loop to stop instead of killing xtask outright.
pub fn catch_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

pub struct Proc {
    pub name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts `cmd` in a new process group, echoing its output as `[name] line`.
    pub fn spawn(name: &str, cmd: &mut Command) -> Result<Proc> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null()).process_group(0);
        let mut child = cmd.spawn().with_context(|| format!("could not start {name}: {cmd:?}"))?;
        let (tx, lines) = mpsc::channel();
        for stream in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let (tx, prefix) = (tx.clone(), format!("[{name}] "));
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = writeln!(std::io::stdout(), "{prefix}{line}");
                    let _ = tx.send(line);
                }
            });
        }
        Ok(Proc { name: name.to_string(), child, lines })
    }

    /// Waits for an output line starting with `prefix`; fails if the process exits first.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) if line.starts_with(prefix) => return Ok(line),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => self.check_alive()?,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.check_alive()?;
                    bail!("{} closed its output without printing {prefix:?}", self.name)
                }
            }
            if stop_requested() {
                bail!("interrupted");
            }
            if Instant::now() > deadline {
                bail!("{} did not print {prefix:?} within {timeout:?}", self.name);
            }
        }
    }

    /// Fails with the exit status if the process has ended.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("{} exited early ({status}); its output is above", self.name),
            None => Ok(()),
        }
    }

    /// SIGTERM to the whole group, then SIGKILL after 5 s.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: signalling our own child's process group.
        unsafe { libc::killpg(pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                // Stragglers of the group (e.g. a cargo build trunk started) go too.
                unsafe { libc::killpg(pgid, libc::SIGKILL) };
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until `GET /` on 127.0.0.1:`port` answers 200, while `proc` stays alive.
pub fn wait_http_ok(proc: &mut Proc, port: u16, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if http_ok(port) {
            return Ok(());
        }
        proc.check_alive()?;
        if stop_requested() {
            bail!("interrupted");
        }
        if Instant::now() > deadline {
            bail!("{} did not serve http://127.0.0.1:{port}/ within {timeout:?}", proc.name);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn http_ok(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes()).is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// Refuses to start when something already listens on a port we need.
pub fn ensure_free(port: u16, hint: &str) -> Result<()> {
    if TcpStream::connect(("127.0.0.1", port)).is_ok() {
        bail!("127.0.0.1:{port} is already in use ({hint})");
    }
    Ok(())
}

/// `PATH` with the directory of `tool` in front, so children (trunk looking for wasm-bindgen)
/// find what setup installed even when cargo's bin directory is not on the user's PATH.
pub fn path_with(tool: &std::path::Path) -> std::ffi::OsString {
    let mut dirs: Vec<std::path::PathBuf> = tool.parent().map(|d| vec![d.to_path_buf()]).unwrap_or_default();
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}
