#include "comm/gather_int64.hpp"

#include <algorithm>
#include <cstring>

namespace lattice::comm {

namespace {
// Fixed-size all-gather of `n` int64 per rank.
std::vector<int64_t> gather_fixed(Communicator& group, const std::vector<int64_t>& mine) {
  const size_t n = mine.size();
  std::vector<float> send(n * 2), recv(n * 2 * size_t(group.size()));
  std::memcpy(send.data(), mine.data(), n * 8);
  group.all_gather({send.data(), send.size()}, {recv.data(), recv.size()});
  std::vector<int64_t> all(n * size_t(group.size()));
  std::memcpy(all.data(), recv.data(), all.size() * 8);
  return all;
}
}  // namespace

std::vector<std::vector<int64_t>> all_gather_int64(Communicator& group, const std::vector<int64_t>& mine) {
  const std::vector<int64_t> lengths = gather_fixed(group, {int64_t(mine.size())});
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> padded(mine);
  padded.resize(size_t(longest), 0);
  const std::vector<int64_t> all = gather_fixed(group, padded);
  std::vector<std::vector<int64_t>> rows(size_t(group.size()));
  for (size_t r = 0; r < rows.size(); ++r)
    rows[r].assign(all.begin() + long(r) * longest, all.begin() + long(r) * longest + lengths[r]);
  return rows;
}

}  // namespace lattice::comm
