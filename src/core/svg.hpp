#pragma once
// Small helpers shared by the hand-written SVG pictures (groups, schedules, the paper's charts).
#include <string>

namespace lattice::svg {

std::string escape(const std::string& text);       // &, <, >, " as entities (text and attributes)
std::string hsl(double hue_degrees, double s, double l);  // "#rrggbb"

}  // namespace lattice::svg
