// lattice groups: Megatron's TP/DP/PP/embedding process groups of a layout, with
// --expert-model-parallel-size the EP and expert-DP groups and with --context-parallel-size the CP and
// DP-with-CP groups, printed (or drawn) without launching anything.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/output_path.hpp"
#include "core/svg.hpp"
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
  CLI::App app{"print the TP/DP/PP/embedding (and EP/expert-DP) process groups of a layout (Megatron-LM order)"};
  app.name("lattice groups");
  int world = 0, tp = 1, pp = 1, ep = 1, cp = 1;
  std::string svg;
  bool json = false;
  app.add_option("--world", world, "number of ranks N")->required();
  app.add_option("--tensor-model-parallel-size", tp, "tensor-parallel size t")->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", pp, "pipeline-parallel size p")->capture_default_str();
  app.add_option("--expert-model-parallel-size,--ep", ep,
                 "expert-parallel size e (divides data-parallel x context-parallel size); e > 1 adds the EP and expert-DP groups")
      ->capture_default_str();
  app.add_option("--context-parallel-size,--cp", cp,
                 "context-parallel size c (ranks sharing one sequence); c > 1 adds the CP and DP-with-CP groups")
      ->capture_default_str();
  app.add_option("--svg", svg, "also draw the rank grid coloured by group into this SVG file");
  app.add_flag("--json", json, "print one JSON object on one line");
  bool overwrite = false;
  add_overwrite_flag(app, overwrite);
  if (auto status = parse_flags(app, argc, argv)) return *status;
  const OutputRules rules{overwrite, {}, {}};
  if (!svg.empty()) check_output_path(svg, OutputKind::svg, "--svg", rules);  // before anything is printed

  const parallel::ParallelLayout layout = parallel::make_layout(world, tp, pp, ep, cp);
  const parallel::Groups tp_g = parallel::tp_groups(layout), dp_g = parallel::dp_groups(layout),
                         pp_g = parallel::pp_groups(layout), emb_g = parallel::embedding_groups(layout),
                         ep_g = parallel::ep_groups(layout), edp_g = parallel::expert_dp_groups(layout),
                         cp_g = parallel::cp_groups(layout), dpcp_g = parallel::dp_cp_groups(layout);
  if (!svg.empty()) {
    write_output_file(svg, OutputKind::svg, "--svg", svg::signed_document(parallel::groups_svg(layout)), rules);
  }

  if (json) {
    nlohmann::ordered_json j;
    j["event"] = "groups";
    j["tp"] = tp_g;
    j["dp"] = dp_g;
    j["pp"] = pp_g;
    j["embedding"] = emb_g;
    j["ep"] = ep_g;  // always present in JSON (every rank alone when e = 1), so the keys are fixed
    j["expert_dp"] = edp_g;
    j["cp"] = cp_g;  // likewise always present (every rank alone when c = 1)
    j["dp_cp"] = dpcp_g;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::vector<std::pair<std::string, const parallel::Groups*>> rows = {{"tensor-parallel", &tp_g}};
  if (layout.cp > 1) {  // with c = 1 every rank is its own CP group and DP-with-CP is DP: noise in text
    std::printf("world %d = tensor-model-parallel %d x context-parallel %d x data-parallel %d x "
                "pipeline-model-parallel %d\n",
                layout.world, layout.tp, layout.cp, layout.dp, layout.pp);
    std::printf("rank = tp_rank + %d*cp_rank + %d*dp_rank + %d*pp_rank\n", layout.tp, layout.tp * layout.cp,
                layout.tp * layout.cp * layout.dp);
    rows.push_back({"context-parallel", &cp_g});
  } else {
    std::printf("world %d = tensor-model-parallel %d x data-parallel %d x pipeline-model-parallel %d\n", layout.world,
                layout.tp, layout.dp, layout.pp);
    std::printf("rank = tp_rank + %d*dp_rank + %d*pp_rank\n", layout.tp, layout.tp * layout.dp);
  }
  rows.push_back({"data-parallel", &dp_g});
  if (layout.cp > 1) rows.push_back({"data-parallel-with-cp", &dpcp_g});
  rows.push_back({"pipeline-parallel", &pp_g});
  rows.push_back({"embedding", &emb_g});
  if (layout.ep > 1) {  // with e = 1 they are every rank alone and the DP groups: noise in text
    rows.push_back({"expert-parallel", &ep_g});
    rows.push_back({"expert-data-parallel", &edp_g});
  }
  std::vector<std::string> labels;
  size_t width = 0;
  for (const auto& [name, groups] : rows) {
    labels.push_back(name + " groups (" + std::to_string(groups->size()) + "):");
    width = std::max(width, labels.back().size());
  }
  for (size_t i = 0; i < rows.size(); ++i)
    std::printf("%-*s %s\n", int(width), labels[i].c_str(), list_text(*rows[i].second).c_str());
  if (layout.ep > 1 && layout.cp > 1)  // EP folds over DP × CP (Megatron-Core)
    std::printf("data-parallel %d x context-parallel %d = expert-model-parallel %d x expert-data-parallel %d\n",
                layout.dp, layout.cp, layout.ep, layout.dp * layout.cp / layout.ep);
  else if (layout.ep > 1)
    std::printf("data-parallel %d = expert-model-parallel %d x expert-data-parallel %d\n", layout.dp, layout.ep,
                layout.dp / layout.ep);
  if (!svg.empty()) std::printf("wrote %s\n", svg.c_str());
  return 0;
}

}  // namespace lattice::cli
