#include "train/background_save.hpp"

#include <cstring>

namespace lattice {

void HostFile::append(const std::string& name, const float* values, size_t bytes) {
  Piece piece{name, TrackedBuffer(bytes, kNoLayer, "checkpoint/host_copy", MemoryTracker::of(MemoryCategory::checkpoint_io)),
              bytes};
  if (bytes > 0) std::memcpy(piece.copy.data(), values, bytes);
  bytes_ += int64_t(bytes);
  pieces_.push_back(std::move(piece));
}

void HostFile::replay(checkpoint::SafetensorsWriter& out) const {
  for (const Piece& p : pieces_) out.append(p.name, p.copy.data(), p.bytes);
}

BackgroundSave::BackgroundSave(std::unique_ptr<SaveImage> image)
    : image_(std::move(image)), host_bytes_(image_->bytes()), thread_([this] { run(); }) {}

BackgroundSave::~BackgroundSave() {
  if (thread_.joinable()) thread_.join();
  staged_.reset();  // uncommitted: its temporary directory goes
}

void BackgroundSave::run() {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const SaveImage& im = *image_;
    staged_ = std::make_unique<checkpoint::StagedCheckpoint>(im.dir);
    im.model.replay(staged_->model_file(im.config));
    if (im.has_previous) im.previous.replay(staged_->previous_model_file(im.config));
    im.optimizer.replay(staged_->optimizer_file(im.config, im.optimizer_name, im.element_prefixes, im.tensor_specs));
    for (const auto& [name, contents] : im.files) staged_->add_file(name, contents);
    staged_->finish(im.trainer_state);
    staged_->sync();  // on disk before the training thread is told: its commit only swaps
  } catch (...) {
    error_ = std::current_exception();
    // Its temporary directory goes now, not when the object does: a rank that reports the error under
    // several processes aborts them all (MPI_Abort), and no destructor runs after that.
    staged_.reset();
  }
  write_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done_.store(true, std::memory_order_release);
}

double BackgroundSave::wait() {
  const auto t0 = std::chrono::steady_clock::now();
  if (thread_.joinable()) thread_.join();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  image_.reset();  // the host copy is written: its buffers go back (on the training thread)
  if (error_) std::rethrow_exception(error_);
  return waited;
}

void BackgroundSave::commit() {
  wait();
  staged_->commit();
}

}  // namespace lattice
