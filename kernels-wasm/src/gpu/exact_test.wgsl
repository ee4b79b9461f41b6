// Test entry: for each pair (a, b), sqrt_rn(a) and div_rn(a, b) with their flags.
@group(0) @binding(0) var<storage, read> pairs: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<u32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 64u;
    if (i >= arrayLength(&pairs)) {
        return;
    }
    let s = sqrt_rn(pairs[i].x);
    let d = div_rn(pairs[i].x, pairs[i].y);
    out[i] = vec4<u32>(bitcast<u32>(s.value), s.flags, bitcast<u32>(d.value), d.flags);
}
