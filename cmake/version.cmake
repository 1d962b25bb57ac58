# Writes core/version.hpp (from src/core/version.hpp.in) with the version, the commit the tree was
# built from, the build date and the compiler. Run by CMakeLists.txt at configure time and again at
# every build (cmake -P), so the commit follows new commits without a reconfigure; configure_file
# rewrites the header only when its text changes, so an unchanged tree recompiles nothing.
#
# Inputs (-D): SOURCE_DIR, OUTPUT, LATTICE_VERSION, LATTICE_COMPILER, and optionally LATTICE_COMMIT
# (a packager building from a tarball names the commit itself; otherwise git is asked, and a tree
# that is not a git checkout of its own reads "unknown").
# The date honours SOURCE_DATE_EPOCH (reproducible builds) and has day resolution.
if(LATTICE_COMMIT)
  set(commit "${LATTICE_COMMIT}")
else()
  set(commit "unknown")
  find_program(GIT_EXECUTABLE git)
  if(GIT_EXECUTABLE)
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --show-toplevel
                    OUTPUT_VARIABLE top RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    # Only lattice's own checkout: a tarball unpacked inside some other repository is not one.
    if(rc EQUAL 0)
      file(REAL_PATH "${top}" top)
      file(REAL_PATH "${SOURCE_DIR}" source)
    endif()
    if(rc EQUAL 0 AND top STREQUAL source)
      execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --short HEAD
                      OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(rc EQUAL 0 AND head)
        set(commit "${head}")
        # Tracked files that differ from HEAD (as git describe --dirty: a corpus or notes beside the
        # sources that git does not track leave the build clean).
        execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                        OUTPUT_VARIABLE changes RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        if(NOT rc EQUAL 0 OR changes)
          string(APPEND commit "-dirty")
        endif()
      endif()
    endif()
  endif()
endif()
string(TIMESTAMP LATTICE_BUILD_DATE "%Y-%m-%d" UTC)
set(LATTICE_COMMIT "${commit}")
configure_file("${SOURCE_DIR}/src/core/version.hpp.in" "${OUTPUT}" @ONLY)
