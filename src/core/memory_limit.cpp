#include "core/memory_limit.hpp"

#include <unistd.h>

#include <cstdio>

#include "core/error.hpp"

namespace lattice {

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

ResidentBytes resident_bytes() {
  ResidentBytes r;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return r;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof(line), f)) {
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) r.now = kib * 1024;
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) r.peak = kib * 1024;
  }
  std::fclose(f);
  return r;
}

void require_fits_memory(double bytes, const std::string& what, const std::string& advice) {
  const double have = physical_memory_bytes();
  if (have <= 0 || bytes <= have) return;
  char text[160];
  std::snprintf(text, sizeof(text), " needs at least %.3g GiB, more than this machine's %.3g GiB", bytes / 1073741824.0,
                have / 1073741824.0);
  fail(what + text + "; " + advice);
}

}  // namespace lattice
