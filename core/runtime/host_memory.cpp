#include "core/runtime/host_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace engram {

void keep_freed_host_memory() {
#if defined(__GLIBC__)
  // Setting either disables glibc's adaptive threshold, so both are set (the trim threshold alone
  // left every allocation above 128 KiB to mmap and was slower than the default).
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);
#endif
}

}  // namespace engram
