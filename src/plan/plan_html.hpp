#pragma once
// `lattice plan --html FILE`: a plan, or a search's ranking, as one self-contained HTML page
// (core/html_page.hpp): every byte of each pipeline stage stacked by category against the device's
// memory, the predicted iteration split into compute, recompute, bubble and communication, and
// for --search the top layouts side by side.
#include <string>
#include <vector>

#include "plan/evaluate.hpp"

namespace lattice::plan {

std::string plan_html(const Plan& p, const Hardware& hw);
std::string search_html(const std::vector<Plan>& ranked, size_t considered, double seconds);

}  // namespace lattice::plan
