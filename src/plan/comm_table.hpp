#pragma once
// Measured collective times (`lattice bench` under mpirun, comm/measure_collectives.hpp): per
// operation, group size, stride between the group's ranks and form (blocking, or the non-blocking
// call the engine makes), the seconds one call took at each buffer size, with all groups of that
// split running at once as in a layout. The planner reads times off these curves instead of an α–β
// model, since shared-memory MPI changes protocol with the size (eager, then single-copy).
#include <string>
#include <vector>

namespace lattice::plan {

enum class MeasuredOp { all_reduce, reduce_scatter, all_gather, all_to_all, p2p };
// The names `lattice bench --json` writes: all_reduce, reduce_scatter, all_gather, all_to_all, p2p.
const char* to_string(MeasuredOp op);

struct CommSample {
  double bytes = 0, seconds = 0;
};
struct CommCurve {
  MeasuredOp op;
  int size = 2, stride = 1;
  bool engine_async = false;
  std::vector<CommSample> samples;
};

class CommTable {
 public:
  // Keeps the curve's samples with finite bytes > 0 and seconds > 0, sorted by bytes (repeated sizes
  // averaged); a curve left without samples, or of size < 2 or stride < 1, is not kept. A curve of
  // the same op, size, stride and form as one already added replaces it.
  void add(CommCurve curve);
  bool empty() const;
  bool has(MeasuredOp op, int size) const;
  // Seconds of one call moving `bytes` (the full buffer as the engine passes it) in a group of
  // `size` ranks `stride` apart: piecewise-linear in log-log between samples, below the smallest
  // the smallest time, above the largest the last segment's bandwidth; the nearest measured stride
  // for that size when this stride was not measured; the blocking curve when the async one is absent.
  // NaN when nothing of that op and size was measured. 0 bytes or size 1: 0.
  double seconds(MeasuredOp op, int size, int stride, double bytes, bool engine_async = false) const;
  // Every curve kept, in the order added (for reports and tests).
  const std::vector<CommCurve>& curves() const { return curves_; }

 private:
  std::vector<CommCurve> curves_;
};

}  // namespace lattice::plan
