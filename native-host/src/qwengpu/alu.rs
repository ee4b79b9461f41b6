//! `native-host qwengpu alu [--check N]`: the size of the second machine's ALU for one lane
//! (`kernels_wasm::qwengpu::limb_alu`: every `Alu` operation but the divisions and every `Cmp`,
//! side by side on one stream), then N random operand pairs run through it and checked against
//! the ISA's own `eval`.

use anyhow::{bail, Result};
use kernels_wasm::bitnet::random::Rng;
use kernels_wasm::qwengpu::limb_alu::AluStack;

#[derive(clap::Args)]
pub struct Args {
    /// Random operand pairs to run and check.
    #[arg(long, default_value_t = 1000)]
    pub check: usize,
}

pub fn run(a: Args) -> Result<()> {
    let stack = AluStack::build();
    let s = stack.size();
    println!("second machine, one lane's ALU ({} operations side by side):", stack.results.len());
    println!(
        "  {} pre-norm SwiGLU layers, {} hidden units, {} nonzero weights ({:.2e} as dense matrices)",
        s.depth,
        s.hidden_units,
        s.nonzero,
        (3 * s.hidden_units * stack.d) as f64
    );
    println!("  {} channels used, a stream of {} (a power of four, for the norm)", stack.channels, stack.d);
    let mut rng = Rng::new(1);
    let mut wrong = 0;
    for i in 0..a.check {
        let (x, y) = (rng.next_u64() as u32, (rng.next_u64() >> 32) as u32);
        let y = if i % 2 == 1 { y % 40 } else { y };
        wrong += stack.run(x, y).iter().filter(|(op, got)| *got != Some(op.eval(x, y))).count();
    }
    if wrong > 0 {
        bail!("{wrong} results differ from the ISA over {} operand pairs", a.check);
    }
    println!("  {} random operand pairs: every result equal to the ISA's", a.check);
    Ok(())
}
