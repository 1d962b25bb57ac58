#pragma once
// Re-assembling tensor-parallel shards into one rank's layout (for checkpoints and reports).
#include <vector>

#include "comm/communicator.hpp"
#include "model/params.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

// `local` is this rank's flat buffer laid out by ParamTable(config, t, rank); returns the whole
// model laid out by ParamTable(config) (padding rows past the one-rank padded vocabulary dropped).
// Collective over `tp` (null or size 1: a copy).
tracked_vector<float, MemoryCategory::checkpoint_io> gather_full(comm::Communicator* tp, const ModelConfig& config, const float* local);

}  // namespace lattice::parallel
