/* What every substrates BPF program needs, without libbpf's headers: the helper calls by their
 * UAPI ids and the BTF map-definition macros libbpf reads. */
#ifndef SUBSTRATES_BPF_COMMON_H
#define SUBSTRATES_BPF_COMMON_H

#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

/* Helper ids from include/uapi/linux/bpf.h (enum bpf_func_id). */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to, __u32 len) =
    (void *)BPF_FUNC_skb_load_bytes;
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags) =
    (void *)BPF_FUNC_loop;

char LICENSE[] SEC("license") = "GPL";

#endif
