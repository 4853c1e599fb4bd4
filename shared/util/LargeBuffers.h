#pragma once
// Large buffers kept in the process once freed, so that the next one of the same size reuses their pages.
//
// The coordinator makes several buffers of the model's size for every update it takes: the fold's new server
// copy (the one before stays intact until the fold is checked), each publication's file, the rules' states.
// At 5 M parameters each is 20 MB. glibc's malloc serves a block that large with its own mmap and gives it
// back with munmap when freed, so each new one faults in and zeroes 5,000 fresh pages: on a virtual machine,
// where a fault is costly, that was the largest single cost of an accepted update (docs/scale-out.md). Kept,
// a freed block is handed out again as it is.
//
// What it costs: each of malloc's arenas (one per thread that allocates such blocks: the state, checker,
// weights and validation threads) keeps up to 64 MiB of freed memory beyond what it uses, instead of giving
// it back at once. Blocks larger than glibc allows here (32 MiB: models above 8 M parameters) still come and
// go with mmap. Nothing to do with another C library.

namespace gleaner::LargeBuffers {

// Process-wide; called once at the coordinator's start (calling it again changes nothing).
void keepFreed();

} // namespace gleaner::LargeBuffers
