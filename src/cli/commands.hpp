#pragma once
// One function per sub-command; main.cpp dispatches on argv[1]. Each parses its own flags and
// returns the process exit status (0 ok, 1 bad input/failure, 2 usage error).
namespace lattice::cli {
int run_prepare(int argc, char** argv);
int run_train(int argc, char** argv);
int run_eval(int argc, char** argv);
int run_sample(int argc, char** argv);
int run_plan(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_groups(int argc, char** argv);
int run_schedule(int argc, char** argv);
int run_report(int argc, char** argv);
int run_launch(int argc, char** argv);
}  // namespace lattice::cli
