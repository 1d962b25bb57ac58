#include "plan/paper_models.hpp"

namespace lattice::plan {

const std::vector<PaperModel>& paper_models() {
  static const std::vector<PaperModel> models = {
      {"22B", 64, 6144, 48, 1, 1, 8, 4, 4, 1.42, 1.10, 41.5, 43.7},
      {"175B", 96, 12288, 96, 8, 3, 64, 64, 1, 18.13, 13.75, 51.4, 52.8},
      {"530B", 128, 20480, 105, 35, 3, 280, 280, 1, 49.05, 37.83, 56.0, 57.0},
      {"1T", 160, 25600, 128, 64, 1, 512, 512, 1, 94.42, 71.49, 56.3, 57.0},
  };
  return models;
}

PlanRequest paper_request(const PaperModel& m, Recompute recompute, bool sequence_parallel) {
  PlanRequest r;
  r.model.layers = m.layers;
  r.model.hidden = m.hidden;
  r.model.heads = m.heads;
  r.model.seq_len = 2048;
  r.model.vocab = 51200;
  r.model.dropout = 0.1;
  r.layout.tp = 8;
  r.layout.pp = m.pp;
  r.layout.virtual_stages = m.virtual_stages;
  r.layout.dp = m.gpus / (8 * m.pp);
  r.layout.sequence_parallel = sequence_parallel;
  r.layout.recompute = recompute;
  r.layout.activation_dtype = DType::bf16;
  r.layout.params_dtype = ParamsDType::bf16;
  r.micro_batch = m.micro_batch;
  r.global_batch = m.global_batch;
  r.gpus = m.gpus;
  r.gpu_memory = int64_t(80) * 1000 * 1000 * 1000;
  return r;
}

const std::vector<PaperLayerTiming>& paper_table4() {
  static const std::vector<PaperLayerTiming> rows = {
      {"baseline (no recompute)", Recompute::none, false, 7.7, 11.9},
      {"sequence parallel", Recompute::none, true, 7.2, 11.8},
      {"full recompute", Recompute::full, false, 7.7, 19.5},
      {"selective recompute", Recompute::selective, false, 7.7, 13.2},
      {"selective + SP", Recompute::selective, true, 7.2, 13.1},
  };
  return rows;
}

namespace {

ModelConfig moe_model(int layers, int hidden, int heads, int seq_len, int vocab, int experts, int layer_freq,
                      int ffn_hidden, MoERouter router) {
  ModelConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.seq_len = seq_len;
  c.vocab = vocab;
  c.moe.experts = experts;
  c.moe.layer_freq = layer_freq;
  c.moe.ffn_hidden = ffn_hidden;
  c.moe.router = router;
  return c;
}

}  // namespace

const std::vector<MoEPaperModel>& moe_paper_models() {
  static const std::vector<MoEPaperModel> models = {
      {"Switch-Base", "Fedus, Zoph, Shazeer 2021, Switch Transformers (arXiv:2101.03961)", 7.4e9,
       "Table 7, the 128-expert Switch-Base; Table 9 rounds the same model to 7B", 0.01,
       moe_model(24, 768, 12, 512, 32128, 128, 2, 3072, MoERouter::switch_),
       "T5-Base: 12 encoder + 12 decoder layers, h 768, 12 heads, FFN 3072, vocabulary 32128; 128 experts "
       "in every other FFN layer (6 + 6 = 12 MoE layers), top-1 switch router. Stand-in: the 24 layers as "
       "one stack (MoE layers 0, 2, ..., 22), s = 512",
       "total parameters. Not in the stand-in: the decoder's cross-attention (4h^2 in each of its 12 "
       "layers). In the stand-in, not in T5: biases (an expert's f + h), LayerNorm shifts, a learned "
       "position embedding (T5 has relative position biases), the vocabulary padded to 32256"},
      {"GShard 600B", "Lepikhin et al. 2020, GShard (arXiv:2006.16668)", 600e9,
       "Table 1, MoE(2048E, 36L) (the abstract: \"beyond 600 billion parameters\")", 0.05,
       moe_model(36, 1024, 16, 1024, 64000, 2048, 2, 8192, MoERouter::gshard),
       "36 layers (encoder + decoder), h 1024, 16 heads, FFN 8192; 2048 experts in every other layer "
       "(18 MoE layers: the paper's 36,864 experts), top-2 GShard router. Stand-in: the 36 layers as one "
       "stack, s = 1024, vocabulary 64000 (assumed; 0.01% of the count)",
       "total parameters. The published figure is rounded down to 600B; the experts alone hold 18 x 2048 x "
       "2hf = 6.18e11. The stand-in leaves out the decoder's cross-attention and adds biases, as for Switch"},
  };
  return models;
}

}  // namespace lattice::plan
