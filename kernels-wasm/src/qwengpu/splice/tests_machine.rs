//! The machine inside the spliced model, read back and measured: its state rows step by step
//! against an interpreter, and where its non-linear steps run.

use super::tests::{launch_all, llama};
use super::*;
use crate::qwengpu::deltanet::State;
use crate::qwengpu::suite;
use alloc::vec::Vec;
use core::ops::ControlFlow;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// After each step's last token the spliced model's DeltaNet rows hold the machine as the
/// interpreter has it after that step: every register a step sent (its live-out registers, for
/// the lanes that ran; a register no later step reads is never sent, §3), every lane's PC (the
/// rows the model reads its next record from) and global memory as a load mixer holds it. The
/// interpreter here is a second one, stepped apart from the launch's own check.
#[test]
fn the_state_rows_follow_the_interpreter_step_by_step() {
    use super::launch::launch_observed;
    use crate::qwengpu::sequencer::EXITED;
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut runner = Runner::spliced(c, &model, &splice).unwrap();
    let spec = MachineSpec::second();
    let name = if cfg!(target_arch = "wasm32") { "warp_broadcast" } else { "warp_scan" };
    let k = suite::kernels().into_iter().find(|k| k.name == name).unwrap();
    let (kernel, p, mut m) = k.machine(k.ptx, &spec).unwrap();
    let per_cta = p.launch.block.div_ceil(spec.lanes);
    let warps = (p.launch.grid * per_cta, per_cta);
    let mut file = SentRegisters::new(&m);
    let (mut checked, mut wrong) = (0u64, Vec::new());
    launch_observed(&mut runner, &splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |f, r| {
        if f.ends_step {
            let step = m.step().unwrap().unwrap();
            assert_eq!(m.steps, f.steps, "the launch's steps and the second interpreter's");
            file.after(&step, &m);
            let rows = splice.machine_rows(r, warps, spec.regs, m.global.len()).unwrap();
            // The same rows from the three states alone, as a GPU's are decoded once read back.
            let at = splice.row_layers();
            let nets = [at.file, at.memory, at.pcs].map(|i| r.deltanet(i).unwrap());
            let views = nets.map(|n| State::of(&n.state, n.weights()).unwrap());
            let alone = splice.rows_of(views.each_ref(), warps, spec.regs, m.global.len());
            assert_eq!(alone, rows, "step {}: the rows decoded from the states alone", f.steps);
            assert!(State::of(&nets[0].state[1..], nets[0].weights()).is_none(), "a state one value short");
            for row in &rows.registers {
                let (w, l) = (row.warp as usize, row.lane as usize);
                let regs = file.regs[w][l].iter().map(|&v| Some(v)).collect::<Vec<_>>();
                let pc = m.warps[w].pcs[l].map_or(EXITED, |pc| pc as u8);
                if row.values != regs || row.pc != Some(u32::from(pc)) {
                    wrong.push(alloc::format!("step {}: {row:?}, sent {regs:?}, pc {pc}", f.steps));
                }
            }
            if rows.memory != m.global.iter().map(|&w| Some(w)).collect::<Vec<_>>() {
                wrong.push(alloc::format!("step {}: memory {:?}", f.steps, rows.memory));
            }
            checked += 1;
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    assert!(m.finished() && checked == m.steps && checked > 10, "{checked} steps checked of {}", m.steps);
    assert!(wrong.is_empty(), "{} differ, first: {}", wrong.len(), wrong[..4.min(wrong.len())].join("\n"));
}

/// Every non-linear step of the machine's layers runs, over launches with registers, shared
/// memory, atomics and barriers, where its result is exact whatever the last ulp of `exp`, `ln`,
/// `sqrt` and `÷`: the DeltaNets' SiLU, sigmoid, softplus, `exp` and the norms' `1/√`
/// (`deltanet::Regime`), and every SwiGLU gate's SiLU (±0 or |g| ≥ 104: those evaluated at each
/// position, and the bias-only gate of every unit the schedule leaves out). That is the property
/// `limb_memory`'s and `limbs`' arguments give, measured. So the bits do not depend on the
/// platform's libm, and a port (WGSL's `exp` is 3 + 2|x| ulp) can compute these steps by their
/// branches.
#[test]
fn the_deltanets_nonlinear_steps_run_where_they_are_exact() {
    use crate::qwengpu::deltanet::{Regime, Regimes};
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut runner = Runner::spliced(c, &model, &splice).unwrap();
    runner.watch_regimes();
    let names: &[&str] = if cfg!(target_arch = "wasm32") {
        &["warp_broadcast"]
    } else {
        &["reduce_shared", "histogram", "reverse", "transpose"]
    };
    launch_all(&mut runner, &splice, names);
    let mut all = Regimes::default();
    for net in (0..splice.layers.len()).filter_map(|i| runner.deltanet(i)) {
        let r = net.regimes.as_ref().unwrap();
        for i in 0..Regime::ALL.len() {
            (all.exact[i], all.other[i]) = (all.exact[i] + r.exact[i], all.other[i] + r.other[i]);
            all.first_other[i] = all.first_other[i].or(r.first_other[i]);
        }
    }
    for (i, r) in Regime::ALL.iter().enumerate() {
        assert!(
            all.other[i] == 0,
            "{r:?}: {} arguments outside the exact places, the first {:?}",
            all.other[i],
            all.first_other[i]
        );
        assert!(all.exact[i] > 0, "{r:?} never ran");
    }
    assert_eq!(runner.swiglu_gates_outside(), Some(0), "SwiGLU gates whose SiLU needs exp");
    // A unit left out at a position has the gate of its bias terms alone (`awake`).
    let bias = splice.machine_bias(&splice.norms(&model));
    let resting = splice.layers.iter().flat_map(|l| match l {
        Compiled::SwiGlu(l) => l
            .units
            .iter()
            .map(|u| u.gate.iter().filter(|g| g.0 == splice.bias).fold(0.0f32, |s, g| s + g.1 * bias))
            .collect(),
        Compiled::DeltaNet(_) => Vec::new(),
    });
    let (mut units, mut outside) = (0, Vec::new());
    for g in resting {
        units += 1;
        if g != 0.0 && g.abs() < 104.0 {
            outside.push(g);
        }
    }
    assert!(
        units > 100_000 && outside.is_empty(),
        "{} of {units} resting gates need exp: {:?}",
        outside.len(),
        &outside[..outside.len().min(5)]
    );
}
