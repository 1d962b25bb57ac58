# Sourced by scripts/cuda-host-check.sh and scripts/cuda-host-trainer.sh: src/cuda rewritten for the
# host simulation (tests/host_sim/include) into "$1/cuda", and a helper that compiles in parallel.
#
# A launch `kernel<<<grid, block, smem, stream>>>(args);` becomes a call of the simulation's launcher
# with the kernel call as a lambda (its overloads and conversions resolved as the compiler would) and
# the kernel's address (what its cudaFuncSetAttribute opted in to more than 48 KiB of shared memory;
# none where the launch asks for no dynamic shared memory, which also spares overloaded kernels' names),
# `extern __shared__ T name[];` a pointer to the simulation's dynamic shared memory, and mma.cuh's PTX
# the emulation (tests/host_sim/mma_emulated.inc, its ldmatrix noting reads for the race check)
# beside its fragment loads, kept as they are.
# What the host compiler adds to every simulated CUDA source and the program's link: x86 forgives a
# misaligned load or store (a float4 or uint4 read at an offset of 4 bytes), a GPU faults on it and the
# context dies, so UBSan's alignment check stops the program at the first one, naming the line.
# CUDA_HOST_SANITIZE_FLAGS replaces it, e.g. "-fsanitize=undefined -fno-sanitize-recover=all" for all
# of UBSan's checks (signed overflow in index arithmetic too; about 1.7 times as slow).
read -r -a CUDA_HOST_SANITIZE <<<"${CUDA_HOST_SANITIZE_FLAGS:--fsanitize=alignment -fno-sanitize-recover=alignment}"

cuda_host_rewrite() {
  local root=$1 dest=$2 f
  mkdir -p "$dest/cuda"
  for f in "$root"/src/cuda/*.cu "$root"/src/cuda/*.cuh "$root"/src/cuda/*.hpp; do
    [[ $(basename "$f") == gemm.cu ]] && continue  # compiled as it is, against the simulated cuBLASLt
    cuda_host_rewrite_file "$root" "$dest" "$(basename "$f")" || return 1
  done
}

# cuda_host_rewrite_file ROOT DEST NAME: src/cuda/NAME rewritten into DEST/cuda/NAME (the build's
# rule for each file: tests/host_sim/host_sim.cmake). mma.cuh's PTX becomes the emulation.
cuda_host_rewrite_file() {
  local root=$1 dest=$2 name=$3
  mkdir -p "$dest/cuda"
  if [[ $name == mma.cuh ]]; then
    {
      sed -n '1,/^namespace lattice::cuda::mma {/p' "$root/src/cuda/mma.cuh"
      echo 'using namespace detail;'
      cat "$root/tests/host_sim/mma_emulated.inc"
      # The header's fragment loads on (the line that opens them, and what follows).
      sed -n "/^\/\/ ---- The fragments' loads/,\$p" "$root/src/cuda/mma.cuh"
    } >"$dest/cuda/mma.cuh.tmp"
    if ! grep -q 'load_b2_trans' "$dest/cuda/mma.cuh.tmp" || ! grep -q 'a_from_c' "$dest/cuda/mma.cuh.tmp"; then
      echo "cuda-host: could not cut mma.cuh (markers moved?)" >&2
      rm -f "$dest/cuda/mma.cuh.tmp"
      return 1
    fi
    mv "$dest/cuda/mma.cuh.tmp" "$dest/cuda/mma.cuh"
    return 0
  fi
  cp "$root/src/cuda/$name" "$dest/cuda/$name.tmp"
  if [[ $name != *.hpp ]]; then
    cuda_host_rewrite_launches "$dest/cuda/$name.tmp" || { rm -f "$dest/cuda/$name.tmp"; return 1; }
  fi
  mv "$dest/cuda/$name.tmp" "$dest/cuda/$name"
}

# cuda_host_rewrite_launches FILE: FILE's launches and dynamic shared arrays rewritten in place (what
# cuda_host_rewrite does to each source; tests/host_sim's tests use it on their own kernels). The
# launcher's name for the kernel: its expression and where the launch stands (file:line). A kernel
# declared with __launch_bounds__(N, ...) checks, first thing, that its block has at most N threads
# (a GPU refuses a larger launch: too many resources requested).
cuda_host_rewrite_launches() {
  local f=$1
  FILE=$(basename "${f%.tmp}") perl -0777 -pi -e '
    s{([A-Za-z_][\w:]*(?:<[^;{}]*?>)?)<<<([^;]*?)>>>\(([^;]*?)\);}{
      my ($kernel, $cfg, $args) = ($1, $2, $3);
      my $line = 1 + (substr($_, 0, $-[0]) =~ tr/\n//);
      my $key = $cfg =~ /,\s*0\s*,[^,]*$/ ? "nullptr" : "sim::kernel_key($kernel)";
      "sim::launch(sim::Cfg{$cfg}, [&] { $kernel($args); }, \"$kernel ($ENV{FILE}:$line)\", $key);"
    }gse;
    s{extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([^;\[]+?)\s+(\w+)\[\];}{$1* $2 = sim::dynamic_shared<$1>();}g;
    s#(__launch_bounds__\(([^(),]*)[^()]*\)[^{;]*?[{])#$1 sim::launch_bound($2);#g;
  ' "$f"
  if grep -q '<<<\|extern __shared__' "$f"; then
    echo "cuda-host: a launch or dynamic shared array in $(basename "${f%.tmp}") the rewrite did not take" >&2
    return 1
  fi
  if [[ $(grep -o '__launch_bounds__(' "$f" | wc -l) != $(grep -o 'sim::launch_bound(' "$f" | wc -l) ]]; then
    echo "cuda-host: a __launch_bounds__ in $(basename "${f%.tmp}") the rewrite did not take" >&2
    return 1
  fi
}

# cuda_host_compile OUT_DIR COMPILER_AND_FLAGS... -- SOURCES...: one object a source in OUT_DIR,
# ${JOBS:-2} at a time; fails if any compile fails.
cuda_host_compile() {
  local out=$1
  shift
  local cmd=() src pids=() p rc=0
  while [[ $1 != -- ]]; do cmd+=("$1"); shift; done
  shift
  for src in "$@"; do
    "${cmd[@]}" -c "$src" -o "$out/$(basename "$src").o" &
    pids+=($!)
    if (( ${#pids[@]} >= ${JOBS:-2} )); then
      wait "${pids[0]}" || rc=1
      pids=("${pids[@]:1}")
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# cuda_host_claim_dir DIR WHO: DIR for this script's output (made, or one it made before: the marker
# file says so); anything else (a file, or a folder of someone else's with files in it) is refused
# in one line, since the scripts delete what they put there.
cuda_host_claim_dir() {
  local dir=$1 who=$2
  if [[ -e $dir && ! -d $dir ]]; then
    echo "$who: $dir exists and is not a folder: give a new folder (or one this script made)" >&2
    return 2
  fi
  if [[ -d $dir && ! -e $dir/.cuda-host-output && -n $(ls -A "$dir" 2>/dev/null) ]]; then
    echo "$who: $dir is a folder this script did not make and it is not empty: give a new folder" >&2
    return 2
  fi
  mkdir -p "$dir" && touch "$dir/.cuda-host-output" || {
    echo "$who: cannot write $dir" >&2
    return 1
  }
}
