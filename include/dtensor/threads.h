// Threads — how many cores dtensor uses.
//
// One setting covers everything: the simulated world runs the kernels of
// the ranks it holds in parallel, and the dense kernels split their work
// over rows or blocks. Matrix products are split into fixed blocks here,
// each an OpenBLAS call on one thread: OpenBLAS's own threading gives other
// bits on other thread counts, so dtensor keeps it at one thread
// (OPENBLAS_NUM_THREADS is overridden). Work is never nested: a kernel
// running inside a parallel region (one simulated rank's shard, say) runs
// on one thread, so the process never runs more busy threads than the
// setting.
//
// Results do not depend on the setting: every kernel splits its work into
// the same fixed blocks whatever the thread count and combines partial
// results in block order, so 1 thread and 8 give the same bits.
//
// The default is DTENSOR_NUM_THREADS when set, otherwise the cores this
// process may run on (its CPU affinity mask) divided by the processes an
// MPI launcher started on this node (OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE), at least 1.
#pragma once

namespace dtensor {

// The current setting (>= 1).
int num_threads();
// Sets it; throws dtensor::Error unless 1 <= n <= 1024. Takes effect for the
// next parallel region; must not be called from inside one.
void set_num_threads(int n);

}  // namespace dtensor
