#pragma once
// Sizes too large for this machine are refused before anything is allocated: one line naming what
// needs the memory, instead of std::bad_alloc (or the kernel's OOM killer) halfway through.
#include <cstdint>
#include <string>

namespace lattice {

double physical_memory_bytes();  // this machine's RAM
// This process's resident set from the OS (/proc/self/status): now, and its peak (VmHWM). 0 where the
// OS does not say.
struct ResidentBytes {
  int64_t now = 0, peak = 0;
};
ResidentBytes resident_bytes();
// Throws InputError when `bytes` exceed the machine's memory: "<what> needs X GiB, ...; <advice>".
void require_fits_memory(double bytes, const std::string& what, const std::string& advice);

}  // namespace lattice
