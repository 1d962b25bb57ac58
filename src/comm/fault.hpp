#pragma once
// Failing cleanly across ranks: no rank may hang waiting for one that stopped.
//   - a rank that fails aborts the whole job (abort_all_ranks, run_or_abort_all);
//   - input checks that every rank runs agree first, so the user sees one line (check_on_all_ranks).
// A process that is not part of a multi-rank job behaves as before: exceptions propagate to main.
#include <functional>
#include <string>

namespace lattice::comm {

// Prints "lattice <command>: rank <r>: error: <message>" on stderr and calls
// MPI_Abort(MPI_COMM_WORLD, 1); mpirun then kills every other rank. Without MPI, or with a world
// of one, prints the same line and exits 1.
[[noreturn]] void abort_all_ranks(const std::string& command, const std::string& message);

// Runs body; an exception escaping it on any rank of a multi-rank world aborts the job through
// abort_all_ranks with the exception's message. In a world of one the exception propagates.
int run_or_abort_all(const std::string& command, const std::function<int()>& body);

// Every rank runs `check` (a validation that throws, e.g. lattice::InputError). If it throws on
// any rank, rank 0 prints "lattice <command>: error: <message>" once (the lowest failing rank's
// message, prefixed with "rank r: " when r is not 0) and every rank finalizes MPI and exits 1.
// In a world of one (or before MPI starts) `check` simply runs and its exception propagates.
// Collective: every rank of the world must call it.
void check_on_all_ranks(const std::string& command, const std::function<void()>& check);

// Every rank holds `settings` (one "key = value" line per setting, as in a TOML file); throws
// lattice::InputError on a rank whose lines differ from rank 0's, naming the first difference. Run
// it inside check_on_all_ranks, before any work that depends on the configuration: ranks that
// disagree would otherwise fail in ways unrelated to the cause, or hang. Collective over the world.
void require_same_configuration(const std::string& settings);

// Whether every rank holds the same `text` as rank 0, known to every rank. Collective over the world;
// true in a world of one.
bool all_ranks_agree(const std::string& text);

// Makes an uncaught exception or std::terminate on this rank abort the whole job with one line.
void abort_all_ranks_on_terminate(const std::string& command);

}  // namespace lattice::comm
