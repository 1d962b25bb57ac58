#pragma once
// Sizes and rates as users type them: "80GB", "80GiB", "141e9", "312T".
#include <cstdint>
#include <string>

namespace lattice::plan {

// Bytes from a number with an optional unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB,
// GiB, TiB (powers of 1024), case-insensitive. Throws InputError naming `flag`.
int64_t parse_bytes(const std::string& text, const std::string& flag);
// FLOP/s from a number with an optional G, T or P suffix ("312T" = 312e12).
double parse_rate(const std::string& text, const std::string& flag);

}  // namespace lattice::plan
