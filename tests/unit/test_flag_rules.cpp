// The flag bounds table (cli/flag_rules.hpp): well formed, found per command, and its messages.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cli/flag_rules.hpp"

namespace lattice::cli {
namespace {

TEST(FlagBounds, EveryRowIsWellFormedAndOnce) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const FlagBound& b : flag_bounds()) {
    EXPECT_LT(b.lo, b.hi) << b.flag;
    EXPECT_TRUE(seen.emplace(std::string(b.command), std::string(b.flag)).second) << "twice: " << b.flag;
    EXPECT_EQ(std::string(b.flag).rfind("-", 0), std::string::npos) << "a long name without dashes: " << b.flag;
  }
}

TEST(FlagBounds, CommandRowsComeBeforeTheSharedOnes) {
  ASSERT_NE(find_flag_bound("plan", "threads"), nullptr);
  EXPECT_EQ(find_flag_bound("plan", "threads")->lo, 1);
  EXPECT_EQ(find_flag_bound("train", "threads")->lo, 0);
  EXPECT_EQ(find_flag_bound("eval", "layers"), find_flag_bound("train", "layers"));  // the model's, shared
  EXPECT_EQ(find_flag_bound("train", "no-such-flag"), nullptr);
}

TEST(FlagBounds, DurationsAreSecondsOrANumberWithItsUnit) {
  EXPECT_EQ(parse_duration("5400"), 5400.0);
  EXPECT_EQ(parse_duration("45s"), 45.0);
  EXPECT_EQ(parse_duration("90m"), 5400.0);
  EXPECT_EQ(parse_duration("6h"), 21600.0);
  EXPECT_EQ(parse_duration("1.5d"), 129600.0);
  EXPECT_EQ(parse_duration("0.25"), 0.25);
  for (const char* bad : {"", "m", "6 h", "6hours", "5y", "h6", "1e"}) EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
  // Read, then refused by the bound: (0, 10 years] in seconds.
  const FlagBound& mtbf = *find_flag_bound("train", "mtbf");
  EXPECT_EQ(bound_violation(mtbf, "5400", false), "");
  for (const char* bad : {"0", "-1", "nan", "inf", "1e12"}) EXPECT_NE(bound_violation(mtbf, bad, false), "") << bad;
  // --save-every takes a whole number, or the word auto.
  EXPECT_TRUE(flag_word("save-every", "auto"));
  EXPECT_FALSE(flag_word("save-every", "often"));
  EXPECT_FALSE(flag_word("eval-every", "auto"));
}

TEST(FlagBounds, MessagesNameFlagValueAndRange) {
  const FlagBound& topk = *find_flag_bound("train", "moe-router-topk");
  EXPECT_EQ(bound_violation(topk, "2", true), "");
  EXPECT_EQ(bound_violation(topk, "0", true), "--moe-router-topk must be between 1 and 65536 (got 0)");
  const FlagBound& timeout = *find_flag_bound("train", "comm-timeout");
  EXPECT_EQ(bound_violation(timeout, "0", false), "");  // off
  EXPECT_EQ(bound_violation(timeout, "0.001", false), "");
  EXPECT_EQ(bound_violation(timeout, "1e-4", false),
            "--comm-timeout must be 0 (off) or a finite number in [0.001, 1000000] (got 1e-4)");
  const FlagBound& dropout = *find_flag_bound("train", "dropout");
  EXPECT_EQ(bound_violation(dropout, "0", false), "");
  EXPECT_NE(bound_violation(dropout, "1", false), "");  // [0, 1): the upper end is open
  EXPECT_NE(bound_violation(dropout, "nan", false), "");
  const FlagBound& flops = *find_flag_bound("train", "peak-flops");
  EXPECT_NE(bound_violation(flops, "inf", false), "");
  EXPECT_NE(bound_violation(flops, "1e19", false), "");
  EXPECT_EQ(bound_violation(flops, "1e12", false), "");
  const FlagBound& steps = *find_flag_bound("train", "steps");
  EXPECT_EQ(bound_violation(steps, "99999999999999999999", true),
            "--steps must be between 0 and 2^40 (got 99999999999999999999)");
  const FlagBound& seed = *find_flag_bound("sample", "seed");
  EXPECT_EQ(bound_violation(seed, "18446744073709551615", true), "");
}

}  // namespace
}  // namespace lattice::cli
