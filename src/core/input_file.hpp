#pragma once
// The one check before lattice opens a file the user named (a hardware JSON, a --config TOML, token
// files, tokenizers, checkpoints, a run.jsonl, a trace): it must be a regular file. A FIFO would
// block the open forever, a directory reads as empty, a device never ends; each is refused with one
// line naming the path and what it is instead. Both look the path up through core/pinned_path.hpp: a
// file of a pinned checkpoint is its pinned version (a caller that opens the path itself after the
// check opens pinned_path(path) too, as safetensors and the llm.c import do).
#include <cstddef>
#include <string>

namespace lattice {

// Throws InputError "<what> <path> ..." unless `path` exists and is (or links to) a regular file.
void require_regular_file(const std::string& path, const std::string& what);

// Why `path` cannot be found, as a message's tail: " does not exist", or where a part of it is a
// file (`ck/model.safetensors/`, a file named with a trailing slash) ": Not a directory", which
// std::filesystem::exists reports as a path that does not exist. Looked up through the pin.
std::string why_absent(const std::string& path);

// Whether `path` names something that is not a directory where a directory is wanted: it exists and
// is not one (nor links to one), or a part of it is a file (ENOTDIR). Looked up through the pin.
bool names_a_non_directory(const std::string& path);

// The whole of a regular file (require_regular_file first), at most `max_bytes` of it; a longer
// file is refused. Throws InputError naming `what`, the path and the reason.
std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes = size_t(1) << 30);

}  // namespace lattice
