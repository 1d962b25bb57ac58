#pragma once
// <mpi.h> without the deprecated MPI-2 C++ bindings: OpenMPI's mpicxx.h trips -Wcast-function-type
// under -Wall -Wextra -Werror, and lattice only uses the C API.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
