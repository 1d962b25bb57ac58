#pragma once
// Gathering int64 records from every rank (reports, traces): the values travel bit for bit as
// pairs of floats through all-gather (no arithmetic touches them), lengths may differ by rank.
#include <cstdint>
#include <vector>

#include "comm/communicator.hpp"

namespace lattice::comm {

// Every rank's `mine`, in rank order, on every rank. Collective over `group`.
std::vector<std::vector<int64_t>> all_gather_int64(Communicator& group, const std::vector<int64_t>& mine);

}  // namespace lattice::comm
