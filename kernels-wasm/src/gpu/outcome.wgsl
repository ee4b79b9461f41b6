// The second machine's layer shaders share these (`gpu::deltanet`, `gpu::swiglu`): each declares
// `work` (u32 words, floats by their bits) and `out` (the outcome's four words, then the
// layer's output), and a pass stops reporting after its first error.

// Records the first error: its code, where (a head, a unit or a channel) and the argument.
fn fail(code: u32, at: u32, x: f32) {
    if (atomicMax(&out[0], code) == 0u) {
        atomicStore(&out[1], at);
        atomicStore(&out[2], bitcast<u32>(x));
    }
}

fn wf(i: u32) -> f32 {
    return bitcast<f32>(work[i]);
}
