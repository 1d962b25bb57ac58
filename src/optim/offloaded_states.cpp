#include "optim/offloaded_states.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/error.hpp"

namespace lattice {

namespace {

std::string errno_text() { return std::strerror(errno); }

// pread/pwrite all of [offset, offset + bytes), or false with errno set.
bool transfer(bool write, int fd, char* data, size_t bytes, off_t offset) {
  while (bytes > 0) {
    const ssize_t n = write ? ::pwrite(fd, data, bytes, offset) : ::pread(fd, data, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    data += n, bytes -= size_t(n), offset += n;
  }
  return true;
}
}  // namespace

OffloadedStates::OffloadedStates(const std::string& dir, std::vector<int64_t> piece_sizes, int states)
    : dir_(dir), sizes_(std::move(piece_sizes)), states_(states) {
  for (int64_t n : sizes_) first_.push_back(total_), total_ += n, largest_ = std::max(largest_, n);
  std::error_code ec;
  // The directories made here, deepest first: removed again (when still empty) if the run is refused.
  std::vector<std::filesystem::path> made;
  for (std::filesystem::path p = std::filesystem::absolute(dir, ec); !p.empty() && !std::filesystem::exists(p, ec);
       p = p.parent_path()) {
    made.push_back(p);
    if (p == p.parent_path()) break;
  }
  std::filesystem::create_directories(dir, ec);
  try {
    require(std::filesystem::is_directory(dir, ec), "--offload-optimizer " + dir + " is not a directory we can make");
    map_states();
    slots_ = TrackedArray<float>(kOffloadSlots * states_ * largest_, "offload_staging", MemoryCategory::offload_io);
    io_thread_ = std::thread([this] { run_io(); });
  } catch (...) {
    for (int v = 0; v < 2; ++v) {
      if (map_[v]) ::munmap(map_[v], size_t(file_bytes())), map_[v] = nullptr;
      if (fd_[v] >= 0) ::close(fd_[v]), fd_[v] = -1;
    }
    for (const auto& p : made) std::filesystem::remove(p, ec);  // only an empty directory is removed
    throw;
  }
}

void OffloadedStates::map_states() {
  const std::string& dir = dir_;
  const size_t bytes = size_t(file_bytes());
  for (int v = 0; v < 2; ++v) {
    std::string path = dir + "/lattice-offload-XXXXXX";
    fd_[v] = ::mkstemp(path.data());
    require(fd_[v] >= 0, "--offload-optimizer " + dir + ": cannot create a file there: " + errno_text());
    ::unlink(path.c_str());  // nothing is left behind, however the run ends
    if (bytes == 0) continue;
    // Reserve the space now: a full disk is refused here, not in the middle of a step.
    const int err = ::posix_fallocate(fd_[v], 0, off_t(bytes));
    require(err == 0, "--offload-optimizer " + dir + ": cannot reserve " + std::to_string(bytes) +
                          " bytes for the optimizer states: " + std::strerror(err));
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_[v], 0);
    require(m != MAP_FAILED, "--offload-optimizer " + dir + ": cannot map the states file: " + errno_text());
    map_[v] = static_cast<float*>(m);
  }
}

OffloadedStates::~OffloadedStates() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (io_thread_.joinable()) io_thread_.join();
  for (int v = 0; v < 2; ++v) {
    if (map_[v]) ::munmap(map_[v], size_t(file_bytes()));
    if (fd_[v] >= 0) ::close(fd_[v]);
  }
}

float* OffloadedStates::mapped() { return map_[current_]; }

void OffloadedStates::read(int state, int64_t first, int64_t count, float* out) const {
  const off_t offset = off_t(sizeof(float)) * (state * total_ + first);
  if (!transfer(false, fd_[current_], reinterpret_cast<char*>(out), size_t(count) * sizeof(float), offset))
    fail("--offload-optimizer " + dir_ + ": cannot read the offloaded weights: " + errno_text());
}

void OffloadedStates::drop_mapped_pages() {
  for (float* m : map_)
    if (m) ::madvise(m, size_t(file_bytes()), MADV_DONTNEED);
}

void OffloadedStates::run_io() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      t = queue_.front();
    }
    io(t);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      (t.write ? writes_done_ : reads_done_) += 1;
    }
    cv_.notify_all();
  }
}

// One piece's states between its slot and the file: reads from the current version, writes to
// the other. After an error nothing more is transferred; the error reaches the caller.
void OffloadedStates::io(const Task& t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.empty()) return;
  }
  const int version = t.write ? 1 - current_ : current_;
  float* slot = slots_.data() + int64_t(t.slot) * states_ * largest_;
  const int64_t n = sizes_[t.piece];
  for (int s = 0; s < states_; ++s) {
    const off_t offset = off_t(sizeof(float)) * (s * total_ + first_[t.piece]);
    if (!transfer(t.write, fd_[version], reinterpret_cast<char*>(slot + s * n), size_t(n) * sizeof(float), offset)) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = "--offload-optimizer " + dir_ + ": cannot " + (t.write ? "write" : "read") +
               " the optimizer states: " + errno_text();
      return;
    }
  }
}

void OffloadedStates::begin() {
  // A checkpoint may have read or filled the states through the mapping: its pages leave this
  // process (they stay in the page cache, and the file holds them), so they are not resident here.
  drop_mapped_pages();
  std::lock_guard<std::mutex> lock(mu_);
  reads_done_ = reads_queued_ = writes_done_ = writes_queued_ = next_piece_ = 0;
  queue_reads(1);
  cv_.notify_all();
}

void OffloadedStates::wait_for(size_t reads_done) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return reads_done_ >= reads_done || !error_.empty(); });
  require(error_.empty(), error_);
}

// Reads every piece up to `last` not yet asked for (mu_ held). Piece j goes to slot j % 3, the slot
// of piece j − 3, whose write (if it was updated) was queued before: first in, first out, so that
// write is done before this read starts.
void OffloadedStates::queue_reads(size_t last) {
  for (; reads_queued_ <= last && reads_queued_ < sizes_.size(); ++reads_queued_)
    queue_.push_back({false, reads_queued_, int(reads_queued_ % kOffloadSlots)});
}

float* OffloadedStates::piece(size_t i) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Every piece, in order: one skipped would be read and never written, and the version that
    // becomes current would hold its states of two steps before.
    if (i != next_piece_) throw std::logic_error("OffloadedStates: piece " + std::to_string(i) + " asked for out of order");
    ++next_piece_;
    queue_reads(i + 2);  // this one and two ahead
  }
  cv_.notify_all();
  wait_for(i + 1);
  return slots_.data() + int64_t(i % kOffloadSlots) * states_ * largest_;
}

void OffloadedStates::done(size_t i) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({true, i, int(i % kOffloadSlots)});
    ++writes_queued_;
  }
  cv_.notify_all();
}

void OffloadedStates::end() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return (writes_done_ >= writes_queued_ && queue_.empty()) || !error_.empty(); });
  require(error_.empty(), error_);
  if (writes_queued_ != sizes_.size())
    throw std::logic_error("OffloadedStates: " + std::to_string(writes_queued_) + " of " +
                           std::to_string(sizes_.size()) + " pieces written back");
  current_ = 1 - current_;
}

}  // namespace lattice
