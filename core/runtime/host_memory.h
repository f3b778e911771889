// How the process's C heap treats the large, short-lived tensors of CPU inference.
#pragma once

namespace engram {

// glibc serves allocations above a threshold (128 KiB at start, adapting up to 32 MiB) with a
// fresh mmap and returns freed heap tops to the kernel, so each prefill block's scores and
// activations (tens of MB on engram-tiny) came back as zeroed pages: page faults and page clears
// were ~10 % of an EpiCache episode build's CPU time. Fixes the threshold at glibc's maximum
// (32 MiB) and keeps up to 256 MiB of freed memory for reuse: an engram-tiny episode build of a
// 5,000-token history on 2 cores went from 8.8-9.2 s to 5.8-6.0 s. Call once at startup, before
// threads allocate. Elsewhere than glibc it does nothing.
void keep_freed_host_memory();

}  // namespace engram
