"""InjectSoftwarePipeline alone: on the CPU a pipelined loop is a plain loop."""

from tilelang.transform import InjectSoftwarePipeline

from helpers import bind, copy_kernel, loops_of


def test_cpu_drops_schedule_annotations():
    mod = bind(copy_kernel())
    before = [lp for lp in loops_of(mod["main"]) if "num_stages" in lp.annotations]
    assert len(before) == 1
    out = InjectSoftwarePipeline()(mod)["main"]
    assert not [lp for lp in loops_of(out) if "num_stages" in lp.annotations]
    assert len(loops_of(out)) == len(loops_of(mod["main"]))
