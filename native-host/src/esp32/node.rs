//! `native-host esp32 node`: the node program on this machine, behind a TCP port, inside its
//! memory budget, with its link slowed to the modelled UART. Everything it reports is labelled
//! emulated.

use super::{now_us, Board};
use anyhow::{Context, Result};
use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::esp32::coord::Flipper;
use kernels_wasm::esp32::msg::{Caps, Request};
use kernels_wasm::esp32::wire::{Decoded, Decoder};
use kernels_wasm::esp32::{cost, Node};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Address to listen on (port 0: any free port; the line "listening on ADDR" says which).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub board: Board,
    /// Name reported in the hello.
    #[arg(long, default_value = "esp32-s3 (emulated)")]
    pub name: String,
    /// Also slow weight loads to the link rate (a 125M model's 26 MB take ~5 minutes at 921600
    /// baud; by default only activations wait, as if the weights were already in flash).
    #[arg(long)]
    pub throttle_load: bool,
    /// Fault injection: damage one bit in about one of every N frames this node sends.
    #[arg(long, default_value_t = 0)]
    pub flip_every: u32,
    /// Fault injection: exit abruptly (as a board losing power) after answering N forwards.
    #[arg(long)]
    pub die_after: Option<u64>,
}

pub fn run(args: Args) -> Result<()> {
    let listener = TcpListener::bind(args.listen).with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        crate::warn!(
            "WARNING: {addr} is reachable from other machines; the node takes weights from anyone who connects"
        );
    }
    crate::say!(
        "esp32 node \"{}\" (emulated): SRAM {}, PSRAM {}, {} MHz, link {}",
        args.name,
        kernels_wasm::esp32::budget::bytes(args.board.sram),
        kernels_wasm::esp32::budget::bytes(args.board.psram),
        args.board.clock / 1_000_000,
        if args.board.link == 0 { "unthrottled".to_string() } else { format!("UART {} baud", args.board.link) }
    );
    crate::say!("listening on {addr}");
    let caps = Caps {
        name: args.name.clone(),
        sram: args.board.sram,
        psram: args.board.psram,
        clock_hz: args.board.clock,
        link_bps: args.board.link,
        emulated: true,
    };
    // The portable kernels: the code a board runs (the same bits as any other backend).
    let mut node = Node::new(caps, Backend::Scalar, Some(now_us));
    let mut flip = Flipper::new(args.flip_every, addr.port() as u64 + 1);
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                crate::warn!("accept: {e}");
                continue;
            }
        };
        let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        crate::say!("coordinator {peer} connected");
        node.reconnect();
        match serve(stream, &mut node, &mut flip, &args) {
            Ok(()) => crate::say!("coordinator {peer} left"),
            Err(e) => crate::say!("coordinator {peer}: {e:#}"),
        }
        let s = node.stats();
        crate::say!(
            "stats (emulated): {} forwards, {} rows, {} frames in / {} out, {} damaged in, {} resent, modelled {:.1} ms, wall {:.1} ms",
            s.forwards,
            s.rows,
            s.frames_in,
            s.frames_out,
            s.corrupt_in,
            s.resent,
            s.modelled_us as f64 / 1e3,
            s.wall_us as f64 / 1e3
        );
    }
    Ok(())
}

/// Waits as long as `bytes` take on the modelled UART.
fn throttle(bytes: usize, bps: u64) {
    let us = cost::link_micros(bytes as u64, bps);
    if us > 0 {
        std::thread::sleep(Duration::from_micros(us));
    }
}

fn serve(mut s: TcpStream, node: &mut Node, flip: &mut Flipper, args: &Args) -> Result<()> {
    s.set_nodelay(true)?;
    let mut dec = Decoder::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        dec.push(&buf[..n]);
        while let Some(d) = dec.next_frame() {
            let slow = match &d {
                Decoded::Frame(f) => args.throttle_load || !Request::is_load(f.cmd),
                Decoded::Corrupt(_) => true,
            };
            let size = match &d {
                Decoded::Frame(f) => f.payload.len() + kernels_wasm::esp32::wire::HEADER + 2,
                Decoded::Corrupt(_) => 0,
            };
            if slow {
                // The request's bytes arriving over the UART.
                throttle(size, args.board.link);
            }
            let mut out = node.on_decoded(d);
            if out.is_empty() {
                continue;
            }
            flip.apply(&mut out);
            if slow {
                throttle(out.len(), args.board.link);
            }
            s.write_all(&out)?;
            if args.die_after.is_some_and(|n| node.stats().forwards >= n) {
                crate::say!("--die-after: exiting now, as a board losing power");
                std::process::exit(3);
            }
        }
    }
}
