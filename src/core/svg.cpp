#include "core/svg.hpp"

#include <cmath>
#include <cstdio>

#include "core/output_path.hpp"

namespace lattice::svg {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string signed_document(const std::string& svg) {
  const size_t tag_end = svg.find('>');
  if (svg.rfind("<svg", 0) != 0 || tag_end == std::string::npos) return svg;
  return svg.substr(0, tag_end + 1) + "\n" + kSvgGenerator + svg.substr(tag_end + 1);
}

std::string hsl(double h, double s, double l) {
  const double c = (1 - std::abs(2 * l - 1)) * s, hp = std::fmod(h, 360.0) / 60.0;
  const double x = c * (1 - std::abs(std::fmod(hp, 2.0) - 1)), m = l - c / 2;
  double r = 0, g = 0, b = 0;
  switch (int(hp)) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
  }
  char hex[8];
  std::snprintf(hex, sizeof hex, "#%02x%02x%02x", int(std::lround((r + m) * 255)), int(std::lround((g + m) * 255)),
                int(std::lround((b + m) * 255)));
  return hex;
}

}  // namespace lattice::svg
