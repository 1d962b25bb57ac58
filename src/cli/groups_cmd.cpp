// lattice groups: Megatron's TP/DP/PP/embedding process groups of a layout, printed (or drawn)
// without launching anything.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/atomic_dir.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "comm/groups.hpp"
#include "report/groups_svg.hpp"

namespace lattice::cli {

namespace {

std::string list_text(const parallel::Groups& groups) {
  std::string out;
  for (const auto& g : groups) {
    out += out.empty() ? "[" : " [";
    for (size_t i = 0; i < g.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(g[i]);
    }
    out += "]";
  }
  return out;
}

}  // namespace

int run_groups(int argc, char** argv) {
  CLI::App app{"print the TP/DP/PP/embedding process groups of a layout (Megatron-LM order)"};
  app.name("lattice groups");
  int world = 0, tp = 1, pp = 1;
  std::string svg;
  bool json = false;
  app.add_option("--world", world, "number of ranks N")->required();
  app.add_option("--tensor-model-parallel-size", tp, "tensor-parallel size t")->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", pp, "pipeline-parallel size p")->capture_default_str();
  app.add_option("--svg", svg, "also draw the rank grid coloured by group into this SVG file");
  app.add_flag("--json", json, "print one JSON object on one line");
  if (auto status = parse_flags(app, argc, argv)) return *status;

  const parallel::ParallelLayout layout = parallel::make_layout(world, tp, pp);
  const parallel::Groups tp_g = parallel::tp_groups(layout), dp_g = parallel::dp_groups(layout),
                         pp_g = parallel::pp_groups(layout), emb_g = parallel::embedding_groups(layout);
  if (!svg.empty()) {
    const std::string doc = parallel::groups_svg(layout);
    write_file_atomically(svg, doc.data(), doc.size());
  }

  if (json) {
    nlohmann::ordered_json j;
    j["event"] = "groups";
    j["tp"] = tp_g;
    j["dp"] = dp_g;
    j["pp"] = pp_g;
    j["embedding"] = emb_g;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("world %d = tensor-model-parallel %d x data-parallel %d x pipeline-model-parallel %d\n", layout.world,
              layout.tp, layout.dp, layout.pp);
  std::printf("rank = tp_rank + %d*dp_rank + %d*pp_rank\n", layout.tp, layout.tp * layout.dp);
  std::printf("tensor-parallel groups (%zu):   %s\n", tp_g.size(), list_text(tp_g).c_str());
  std::printf("data-parallel groups (%zu):     %s\n", dp_g.size(), list_text(dp_g).c_str());
  std::printf("pipeline-parallel groups (%zu): %s\n", pp_g.size(), list_text(pp_g).c_str());
  std::printf("embedding groups (%zu):         %s\n", emb_g.size(), list_text(emb_g).c_str());
  if (!svg.empty()) std::printf("wrote %s\n", svg.c_str());
  return 0;
}

}  // namespace lattice::cli
