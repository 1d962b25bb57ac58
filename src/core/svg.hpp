#pragma once
// Small helpers shared by the hand-written SVG pictures (groups, schedules, the paper's charts).
#include <string>

namespace lattice::svg {

std::string escape(const std::string& text);       // &, <, >, " as entities (text and attributes)
std::string hsl(double hue_degrees, double s, double l);  // "#rrggbb"
// An SVG document as lattice writes it to a file: kSvgGenerator (core/output_path.hpp) on a line
// after the opening <svg> tag, by which a later --svg recognises the file as lattice's.
std::string signed_document(const std::string& svg);

}  // namespace lattice::svg
