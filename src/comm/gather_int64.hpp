#pragma once
// Gathering int64 records from every rank (reports, traces): the values travel bit for bit as
// pairs of floats through all-gather (no arithmetic touches them), lengths may differ by rank.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace lattice::comm {

// Every rank's `mine`, in rank order, on every rank. Collective over `group`.
std::vector<std::vector<int64_t>> all_gather_int64(Communicator& group, const std::vector<int64_t>& mine);

// Named float vectors held by different ranks (e.g. pipeline stages' optimizer tensor states)
// → their union, sorted by name, on every rank; a name several ranks hold is taken once.
using NamedVector = std::pair<std::string, std::vector<float>>;
std::vector<NamedVector> all_gather_named(Communicator& group, const std::vector<NamedVector>& mine);

}  // namespace lattice::comm
