// pelab — thread control: one setting drives both the OpenMP kernels and OpenBLAS.
#include "pelab/parallel.h"

#include <omp.h>

extern "C" void openblas_set_num_threads(int num_threads);

namespace pelab {

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace pelab
