//! Byte links to nodes: TCP for emulated nodes, a serial port for real boards.

use anyhow::{bail, Context, Result};
use kernels_wasm::esp32::{Link, LinkError};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A node's address as the user writes it: `HOST:PORT` / `tcp://HOST:PORT`, or
/// `serial:///dev/ttyUSB0@921600`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Tcp(String),
    Serial { path: String, baud: u32 },
}

impl Addr {
    pub fn parse(s: &str) -> Result<Addr> {
        if let Some(rest) = s.strip_prefix("serial://") {
            let (path, baud) = rest.rsplit_once('@').unwrap_or((rest, "921600"));
            let baud: u32 = baud.parse().with_context(|| format!("{s}: the baud rate after @ is not a number"))?;
            if !path.starts_with('/') || baud == 0 {
                bail!("{s}: write a serial node as serial:///dev/ttyUSB0@921600");
            }
            return Ok(Addr::Serial { path: path.into(), baud });
        }
        let host = s.strip_prefix("tcp://").unwrap_or(s);
        if !host.contains(':') {
            bail!("{s}: write a node as HOST:PORT, tcp://HOST:PORT or serial:///dev/ttyUSB0@921600");
        }
        Ok(Addr::Tcp(host.into()))
    }

    pub fn open(&self) -> Result<Box<dyn Link + Send>> {
        Ok(match self {
            Addr::Tcp(a) => {
                let s = TcpStream::connect(a).with_context(|| format!("connecting to node {a}"))?;
                s.set_nodelay(true)?;
                Box::new(Tcp(s))
            }
            Addr::Serial { path, baud } => {
                let port = serialport::new(path, *baud)
                    .timeout(Duration::from_millis(50))
                    .open()
                    .with_context(|| format!("opening {path} at {baud} baud"))?;
                Box::new(Serial(port))
            }
        })
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Tcp(a) => write!(f, "{a}"),
            Addr::Serial { path, baud } => write!(f, "serial://{path}@{baud}"),
        }
    }
}

pub struct Tcp(pub TcpStream);
pub struct Serial(Box<dyn serialport::SerialPort>);

fn io(e: std::io::Error) -> LinkError {
    match e.kind() {
        ErrorKind::ConnectionReset
        | ErrorKind::BrokenPipe
        | ErrorKind::UnexpectedEof
        | ErrorKind::ConnectionAborted => LinkError::Closed,
        _ => LinkError::Io(e.to_string()),
    }
}

/// Reads what arrives within `wait_ms` from a reader whose timeout is set to it.
fn read_some(r: &mut dyn Read, into: &mut Vec<u8>) -> Result<usize, LinkError> {
    let mut buf = [0u8; 16 * 1024];
    match r.read(&mut buf) {
        Ok(0) => Err(LinkError::Closed),
        Ok(n) => {
            into.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => Ok(0),
        Err(e) => Err(io(e)),
    }
}

impl Link for Tcp {
    fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        self.0.write_all(bytes).map_err(io)
    }

    fn recv(&mut self, wait_ms: u32, into: &mut Vec<u8>) -> Result<usize, LinkError> {
        self.0.set_read_timeout(Some(Duration::from_millis(wait_ms.max(1) as u64))).map_err(io)?;
        read_some(&mut self.0, into)
    }
}

impl Link for Serial {
    fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        self.0.write_all(bytes).and_then(|()| self.0.flush()).map_err(io)
    }

    fn recv(&mut self, wait_ms: u32, into: &mut Vec<u8>) -> Result<usize, LinkError> {
        self.0.set_timeout(Duration::from_millis(wait_ms.max(1) as u64)).map_err(|e| LinkError::Io(e.to_string()))?;
        read_some(&mut self.0, into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_or_say_how_to_write_them() {
        assert_eq!(Addr::parse("127.0.0.1:9000").unwrap(), Addr::Tcp("127.0.0.1:9000".into()));
        assert_eq!(Addr::parse("tcp://h:1").unwrap(), Addr::Tcp("h:1".into()));
        assert_eq!(
            Addr::parse("serial:///dev/ttyUSB0@460800").unwrap(),
            Addr::Serial { path: "/dev/ttyUSB0".into(), baud: 460800 }
        );
        for bad in ["nohost", "serial://ttyUSB0@9600", "serial:///dev/x@fast"] {
            assert!(Addr::parse(bad).is_err(), "{bad}");
        }
    }
}
