#pragma once
// Event simulation of pipeline action lists (no model): each rank runs its list in order; an
// action starts once the rank is free and its input has arrived (the sender's matching action
// finished, plus the point-to-point latency). Gives the timeline, the bubble and the activations
// each rank holds, and reports a deadlock — no rank can proceed — as an error.
#include <vector>

#include "engine/schedule.hpp"

namespace lattice::parallel::pipeline {

struct SimulationOptions {
  // Times of one whole stage (L/p layers) for one micro-batch; a chunk takes 1/m of them.
  double forward_time = 1.0;
  double backward_time = 2.0;  // the whole backward; split (ZB-H1), its weight pass takes weight_time of it
  double weight_time = 1.0;
  double p2p_latency = 0.0;  // from the end of the sending action to the input being available
  // Uneven stages (--pipeline-layers): virtual stage s's times are stage_scale[s] times an even
  // stage's (its layers over L/(p·m)); empty: all even.
  std::vector<double> stage_scale;
  double head_time = 0.0;  // the output layer's forward on the last stage (its backward twice that)
};

struct TimedAction {
  Action action;
  double start = 0, end = 0;
};

struct RankTimeline {
  std::vector<TimedAction> actions;  // in execution order
  double busy = 0;                   // time spent computing
  int peak_in_flight = 0;            // max (forwards done − backwards done), in chunk micro-batches
  int peak_held = 0;                 // max (forwards done − weight passes done): with a split backward,
                                     // micro-batches whose parameter gradients are still pending count too
  double peak_stage_equivalents = 0; // the same in units of one micro-batch of L/p layers: peak / m
};

struct Simulation {
  std::vector<RankTimeline> ranks;
  double total_time = 0;  // the last action's end
  double idle = 0;        // Σ over ranks of (total_time − busy)
  double bubble = 0;      // idle / (p · total_time)
  std::vector<double> step_ends;  // a run's lists (build_run): when each step's barrier released
};

// Runs the lists (as build_schedule returns them, for p ranks and m chunks per rank). Throws
// lattice::InputError on a deadlock, a backward whose forward has not run on that rank, or a
// message that was sent but never received, naming the rank and action.
Simulation simulate(const std::vector<RankActions>& ranks, int m, const SimulationOptions& options = {});

// What the paper predicts beside what the simulation measures.
// Bubble (p−1)/(m·n_mb + p−1), with m = 1 for GPipe, 1F1B and a one-step PipeDream-2BW; ZB-H1's at the options' pass times
// (analysis::pipeline_bubble_fraction).
// PipeDream-2BW's over `steps` steps with one drain (analysis::pipedream_2bw_bubble_fraction).
double bubble_formula(ScheduleKind kind, int p, int n_mb, int m, const SimulationOptions& options = {}, int steps = 1);
// Micro-batches of L/p layers held by the first stage at its peak (eq. 5): GPipe n_mb, 1F1B p,
// interleaved p·(1 + (p−1)/(p·m)), ZB-H1 p (its W's hold less than a whole micro-batch), 2BW p.
double first_stage_in_flight_formula(ScheduleKind kind, int p, int n_mb, int m);

}  // namespace lattice::parallel::pipeline
