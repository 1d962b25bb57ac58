#include "comm/gather_int64.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace lattice::comm {

namespace {
// Fixed-size all-gather of `n` int64 per rank.
std::vector<int64_t> gather_fixed(Communicator& group, const std::vector<int64_t>& mine) {
  const size_t n = mine.size();
  if (n == 0) return {};  // every rank passes the same n: nothing to send anywhere
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

std::vector<NamedVector> all_gather_named(Communicator& group, const std::vector<NamedVector>& mine) {
  // Each vector travels as [name length, characters..., value count, value bits...].
  std::vector<int64_t> record;
  for (const auto& [name, values] : mine) {
    record.push_back(int64_t(name.size()));
    for (char c : name) record.push_back(int64_t(static_cast<unsigned char>(c)));
    record.push_back(int64_t(values.size()));
    for (float v : values) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      record.push_back(int64_t(bits));
    }
  }
  std::map<std::string, std::vector<float>> merged;
  for (const auto& rank : all_gather_int64(group, record)) {
    for (size_t i = 0; i < rank.size();) {
      std::string name;
      for (int64_t k = rank[i++]; k > 0; --k) name += char(rank[i++]);
      std::vector<float> values(static_cast<size_t>(rank[i++]));
      for (float& v : values) {
        const auto bits = uint32_t(rank[i++]);
        std::memcpy(&v, &bits, 4);
      }
      merged.emplace(std::move(name), std::move(values));
    }
  }
  return {merged.begin(), merged.end()};
}

}  // namespace lattice::comm
