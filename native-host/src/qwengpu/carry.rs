//! `native-host qwengpu carry [--json] [--no-divider]`: the tokens each suite kernel's steps would take if a
//! language model ran the machine one step per position, every word a later step reads sent on
//! as two 16-bit value tokens (`kernels_wasm::qwengpu::carry`; issue #22). The first design
//! takes about 11.6 tokens a step by its own rule (`qwengpu bench` prints its count); this is
//! the floor that any design of that kind pays.

use anyhow::{anyhow, Result};
use kernels_wasm::qwengpu::carry::{block_carry, run_tallied, Tally};
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::suite::kernels;

#[derive(clap::Args)]
pub struct Args {
    /// Print `{"kernels": [{"name", "steps", "tokens", "compact_tokens", "one_token_steps"}, …],
    /// "steps", "tokens", "per_step", "compact_tokens", "compact_per_step"}` only.
    #[arg(long)]
    pub json: bool,
    /// Lower for a machine without a divider: each `div`/`rem` becomes a loop of other
    /// instructions (`soft_div`), as the second machine needs, on a ROM of 256 blocks.
    #[arg(long)]
    pub no_divider: bool,
}

/// One kernel's run tallied: every word in two tokens, and narrow words in one.
pub struct Row {
    pub name: &'static str,
    /// ROM blocks the program takes.
    pub blocks: usize,
    pub fixed: Tally,
    pub compact: Tally,
}

/// The machine the tallies lower for: qwenGPU's, or the same without a divider (and a ROM
/// large enough for the division loops).
pub fn spec(divider: bool) -> MachineSpec {
    if divider {
        MachineSpec::default()
    } else {
        MachineSpec { divider: false, rom_blocks: 256, ..MachineSpec::default() }
    }
}

/// Every suite kernel run on the interpreter, its steps tallied.
pub fn suite_tally(spec: &MachineSpec) -> Result<Vec<Row>> {
    kernels()
        .into_iter()
        .map(|k| {
            let (kernel, _, mut m) = k.machine(k.ptx, spec).map_err(|e| anyhow!(e))?;
            let t = run_tallied(&mut m, &block_carry(&kernel.program), 1_000_000)
                .map_err(|e| anyhow!("{}: {e}", k.name))?;
            Ok(Row { name: k.name, blocks: kernel.program.blocks.len(), fixed: t.fixed, compact: t.compact })
        })
        .collect()
}

fn sum(rows: &[Row], pick: impl Fn(&Row) -> Tally) -> Tally {
    rows.iter().map(pick).fold(Tally::default(), |t, r| Tally {
        steps: t.steps + r.steps,
        tokens: t.tokens + r.tokens,
        one_token_steps: t.one_token_steps + r.one_token_steps,
    })
}

pub fn run(a: Args) -> Result<()> {
    let rows = suite_tally(&spec(!a.no_divider))?;
    let (fixed, compact) = (sum(&rows, |r| r.fixed), sum(&rows, |r| r.compact));
    if a.json {
        let kernels: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({"name": r.name, "blocks": r.blocks, "steps": r.fixed.steps, "tokens": r.fixed.tokens,
                    "compact_tokens": r.compact.tokens, "one_token_steps": r.fixed.one_token_steps})
            })
            .collect();
        let out = serde_json::json!({
            "kernels": kernels, "steps": fixed.steps, "tokens": fixed.tokens, "per_step": fixed.per_step(),
            "compact_tokens": compact.tokens, "compact_per_step": compact.per_step(),
        });
        println!("{out}");
        return Ok(());
    }
    println!("tokens per machine step at one step per position: the record token, then each word a later");
    println!("step reads as two 16-bit value tokens (fixed), or as one where its value fits 16 bits (compact):");
    println!(
        "{:<18} {:>6} {:>7} {:>8} {:>11} {:>13} {:>10}",
        "kernel", "blocks", "steps", "tokens", "tokens/step", "compact/step", "one-token"
    );
    for r in &rows {
        let share = 100.0 * r.fixed.one_token_steps as f64 / r.fixed.steps.max(1) as f64;
        let (t, c) = (&r.fixed, &r.compact);
        println!(
            "{:<18} {:>6} {:>7} {:>8} {:>11.2} {:>13.2} {:>8.0} %",
            r.name,
            r.blocks,
            t.steps,
            t.tokens,
            t.per_step(),
            c.per_step(),
            share
        );
    }
    println!(
        "all {} kernels: {} steps, {} tokens, {:.2} tokens per step ({:.2} compact); {:.0} % of steps carry nothing",
        rows.len(),
        fixed.steps,
        fixed.tokens,
        fixed.per_step(),
        compact.per_step(),
        100.0 * fixed.one_token_steps as f64 / fixed.steps.max(1) as f64
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_kernel_is_tallied_and_no_step_is_below_one_token() {
        let rows = suite_tally(&spec(true)).unwrap();
        assert_eq!(rows.len(), kernels().len());
        for r in rows {
            let (t, c) = (r.fixed, r.compact);
            assert!(t.steps > 0 && t.tokens >= t.steps && t.one_token_steps < t.steps, "{}: {t:?}", r.name);
            assert!(c.steps == t.steps && c.tokens <= t.tokens, "{}: {c:?} {t:?}", r.name);
        }
    }
}
