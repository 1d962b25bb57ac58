#pragma once
// Sizes too large for this machine are refused before anything is allocated: one line naming what
// needs the memory, instead of std::bad_alloc (or the kernel's OOM killer) halfway through.
#include <string>

namespace lattice {

double physical_memory_bytes();  // this machine's RAM
// Throws InputError when `bytes` exceed the machine's memory: "<what> needs X GiB, ...; <advice>".
void require_fits_memory(double bytes, const std::string& what, const std::string& advice);

}  // namespace lattice
