#pragma once
// The rank grid of a layout drawn as Megatron users draw it on a whiteboard: one panel per group
// kind (TP, DP, PP, embedding, and EP and expert-DP when e > 1); in each, pipeline stages are
// columns of blocks, a block's rows are DP ranks and its cells TP ranks; cells of one colour form
// one group.
#include <string>

#include "comm/groups.hpp"

namespace lattice::parallel {

inline constexpr int kMaxSvgRanks = 4096;  // beyond this a drawing stops being readable

// A self-contained SVG document. Throws lattice::InputError above kMaxSvgRanks.
std::string groups_svg(const ParallelLayout& layout);

}  // namespace lattice::parallel
