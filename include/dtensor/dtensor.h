// dtensor — distributed tensors: one logical tensor laid out over a mesh of
// ranks by placements (Shard, Replicate, Partial), as PyTorch's DTensor.
// This header is the umbrella: including it gives the whole API, one header
// per concept (the DTensor class itself is distributed_tensor.h):
//
//   World world = World::simulated(4);
//   DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
//   DTensor d = distribute_tensor(Tensor::randn({8, 6}, 0), mesh, {Shard(0), Replicate()});
//   DTensor r = d.redistribute({Replicate(), Shard(1)});   // all_gather, then local chunk
//   Tensor full = r.full_tensor();                          // == the original
//
// Not included: dtensor/mpi.h (MPI interop; it includes <mpi.h>, so only
// programs built against MPI include it) and the models of dtensor/models/.
#pragma once

#include "dtensor/autograd.h"            // requires_grad_, backward, NoGradGuard
#include "dtensor/checked.h"             // overflow-checked size arithmetic
#include "dtensor/checkpoint.h"          // save / load in any layout, safetensors
#include "dtensor/custom_op.h"           // register_sharding: ops of your own
#include "dtensor/debug.h"               // CommDebugMode, VerifyMode
#include "dtensor/distributed_tensor.h"  // DTensor, distribute_tensor, from_local
#include "dtensor/error.h"               // dtensor::Error
#include "dtensor/estimate.h"            // profile a step: exact memory, collectives
#include "dtensor/fsdp.h"                // fully_shard (FSDP2), replicate (DDP)
#include "dtensor/local_tensor.h"        // the shards a process holds
#include "dtensor/memory.h"              // memory per rank by category, peaks
#include "dtensor/mesh.h"                // DeviceMesh, Topology
#include "dtensor/nn.h"                  // nn::Module and layers
#include "dtensor/ops.h"                 // ops on DTensors
#include "dtensor/optim.h"               // SGD, Adam, AdamW, schedules, clipping
#include "dtensor/parallel.h"            // tensor-parallel layers, loss_parallel
#include "dtensor/placement.h"           // Shard, Replicate, Partial
#include "dtensor/redistribute.h"        // the planner
#include "dtensor/rules.h"               // the sharding-rule validator
#include "dtensor/spec.h"                // DTensorSpec
#include "dtensor/tensor.h"              // the dense tensor
#include "dtensor/tensor_parallel.h"     // parallelize_module and the parallel styles
#include "dtensor/threads.h"             // num_threads, set_num_threads
#include "dtensor/world.h"               // World: simulated or MPI
