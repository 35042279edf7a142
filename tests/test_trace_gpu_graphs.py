"""CUDA-graph kernels -> HLO ops (harness.trace.gpu), on a schedule small enough to read."""
from harness.trace.graphs import Kernel, Schedule, attribute, kernel_op

# One loop body, in schedule order: a fusion, a cuBLAS call, an async dynamic-slice fusion
# (named by the fusion it wraps, as the trace names it), another fusion.
ORDER = ["loop_add_fusion.1", "custom-call.2", "loop_dynamic_slice_fusion.7", "input_reduce_fusion"]


def _schedule() -> Schedule:
    return Schedule(names=set(ORDER) | {"param.0"},
                    position={op: ("body", i) for i, op in enumerate(ORDER)},
                    order={"body": list(ORDER)}, library={"custom-call.2"},
                    fusions={"loop_add_fusion.1", "input_reduce_fusion"})


def _graph(*names: str) -> list[Kernel]:
    return [Kernel(start=10 * i, dur=5, module="jit_step", op="command_buffer_3", name=n,
                   in_graph=True) for i, n in enumerate(names)]


def test_fusion_kernels_are_named_after_their_op():
    names = set(ORDER)
    assert kernel_op("loop_add_fusion_1", names) == "loop_add_fusion.1"
    assert kernel_op("input_reduce_fusion", names) == "input_reduce_fusion"
    assert kernel_op("nvjet_sm90_tst_128x160_64x5_2x1_v_bz_NNT", names) is None


def test_library_and_memcpy_kernels_take_their_place_in_the_schedule():
    kernels = _graph("loop_add_fusion_1", "Memset 0", "nvjet_sm90_tst_128x160", "memcpy128",
                     "input_reduce_fusion")
    attribute(kernels, _schedule())
    # the memset joins the GEMM after it: two launch units for two unnamed ops, in order
    assert [k.op for k in kernels] == ["loop_add_fusion.1", "custom-call.2", "custom-call.2",
                                       "loop_dynamic_slice_fusion.7", "input_reduce_fusion"]


def test_kinds_are_matched_apart_when_the_counts_disagree():
    # three launches for two ops, the memcpy of the async slice ahead of its place: the two
    # GEMM kernels go to the custom-call, the memcpy to the slice
    kernels = _graph("loop_add_fusion_1", "memcpy128", "nvjet_sm90_x", "sm90_xmma_gemm",
                     "input_reduce_fusion")
    attribute(kernels, _schedule())
    assert [k.op for k in kernels][1:4] == ["loop_dynamic_slice_fusion.7", "custom-call.2",
                                            "custom-call.2"]


def test_a_kernel_no_rule_places_keeps_the_graphs_op():
    # between two adjacent fusions the schedule has no op left for the kernel
    kernels = _graph("loop_add_fusion_1", "custom-call.2", "memcpy32_post", "mystery_kernel",
                     "loop_dynamic_slice_fusion_7")
    sched = _schedule()
    sched.position = {"loop_add_fusion.1": ("body", 0), "loop_dynamic_slice_fusion.7": ("body", 1)}
    sched.order = {"body": ["loop_add_fusion.1", "loop_dynamic_slice_fusion.7"]}
    attribute(kernels, sched)
    assert [k.op for k in kernels][2:4] == ["command_buffer_3", "command_buffer_3"]


def test_a_memset_joins_its_gemm_across_another_streams_kernel():
    from harness.trace.codes import Texts
    from harness.trace.gpu import Kernels, _fold
    from harness.trace.planes import StepWindows

    def k(start, op, name):
        return Kernel(start=start, dur=10, module="m", op=op, name=name, in_graph=False)

    # two executions of custom-call.1 (memset, then GEMM), another stream's fusion in between
    kernels = [k(0, "custom-call.1", "Memset 0"), k(5, "fusion.2", "loop_add_fusion_2"),
               k(20, "custom-call.1", "nvjet_sm90"), k(40, "custom-call.1", "Memset 0"),
               k(60, "custom-call.1", "nvjet_sm90")]
    texts = Texts()
    _, op, _, _, _, duration_ns, _ = _fold(Kernels.of_list(kernels, texts),
                                           StepWindows([(0, 100, 0)]), 0, texts)
    assert [texts.text[c] for c in op] == ["custom-call.1", "fusion.2", "custom-call.1"]
    assert list(duration_ns) == [20, 10, 20]


def test_kernels_fold_at_once_as_they_fold_one_by_one():
    """``_runs_at_once`` (numpy) against the rule applied kernel by kernel, on random kernel
    sequences of few ops and names, memsets and graph kernels among them: wherever it settles
    the folding at once, the executions are the same."""
    import random

    import numpy as np

    from harness.trace.gpu import _runs_at_once, _runs_in_turn

    rnd, settled = random.Random(0), 0
    for _ in range(2000):
        n = rnd.randint(0, 30)
        ops, names = rnd.randint(1, 5), rnd.randint(1, 6)
        key = np.array([rnd.randrange(ops) for _ in range(n)], np.int64)
        name = np.array([rnd.randrange(names) for _ in range(n)], np.int64)
        graph = np.array([rnd.random() < 0.2 for _ in range(n)], bool)
        memset = np.array([rnd.random() < 0.3 for _ in range(n)], bool)
        dur = np.array([rnd.randint(1, 100) for _ in range(n)], np.int64)
        first, total = _runs_in_turn(key, name, graph, memset, dur)
        found = _runs_at_once(key, name, graph, memset)
        if found is not None:
            settled += 1
            np.testing.assert_array_equal(found[0], first)
            np.testing.assert_array_equal(
                np.bincount(found[1], weights=dur, minlength=len(first)), total)
    assert settled > 400  # most sequences, where names repeat less, settle at once
