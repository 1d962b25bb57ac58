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

}  // namespace lattice::plan
