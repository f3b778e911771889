// How many threads ATen's CPU ops use in Engram's programs (the app, the CLI).
#pragma once

namespace engram {

// Debian's libtorch 1.13 runs ATen's CPU ops on one thread unless OMP_NUM_THREADS is set, so the
// CPU path (engram-tiny in the app, every CLI command) used one core of the workstation. Sets the
// intra-op threads to the machine's hardware threads (at most 16); an OMP_NUM_THREADS the person
// set wins. On 2 cores an EpiCache preparation of a 90K history took 23.6 s instead of 34.6 and
// decoded at 1.03 instead of 1.42 ms/token (docs/runtime.md). Call once at startup, before any
// parallel work. The tests run with OMP_NUM_THREADS=1 (tests/CMakeLists.txt).
void use_cpu_threads();

}  // namespace engram
