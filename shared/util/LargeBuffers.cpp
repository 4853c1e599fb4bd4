#include "util/LargeBuffers.h"

#include <cstdlib> // defines __GLIBC__ where it is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gleaner::LargeBuffers {
namespace {

#if defined(__GLIBC__)
// The most glibc takes for M_MMAP_THRESHOLD on a 64-bit system (HEAP_MAX_SIZE / 2): blocks up to this size
// come from the heap.
constexpr int kLargestFromHeap = 32 * 1024 * 1024;
// Freed memory at the top of each arena's heap that is kept rather than given back: three buffers of a model
// of 5 M parameters.
constexpr int kKeptBytes = 64 * 1024 * 1024;
#endif

} // namespace

void keepFreed()
{
#if defined(__GLIBC__)
    // Setting them also turns off glibc's own adjustment of both, which on its own left most of these blocks
    // to mmap under uploads (bench_assimilate, docs/scale-out.md).
    (void)mallopt(M_MMAP_THRESHOLD, kLargestFromHeap);
    (void)mallopt(M_TRIM_THRESHOLD, kKeptBytes);
#endif
}

} // namespace gleaner::LargeBuffers
