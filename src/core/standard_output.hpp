#pragma once
// Standard output that may close under lattice (`lattice train --json | head -2`). SIGPIPE is
// ignored, so a write to a closed pipe fails with EPIPE instead of killing the process (and with it
// the training and its final checkpoint); the first failed write is reported once on stderr and the
// command carries on. A reader that left (EPIPE) does not fail the command (a note); any other write
// error (a full disk under `> log.jsonl`) makes it exit 1 (an error).
namespace lattice::standard_output {

// main: ignore SIGPIPE, and name the command for the message.
void start(const char* command);

// Flushes stdout and, on its first failure, writes one line on stderr ("lattice CMD: error: cannot
// write standard output: WHY", `going_on` adding that the command carries on). Returns whether
// stdout still works. After a failure nothing more is written there, and a regular file is cut back
// to its last whole line (never below where this command's output began).
bool flush(bool going_on = true);

// The exit status of a command that returned `status`, given what became of stdout.
int exit_status(int status);

}  // namespace lattice::standard_output
