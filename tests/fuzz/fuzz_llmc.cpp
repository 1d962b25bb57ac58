// Fuzz target: checkpoint::LlmcCheckpoint (llm.c's gpt2_124M.bin, `lattice train --init FILE.bin`),
// what import_llmc_weights reads before it copies into a model. A file that loads must have a
// consistent header and give every tensor of the model at its Hugging Face size; names outside the
// model must be refused.
#include "checkpoint/llmc_import.hpp"
#include "fuzz_util.hpp"

using namespace lattice;
using namespace lattice::checkpoint;

namespace {

const char* const kLayerSuffixes[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
// Hugging Face shapes: {rows / C (0: a vector), columns / C}.
const int64_t kLayerSizes[][2] = {{0, 1}, {0, 1}, {1, 3}, {0, 3}, {1, 1}, {0, 1},
                                  {0, 1}, {0, 1}, {1, 4}, {0, 4}, {4, 1}, {0, 1}};

void expect_size(const LlmcCheckpoint& ck, const std::string& name, int64_t elements) {
  const std::vector<float> t = ck.tensor(name);
  FUZZ_CHECK(int64_t(t.size()) == elements);
  volatile float sink = 0;
  for (const float v : t) sink = v;
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch() + "/input.bin";
  fuzz::write_file(path, data, size);
  fuzz::accepts([&] {
    const LlmcCheckpoint ck = LlmcCheckpoint::load(path);
    const LlmcShape& s = ck.shape();
    FUZZ_CHECK(s.max_seq_len >= 1 && s.vocab >= 1 && s.layers >= 1 && s.heads >= 1 && s.hidden >= 1);
    FUZZ_CHECK(s.padded_vocab >= s.vocab && s.hidden % s.heads == 0);
    const int64_t C = s.hidden;
    expect_size(ck, "wte.weight", s.vocab * C);
    expect_size(ck, "wpe.weight", s.max_seq_len * C);
    expect_size(ck, "ln_f.weight", C);
    expect_size(ck, "ln_f.bias", C);
    // The first layers and the last (a file is small, but its L may still be large).
    for (int64_t l = 0; l < s.layers; l = l < 2 ? l + 1 : std::max(l + 1, s.layers - 1)) {
      for (size_t k = 0; k < std::size(kLayerSuffixes); ++k) {
        const int64_t rows = kLayerSizes[k][0] == 0 ? 1 : kLayerSizes[k][0] * C;
        expect_size(ck, "h." + std::to_string(l) + "." + kLayerSuffixes[k], rows * kLayerSizes[k][1] * C);
      }
    }
    for (const std::string& bad : {"h." + std::to_string(s.layers) + ".ln_1.weight", std::string("h.-1.ln_1.weight"),
                                  std::string("h.0.ln_3.weight"), std::string("h.0"), std::string("h."),
                                  std::string("lm_head.weight"), std::string("")}) {
      FUZZ_CHECK(!fuzz::accepts([&] { ck.tensor(bad); }));
    }
  });
  return 0;
}
