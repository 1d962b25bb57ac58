#pragma once
// An optimizer's element states kept on disk (--offload-optimizer DIR; the seeds' ZeRO-Offload on a
// machine whose "device" memory is RAM; docs/design.md §8, "Offload"). The states of the owned
// elements live in a file, state-major ([state 0 over every owned element][state 1 ...]), moved in
// pieces (consecutive ranges of the owned elements, as the optimizer cuts them); an update walks
// the pieces in order, and a background I/O thread reads each piece's states ahead into a ring of
// three staging slots (MemoryCategory::offload_io) and writes each updated piece back behind, so
// only three pieces' states are ever resident.
//
// Two versions of the file: an update reads the current one and writes the other, which becomes
// current only when every write of the step has landed, so a step that fails midway (a full disk)
// leaves the previous states whole. The files are unlinked as soon as they are opened: a killed run
// leaves nothing behind, and a run resumes from its checkpoint, which holds the states.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/offload_layout.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

class OffloadedStates {
 public:
  // `piece_sizes`: the owned pieces' element counts, in order; `states` per element (AdamW: 2).
  // Throws InputError naming `dir` when the files cannot be made or their space reserved.
  OffloadedStates(const std::string& dir, std::vector<int64_t> piece_sizes, int states);
  ~OffloadedStates();
  OffloadedStates(const OffloadedStates&) = delete;
  OffloadedStates& operator=(const OffloadedStates&) = delete;

  // One update: begin(); for every piece in order, piece(i) — its states, state s at
  // [s·size_i, (s+1)·size_i), read from the current version — then done(i); end() waits for the
  // writes and makes them current. An I/O error surfaces as InputError from piece() or end().
  void begin();
  float* piece(size_t i);
  void done(size_t i);
  void end();

  // The current version as the optimizer's element states (state s of owned element k at
  // [s·total + k]), mapped from the file for checkpoints to read and fill; its pages belong to the
  // page cache, not to this process's accounted memory.
  float* mapped();
  // Elements [first, first + count) of state `state` of the current version into `out` (pread; the
  // I/O thread may run beside it). Throws InputError naming the directory on an I/O error.
  void read(int state, int64_t first, int64_t count, float* out) const;
  // What a checkpoint or the initialisation touched through the mapping leaves this process's
  // resident set (the page cache and the file keep it).
  void drop_mapped_pages();
  int64_t total() const { return total_; }
  int64_t file_bytes() const { return int64_t(sizeof(float)) * states_ * total_; }

 private:
  struct Task {
    bool write;
    size_t piece;
    int slot;
  };
  void run_io();
  void map_states();  // the two states files, made, reserved and mapped
  void io(const Task& t);
  void wait_for(size_t reads_done);
  void queue_reads(size_t last);

  std::string dir_;
  std::vector<int64_t> sizes_, first_;  // per piece: elements, first owned element
  int states_;
  int64_t total_ = 0, largest_ = 0;
  int fd_[2] = {-1, -1};
  float* map_[2] = {nullptr, nullptr};
  int current_ = 0;
  TrackedArray<float> slots_;  // 3 × states × largest piece

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  size_t reads_done_ = 0, reads_queued_ = 0, writes_done_ = 0, writes_queued_ = 0, next_piece_ = 0;
  std::string error_;
  bool stop_ = false;
  std::thread io_thread_;
};

}  // namespace lattice
