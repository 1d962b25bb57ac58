#pragma once
// --async-save (docs/design.md §14, "Checkpoints in the background"). The ranks stream a save to world
// rank 0 as a synchronous save does (train/checkpoint_stream.hpp), but rank 0 copies each whole tensor
// into a host buffer (MemoryCategory::checkpoint_io) instead of writing it; a background thread then
// writes the files, sums them into the manifest and fsyncs them while training goes on. The thread
// makes no communication (MPI is initialised MPI_THREAD_FUNNELED). The trainer promotes the save on
// its own thread once the write is done, the ranks agree on it and the loss-spike guard allows;
// destroyed before, it removes its temporary directory and the previous checkpoint stays.
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "tensor/memory_tracker.hpp"
#include "train/checkpoint_stream.hpp"

namespace lattice {

// The appends of one file, each copied into a tracked host buffer, replayed later in the same order:
// the file the replay writes is the file a synchronous save writes, byte for byte.
class HostFile final : public TensorSink {
 public:
  void append(const std::string& name, const float* values, size_t bytes) override;
  void replay(checkpoint::SafetensorsWriter& out) const;
  int64_t bytes() const { return bytes_; }

 private:
  struct Piece {
    std::string name;
    TrackedBuffer copy;
    size_t bytes = 0;
  };
  std::vector<Piece> pieces_;
  int64_t bytes_ = 0;
};

// Everything a save writes, held in memory: the arguments of StagedCheckpoint's calls.
struct SaveImage {
  std::string dir;
  ModelConfig config;
  HostFile model, previous, optimizer;
  bool has_previous = false;  // PipeDream-2BW: model_previous.safetensors
  std::string optimizer_name;
  std::vector<std::string> element_prefixes;
  std::vector<checkpoint::TensorSpec> tensor_specs;
  std::vector<std::pair<std::string, std::string>> files;  // small files written whole (tokenizer, config.json)
  nlohmann::json trainer_state;
  int64_t bytes() const { return model.bytes() + previous.bytes() + optimizer.bytes(); }
};

class BackgroundSave {
 public:
  explicit BackgroundSave(std::unique_ptr<SaveImage> image);  // starts the thread
  ~BackgroundSave();  // joins the thread; uncommitted, the staged directory is removed
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  bool done() const { return done_.load(std::memory_order_acquire); }
  // Joins the thread, frees the host copy and rethrows the thread's error (a full disk); returns
  // the seconds it waited.
  double wait();
  void commit();  // after wait(): the checkpoint swapped in (StagedCheckpoint::commit)
  double write_seconds() const { return write_s_; }  // the thread's time, once done
  int64_t host_bytes() const { return host_bytes_; }

 private:
  void run();

  std::unique_ptr<SaveImage> image_;
  std::unique_ptr<checkpoint::StagedCheckpoint> staged_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  double write_s_ = 0;
  int64_t host_bytes_ = 0;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace lattice
