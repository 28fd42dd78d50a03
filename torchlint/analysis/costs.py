"""What each pattern costs (:class:`Cost`) and the table of its tier by where it runs.

docs/impact.md holds the same table (tests/test_impact.py compares them); the rules that
move a finding off its row (its place in the step, a host-only file, a multi-process run)
are :mod:`torchlint.analysis.impact`'s.
"""

from __future__ import annotations

import enum

from torchlint.analysis.multiplicity import Where


class Cost(enum.Enum):
    """What the pattern costs each time it runs (a noun phrase: the reason starts with it)."""

    SYNC = "a host-device sync that stalls the GPU pipeline"
    EMPTY_CACHE = ("the caching allocator's cached blocks released, plus a sync: the next step allocates every activation "
                   "again with `cudaMalloc`, itself synchronizing the device")
    HOST_COPY = "a device-to-host copy and the sync it waits for"
    ROUND_TRIP = "a copy to the other device and back, with a sync"
    MODULE_OFFLOAD = ("a whole module's weights copied to the host (and back by the load that pairs with it): "
                      "the model's bytes over the bus each way, not one small read")
    NEEDED_READ = ("a read the host code needs (a prioritised replay buffer's priorities, kept in a NumPy sum tree): "
                   "the sync is that structure's price, not avoidable short of keeping it on the device")
    UPLOAD = "a tensor made on the host and copied over, the host waiting for the copy"
    SMALL_UPLOAD = "a small tensor made on the host and copied over: the bytes cost nothing, but a blocking copy waits for the GPU's queue like a read"
    LARGE_UPLOAD = ("a large tensor made on the host and copied over (a vocabulary's or class count's worth per row): "
                    "the host fills its megabytes and the pageable copy moves them while the GPU idles, drained queue or not")
    ALLOCATION = "an extra host allocation and copy"
    SMALL_WORK = "a little extra work (a memset, a bias add, autograd bookkeeping)"
    SMALL_KERNELS = "slightly slower kernels (small layers, or the batch dimension)"
    PER_PARAMETER_LAUNCHES = "an op or two per parameter (a kernel launch each on a GPU, a dispatch on the CPU) where one multi-tensor call would do"
    PER_ELEMENT_LAUNCHES = ("a tiny kernel launch or two per element of a Python loop over host indices (a few microseconds of host "
                            "time each, for a few bytes of work), where one indexed op on all of them would do")
    TIMESTEP_LAUNCHES = "a few tiny kernel launches per timestep of a Python loop over a rollout, where the host does the same arithmetic in about a microsecond an operation"
    PER_PARAMETER_COLLECTIVES = "a collective per parameter tensor: one latency-bound launch and wait for each small tensor where one bucket would do"
    PADDED_TO_MAX = "every sequence padded to the maximum length: the model's forward and backward run over the padding too"
    CACHE_COPIED = "the whole preallocated key-value cache copied to write one token's keys and values"
    CACHE_GROWN = "the whole key-value cache copied into a new tensor one token longer, for every token: T²/2 positions copied for T tokens"
    MEMORY_KEPT = "memory that grows with every step"
    GRAPH_BUILT = "an autograd graph built and thrown away"
    FROZEN_WEIGHT_GRADS = "weight gradients of a network no optimizer updates, computed in every backward (about a third of its forward and backward) and kept in memory"
    FROZEN_BACKBONE_GRADS = ("weight gradients of a torchvision model's layers (a perceptual loss's or a teacher's, commonly as large as "
                             "the network trained or larger) no optimizer updates, computed in every backward (about a third of its "
                             "forward and backward) and kept in memory")
    DISCARDED_GRADS = "gradients a backward computes for a network the step after it does not update, zeroed before its own step reads them"
    DISCARDED_BACKWARD = ("a whole backward through a network the step after it does not update (its input gradients and its weight "
                          "gradients, about two thirds of its forward and backward), zeroed before its own step reads them")
    DETACHED_GRAPH = ("an autograd graph recorded by a forward that is needed anyway, then dropped by `.detach()`: "
                      "the graph's bookkeeping and its saved activations' memory until the detach, no extra compute")
    INPUT_PIPELINE = "batches loaded while the GPU waits"
    HOST_INPUT_PIPELINE = "batches loaded between steps on the host, where workers would share the model's cores"
    ONE_WORKER_PIPELINE = "one worker process decoding every sample: the step waits whenever a batch takes longer to make than a step"
    PREBATCHED_PIPELINE = "whole batches made in the training process by a dataset this project does not hold (often slices of arrays in memory: one call per step)"
    GIVEN_ITEMS_PIPELINE = "batches collated in the training process from items a dataset indexes in what its constructor was given (in memory, unless that reads lazily): little for workers to take over"
    PINNED_COPY = ("pageable host-to-device copies: each batch staged through a pinned buffer, one more host copy of its bytes "
                   "(a small share of a step unless the step is transfer-bound)")
    UNPINNED_NON_BLOCKING = ("pageable host-to-device copies asked for `non_blocking=True`: from pageable memory the copy is staged "
                             "and the host waits for it, so the overlap the loop asks for does not happen (17-24 % of a "
                             "transfer-bound step measured on an H200)")
    PIN_WITHOUT_WORKERS = "pinning in the loop itself: one more copy per batch without workers"
    MISSING_PIECES = "slower kernels in a large layer's every forward and backward"
    GUIDANCE_UNBATCHED = "the model run twice per sampling step at half the batch, where one call on the doubled batch launches each kernel once (1.3-2x at small batch, little when the GPU is full)"
    DECODE_PAST_END = "every generation decodes to its full length after every row has emitted EOS: the passes after the last row ended are thrown away (often as many as the useful ones)"
    PREFIX_RECOMPUTED = "the whole prefix run through the model again for every decoded token: ~T/2 times a cached decoder's compute for T tokens"
    GENERATE_UNCACHED = ("a library's generation with its key-value cache off: every token runs the model over the whole prefix again, "
                         "about T/2 times the work for T tokens")
    UNFUSED_ATTENTION = "an attention in several kernels with its full weight matrix written to memory, where one fused kernel would do"
    SIDE_ATTENTION = ("an attention in several kernels with its full weight matrix written to memory, where it is a smaller share "
                      "of the step than a transformer's self-attention: cross-attention over another, short input, an attention block "
                      "between a convolutional network's blocks, or scores carrying a second score matrix a fused kernel reads as a mask anyway")
    LATENT_ATTENTION = ("an attention in several kernels whose queries are a few learned latents (a Perceiver's) or one position "
                        "(a class token's): a thin score matrix, a small share of the step, where one fused kernel would do")
    RETURNED_ATTENTION = ("an attention in several kernels with its full weight matrix written to memory, which the module also returns: "
                          "one fused kernel would do where its callers read the weights only under an option")
    TF32_OFF = "fp32 matmuls without TF32 (Ampere and newer GPUs run TF32 several times faster)"
    PRECISION = "fp32 math where the GPU has 2-8x faster reduced-precision units"
    GRAPH_BREAK = "a torch.compile graph break: the compiled code split in two, the code between run eagerly, no fusion across it"
    EXTRA_ALL_REDUCE = "an all-reduce of every gradient on every micro-step (N-1 of N wasted)"
    DUPLICATED_WORK = "every rank going through the whole dataset (one GPU's work, N times)"
    MULTI_GPU_OVERHEAD = "single-process multi-GPU (the model copied to every GPU, one Python thread for all)"
    ONE_DEVICE_PARALLEL = "a data-parallel wrapper over one device: no replica, only its scatter and gather of each call's inputs and outputs"
    CHECKPOINT_SAVE = ("a checkpoint written: every parameter (and, in a checkpoint, the optimizer's state: twice as much again "
                       "for Adam) copied to the host after a sync, then pickled and written to disk; a second or more per GB "
                       "written (0.2 GB/s measured on a CPU host), where the step itself takes milliseconds")
    CHECKPOINT_SAVE_LONG_STEP = ("a checkpoint written once per full-batch step (an epoch over the whole data): every parameter copied "
                                 "to the host and written to disk, a smaller share of a step that goes over all the data, but "
                                 "a save that only every N epochs or an improvement needs")
    DEBUG_MODE = "an autograd debugging mode left on: every op of every step checked or recorded (anomaly mode measured at 2x a CPU step)"
    UNUSED_PARAMETER_SEARCH = "DDP's search for unused parameters: a walk of the whole autograd graph after every forward, for a model that uses them all"
    MAYBE_UNUSED_PARAMETER_SEARCH = "DDP's search for unused parameters: a walk of the autograd graph after every forward, which this model may need"
    HOST_COLLECTIVES = "gradients all-reduced by gloo, through host memory, where NCCL reduces them on the GPUs"
    DETERMINISTIC_KERNELS = "deterministic kernels, slower than the fastest ones (a choice reproducibility may need)"
    API_AGE = "an old API: a style matter, not a cost"
    SUPPRESSION = "a `# noqa` that suppresses nothing: it misleads, and would hide the next real finding on its line"


