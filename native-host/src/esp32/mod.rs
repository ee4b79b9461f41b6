//! `native-host esp32 …`: BitNet layers split across ESP32-S3 nodes.
//!
//! - [`node`]: `esp32 node`, an emulated board behind a TCP port.
//! - [`run`]: `esp32 run`, the coordinator: plan, load, pipeline, report (also the bridge's).
//! - [`link`]: TCP and serial links.

pub mod link;
pub mod node;
pub mod run;

use std::sync::OnceLock;
use std::time::Instant;

/// Microseconds since the first call: the node's and coordinator's clock.
pub fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// A board's resources: what `esp32 node` emulates, and what `esp32 run` gives the nodes it
/// starts.
#[derive(clap::Args, Clone, Debug)]
pub struct Board {
    /// SRAM for activations, tables, frame buffer and stack.
    #[arg(long, default_value = "512KiB", value_parser = parse_size)]
    pub sram: u64,
    /// PSRAM for weights and the KV cache.
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub psram: u64,
    /// CPU clock of the modelled board.
    #[arg(long, default_value = "240MHz", value_parser = parse_hz)]
    pub clock: u64,
    /// The modelled link: uart:BAUD, or none (unthrottled).
    #[arg(long, default_value = "uart:921600", value_parser = parse_link)]
    pub link: u64,
}

impl Board {
    /// The same resources as `esp32 node` flags.
    pub fn to_args(&self) -> Vec<String> {
        let link = if self.link == 0 { "none".into() } else { format!("uart:{}", self.link) };
        [
            "--sram",
            &self.sram.to_string(),
            "--psram",
            &self.psram.to_string(),
            "--clock",
            &self.clock.to_string(),
            "--link",
            &link,
        ]
        .map(String::from)
        .to_vec()
    }
}

/// `512KiB`, `8MiB`, `4096`, `1.5MiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)]
        .iter()
        .find_map(|(suffix, m)| t.strip_suffix(suffix).map(|n| (n, *m)))
        .unwrap_or((t, 1));
    let v: f64 = num.trim().parse().map_err(|_| format!("{s:?}: write a size as 512KiB, 8MiB or a number of bytes"))?;
    if !(v.is_finite() && v > 0.0 && v * mul as f64 <= (1u64 << 40) as f64) {
        return Err(format!("{s:?}: give a size above zero and at most 1 TiB"));
    }
    Ok((v * mul as f64) as u64)
}

/// `240MHz`, `80MHz`, `1GHz`, a number of Hz.
pub fn parse_hz(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = [("GHz", 1e9), ("MHz", 1e6), ("kHz", 1e3), ("Hz", 1.0)]
        .iter()
        .find_map(|(suffix, m)| t.strip_suffix(suffix).map(|n| (n, *m)))
        .unwrap_or((t, 1.0));
    let v: f64 = num.trim().parse().map_err(|_| format!("{s:?}: write a clock as 240MHz"))?;
    if !(v.is_finite() && v * mul >= 1e6 && v * mul <= 1e10) {
        return Err(format!("{s:?}: give a clock between 1 MHz and 10 GHz"));
    }
    Ok((v * mul) as u64)
}

/// `uart:921600` (bits per second, 8N1), or `none` for an unthrottled link (0).
pub fn parse_link(s: &str) -> Result<u64, String> {
    if s == "none" {
        return Ok(0);
    }
    let baud = s.strip_prefix("uart:").ok_or_else(|| format!("{s:?}: write the link as uart:921600 or none"))?;
    match baud.parse::<u64>() {
        Ok(b) if (300..=100_000_000).contains(&b) => Ok(b),
        _ => Err(format!("{s:?}: give a baud rate from 300 to 100000000")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_clocks_and_links_parse_or_say_how_to_write_them() {
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_hz("240MHz"), Ok(240_000_000));
        assert_eq!(parse_link("uart:921600"), Ok(921_600));
        assert_eq!(parse_link("none"), Ok(0));
        for bad in ["", "-1KiB", "lots", "0"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_hz("fast").is_err() && parse_hz("10Hz").is_err());
        assert!(parse_link("921600").is_err() && parse_link("uart:x").is_err());
    }
}
