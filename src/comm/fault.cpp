#include "comm/fault.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "comm/mpi_include.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"

namespace lattice::comm {

namespace {

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int world_rank() {
  int rank = 0;
  if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  if (mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The message of the lowest failing rank, sent to every rank.
std::string message_of(int rank, const std::string& mine) {
  const WaitScope wait("broadcast", "world");
  int length = int(mine.size());
  MPI_Bcast(&length, 1, MPI_INT, rank, MPI_COMM_WORLD);
  std::vector<char> text(mine.begin(), mine.end());
  text.resize(size_t(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, rank, MPI_COMM_WORLD);
  return std::string(text.begin(), text.end());
}

std::string& terminate_command() {
  static std::string command = "lattice";
  return command;
}

}  // namespace

void abort_all_ranks(const std::string& command, const std::string& message) {
  const int size = world_size();
  std::string line = message;
  for (char& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  std::fprintf(stderr, "lattice %s: rank %d: error: %s\n", command.c_str(), world_rank(), line.c_str());
  std::fflush(stderr);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  if (mpi_running()) MPI_Finalize();  // a singleton has nobody to abort
  std::exit(1);
}

int run_or_abort_all(const std::string& command, const std::function<int()>& body) {
  if (world_size() <= 1) return body();
  try {
    return body();
  } catch (const std::exception& e) {
    abort_all_ranks(command, error_line(e));
  }
}

void check_on_all_ranks(const std::string& command, const std::function<void()>& check) {
  const int size = world_size();
  if (size <= 1) {
    check();
    return;
  }
  const int rank = world_rank();
  std::string mine;
  bool failed = false;
  try {
    check();
  } catch (const std::exception& e) {
    failed = true;
    mine = error_line(e);
  }
  int first_failing = failed ? rank : size;
  const WaitScope wait("all_reduce", "world");
  MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_failing == size) return;

  const std::string message = message_of(first_failing, mine);
  if (rank == 0) {
    const std::string where = first_failing == 0 ? "" : "rank " + std::to_string(first_failing) + ": ";
    std::fprintf(stderr, "lattice %s: error: %s%s\n", command.c_str(), where.c_str(), message.c_str());
    std::fflush(stderr);
  }
  // Nobody exits before rank 0 has printed: mpirun may kill the job at the first non-zero exit.
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  std::exit(1);
}

void require_same_configuration(const std::string& settings) {
  if (world_size() <= 1) return;
  const std::string rank0 = message_of(0, settings);
  if (rank0 == settings) return;
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      out.push_back(text.substr(begin, end - begin));
      begin = end + 1;
    }
    return out;
  };
  const std::vector<std::string> mine = lines(settings), theirs = lines(rank0);
  for (size_t i = 0; i < std::max(mine.size(), theirs.size()); ++i) {
    const std::string a = i < mine.size() ? mine[i] : "(nothing)", b = i < theirs.size() ? theirs[i] : "(nothing)";
    if (a != b)
      throw InputError("the ranks were started with different configurations: '" + a + "' here, '" + b +
                       "' on rank 0");
  }
}

bool all_ranks_agree(const std::string& text) {
  if (world_size() <= 1) return true;
  int same = message_of(0, text) == text ? 1 : 0;
  const WaitScope wait("all_reduce", "world");
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return same == 1;
}

void abort_all_ranks_on_terminate(const std::string& command) {
  terminate_command() = command;
  std::set_terminate([] {
    std::string what = "terminated";
    if (const std::exception_ptr current = std::current_exception()) {
      try {
        std::rethrow_exception(current);
      } catch (const std::exception& e) {
        what = error_line(e);
      } catch (...) {
        what = "terminated by an unknown exception";
      }
    }
    std::fprintf(stderr, "lattice %s: rank %d: error: %s\n", terminate_command().c_str(), world_rank(), what.c_str());
    std::fflush(stderr);
    if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  });
}

}  // namespace lattice::comm