# A cost paid once per step whatever the step holds (a checkpoint's write): where the step is a
# full-batch epoch, one pass over all the data, it is a smaller share of the step (the check and
# the join both take the long step's cost there).
LONG_STEP_COSTS = {Cost.CHECKPOINT_SAVE: Cost.CHECKPOINT_SAVE_LONG_STEP}


# (cost, where) -> tier, columns in Where's order: train, infer, eval, batch, epoch,
# every_n, once. docs/impact.md holds the same table (tests/test_impact.py compares them).
_TABLE = """
SYNC                 high   medium low    medium low    low    low
EMPTY_CACHE          high   medium low    medium low    low    low
HOST_COPY            high   low    low    low    low    low    low
ROUND_TRIP           high   medium low    medium low    low    low
MODULE_OFFLOAD       high   high   medium high   low    low    low
NEEDED_READ          low    low    low    low    low    low    low
UPLOAD               high   medium low    medium low    low    low
SMALL_UPLOAD         medium medium low    medium low    low    low
LARGE_UPLOAD         high   medium low    medium low    low    low
ALLOCATION           medium low    low    low    low    low    low
SMALL_WORK           low    low    low    low    low    low    low
SMALL_KERNELS        low    low    low    low    low    low    low
PER_PARAMETER_LAUNCHES medium low  low    low    low    low    low
TIMESTEP_LAUNCHES    medium medium low    medium medium low    low
PER_ELEMENT_LAUNCHES medium medium low    medium low    low    low
PER_PARAMETER_COLLECTIVES high low  low    high   low    low    low
PADDED_TO_MAX        high   low    low    medium low    low    low
CACHE_COPIED         medium high   medium high   low    low    low
CACHE_GROWN          low    high   low    low    low    low    low
MEMORY_KEPT          high   medium medium medium high   low    low
GRAPH_BUILT          medium medium medium medium low    low    low
FROZEN_WEIGHT_GRADS  medium low    low    medium low    low    low
FROZEN_BACKBONE_GRADS high  low    low    medium low    low    low
DISCARDED_GRADS      medium low    low    medium low    low    low
DISCARDED_BACKWARD   high   low    low    medium low    low    low
DETACHED_GRAPH       low    low    low    low    low    low    low
INPUT_PIPELINE       high   medium low    medium low    low    low
HOST_INPUT_PIPELINE  low    low    low    low    low    low    low
ONE_WORKER_PIPELINE  medium low    low    low    low    low    low
PREBATCHED_PIPELINE  low    low    low    low    low    low    low
GIVEN_ITEMS_PIPELINE low    low    low    low    low    low    low
PINNED_COPY          low    low    low    low    low    low    low
UNPINNED_NON_BLOCKING medium low   low    low    low    low    low
PIN_WITHOUT_WORKERS  low    low    low    low    low    low    low
MISSING_PIECES       medium low    low    low    low    low    low
GUIDANCE_UNBATCHED   low    high   low    medium low    low    low
PREFIX_RECOMPUTED    high   high   medium high   medium low    low
DECODE_PAST_END      high   high   medium medium low    low    medium
GENERATE_UNCACHED    medium medium low    medium low    low    low
UNFUSED_ATTENTION    high   high   medium high   medium low    low
SIDE_ATTENTION       medium medium medium medium low    low    low
LATENT_ATTENTION     low    low    low    low    low    low    low
RETURNED_ATTENTION   medium medium low    medium low    low    low
TF32_OFF             low    low    low    low    low    low    low
PRECISION            high   medium medium medium medium low    low
GRAPH_BREAK          high   high   medium medium low    low    low
EXTRA_ALL_REDUCE     high   low    low    high   medium low    low
DUPLICATED_WORK      high   medium medium high   medium low    low
MULTI_GPU_OVERHEAD   medium low    low    medium low    low    low
ONE_DEVICE_PARALLEL  low    low    low    low    low    low    low
CHECKPOINT_SAVE      high   low    low    medium low    low    low
CHECKPOINT_SAVE_LONG_STEP medium low low  medium low    low    low
DEBUG_MODE           high   high   high   high   high   high   high
UNUSED_PARAMETER_SEARCH medium medium medium medium medium medium medium
MAYBE_UNUSED_PARAMETER_SEARCH low low  low    low    low    low    low
HOST_COLLECTIVES     high   high   high   high   high   high   high
DETERMINISTIC_KERNELS low   low    low    low    low    low    low
API_AGE              low    low    low    low    low    low    low
SUPPRESSION          medium medium medium medium medium medium medium
"""
TIERS: dict[Cost, dict[Where, str]] = {
    Cost[row[0]]: dict(zip(Where, row[1:])) for row in (line.split() for line in _TABLE.strip().splitlines())
}
assert set(TIERS) == set(Cost) and all(len(row) == len(Where) for row in TIERS.values())


def tiers() -> dict[Cost, dict[Where, str]]:
    """The table itself (docs/impact.md is checked against it)."""
    return {cost: dict(row) for cost, row in TIERS.items()}


__all__ = ["LONG_STEP_COSTS", "TIERS", "Cost", "tiers"]
