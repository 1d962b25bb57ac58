#include "core/memory_limit.hpp"

#include <unistd.h>

#include <cstdio>

#include "core/error.hpp"

namespace lattice {

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
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
