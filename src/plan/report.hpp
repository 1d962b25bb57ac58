#pragma once
// How a plan is shown: a readable table, or one JSON object per line.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/evaluate.hpp"

namespace lattice::plan {

// printf of one number into a string (the tables' cells).
std::string fmt(const char* format, double value);
std::string format_bytes(double bytes);  // "12.34 GB" (decimal, as GPU memory is sold)
std::string describe_layout(const PlanRequest& r);  // "t=8 p=8 m=3 dp=1 sp selective zero0 b=1"

std::string plan_text(const Plan& p, const Hardware& hw);
nlohmann::ordered_json plan_json(const Plan& p);  // the `"event":"plan"` object of issue 6
// One rank's bytes by category (the tracking allocator's names) and its accounted peak.
nlohmann::ordered_json category_bytes_json(const analysis::CategoryBytes& c);

// --search: the ranked candidates, best first.
std::string search_text(const std::vector<Plan>& ranked, size_t considered, double seconds);
nlohmann::ordered_json search_json(const std::vector<Plan>& ranked, size_t considered, double seconds);

}  // namespace lattice::plan
