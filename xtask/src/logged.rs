//! Child processes whose output behaves in logs.
//!
//! On a terminal a child keeps the terminal: its own progress bars are what a person wants to
//! watch. Elsewhere (CI logs, pipes) the tools still redraw with carriage returns (dpkg's
//! "Reading database ... 5%" is one), and every redraw would stay in the log as a line. So off a
//! terminal the child's output goes through [`Lines`], which keeps only what a redraw settles on,
//! and a quiet child gets a line every [`QUIET`] saying it is still running and for how long.

use anyhow::{Context, Result};
use std::io::{IsTerminal, Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Silence after which a "still running" line is printed (and again after each such span).
const QUIET: Duration = Duration::from_secs(10);

/// Runs `cmd` to its end, as `Command::status` does; off a terminal, with [`Lines`] between its
/// output and ours and a line now and then while it is quiet. `what` names it in those lines.
pub fn status(what: &str, cmd: &mut Command) -> Result<ExitStatus> {
    if std::io::stdout().is_terminal() {
        return cmd.status().with_context(|| format!("could not start: {what}"));
    }
    piped(what, cmd)
}

/// [`status`] off a terminal.
fn piped(what: &str, cmd: &mut Command) -> Result<ExitStatus> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start: {what}"))?;
    let start = Instant::now();
    // Milliseconds since `start` of the last line printed, by either stream.
    let last = Arc::new(AtomicU64::new(0));
    let relay = |stream: Option<Box<dyn Read + Send>>, to_stderr: bool| {
        let last = Arc::clone(&last);
        std::thread::spawn(move || {
            let Some(mut stream) = stream else { return };
            let (mut lines, mut buf) = (Lines::default(), [0u8; 8192]);
            let emit = |line: &str| {
                let _ = if to_stderr {
                    writeln!(std::io::stderr(), "{line}")
                } else {
                    writeln!(std::io::stdout(), "{line}")
                };
                last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            };
            while let Ok(n @ 1..) = stream.read(&mut buf) {
                lines.push(&buf[..n]).iter().for_each(|l| emit(l));
            }
            if let Some(l) = lines.finish() {
                emit(&l);
            }
        })
    };
    let out = relay(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>), false);
    let err = relay(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>), true);
    let status = loop {
        if let Some(status) = child.try_wait().with_context(|| format!("waiting for: {what}"))? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
        let now = start.elapsed();
        if now.saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed))) >= QUIET {
            println!("    .. {what}: still running ({:.0?})", now);
            last.store(now.as_millis() as u64, Ordering::Relaxed);
        }
    };
    let _ = (out.join(), err.join());
    Ok(status)
}

/// Bytes to lines, where a carriage return not followed by a newline starts the line over (a
/// redraw), so only what the line finally says is kept.
#[derive(Default)]
pub struct Lines {
    line: Vec<u8>,
    /// The last byte seen was a carriage return: the next decides whether it ended the line
    /// (`\r\n`) or started a redraw.
    cr: bool,
}

impl Lines {
    /// The lines that `bytes` completes.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut done = Vec::new();
        for &b in bytes {
            if std::mem::take(&mut self.cr) && b != b'\n' {
                self.line.clear();
            }
            match b {
                b'\n' => done.push(String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned()),
                b'\r' => self.cr = true,
                _ => self.line.push(b),
            }
        }
        done
    }

    /// What is left once the stream ends, if anything.
    pub fn finish(self) -> Option<String> {
        (!self.line.is_empty()).then(|| String::from_utf8_lossy(&self.line).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redraws_leave_only_their_last_state_and_plain_lines_pass_whole() {
        let mut l = Lines::default();
        let mut got = l.push(b"Setting up x\n(Reading database ... 5%\r(Reading database ... 95%\r");
        // The carriage return and its newline in separate reads still end one line.
        got.extend(l.push(b"\r(Reading database ... 100 files installed.)\r"));
        got.extend(l.push(b"\ndone\r\nhalf"));
        assert_eq!(got, ["Setting up x", "(Reading database ... 100 files installed.)", "done"]);
        assert_eq!(l.finish().as_deref(), Some("half"));
        assert_eq!(Lines::default().finish(), None);
    }

    #[test]
    fn a_piped_child_reports_its_status_and_its_lines_survive() {
        let ok = piped("sh", Command::new("sh").args(["-c", "printf 'a\\rb\\n'; echo err >&2; exit 3"])).unwrap();
        assert_eq!(ok.code(), Some(3));
        assert!(piped("missing", &mut Command::new("/nonexistent/tool")).is_err());
    }
}
