"""@tilelang.autotune over @tilelang.jit and AutoTuner: parallel compiles, progress on
stderr, failing candidates skipped and listed with their reason, user mistakes raised, the
best configuration cached on disk and reused by a later process."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.autotuner import AutoTuner, set_autotune_inputs, workers
from tilelang.autotuner.failures import CandidateTimeout
from tilelang.autotuner.measure import measure
from tilelang.errors import KernelArgumentError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test tunes into a cache of its own: no test reads another's tuning result."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))


def scale(M, N, block_M=16, factor=2.0):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=32) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * factor
            T.copy(x, Y[bx * block_M, 0])

    return main


def test_picks_a_working_config_and_reports_it():
    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 32}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    k = build(64, 16)
    assert k.config["block_M"] in (8, 32) and k.latency > 0
    assert build(64, 16) is k
    x = torch.randn(64, 16)
    torch.testing.assert_close(k(x), x * 2)


def test_wrong_configs_are_skipped_with_their_reason():
    @tilelang.autotune(configs=lambda M, N: [{"factor": 3.0}, {"factor": 2.0}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, factor=2.0):
        return scale(M, N, 16, factor)

    k = build(32, 8)
    assert k.config == {"factor": 2.0}
    [failure] = k.autotune_failures
    assert failure.config == {"factor": 3.0} and failure.reason == "wrong result"
    assert "differ" in failure.message


def test_no_working_config_raises_listing_each_reason():
    @tilelang.autotune(configs=[{"factor": 5.0}, {"block_M": 0}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16, factor=2.0):
        return scale(M, N, block_M, factor)

    with pytest.raises(tilelang.TileLangError, match="no configuration works") as info:
        build(32, 8)
    assert "{'factor': 5.0}: wrong result" in str(info.value)
    assert "{'block_M': 0}: compile error" in str(info.value)


# The acceptance scenario, run as two separate processes sharing one cache folder.
_SCRIPT = textwrap.dedent("""
    import json, sys
    import tilelang, tilelang.language as T

    sys.path.insert(0, {here!r})
    from test_autotune import scale

    calls = []

    @tilelang.autotune(configs=[{{"block_M": b}} for b in (4, 8, 16, 32, 64)]
                       + [{{"block_M": 16, "factor": 3.0}}],
                       warmup=1, rep=5, ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16, factor=2.0):
        calls.append(block_M)
        return scale(M, N, block_M, factor)

    k = build(64, 16)
    r = k.autotune_result
    print(json.dumps({{"config": k.config, "latency": k.latency, "from_cache": r.from_cache,
                      "builds": len(calls), "cache_path": r.cache_path,
                      "failures": [[f.config, f.reason] for f in k.autotune_failures]}}))
""")


def _run_script(tmp_path, cache):
    script = tmp_path / "tune.py"
    script.write_text(_SCRIPT.format(here=os.path.dirname(__file__)))
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_tunes_in_parallel_then_a_second_process_reuses_the_cached_best(tmp_path):
    cache = tmp_path / "shared_cache"
    first, err = _run_script(tmp_path, cache)
    assert not first["from_cache"] and first["builds"] == 6
    assert first["config"]["block_M"] in (4, 8, 16, 32, 64) and first["latency"] > 0
    assert first["failures"] == [[{"block_M": 16, "factor": 3.0}, "wrong result"]]
    # progress: both bars ran to the end, on stderr
    assert re.search(r"autotune build: compiling: 100%.*6/6", err)
    assert re.search(r"autotune build: timing: 100%.*6/6", err)
    # the failure is listed at the end with its reason
    assert "{'block_M': 16, 'factor': 3.0}: wrong result" in err
    assert os.path.exists(first["cache_path"])

    second, err2 = _run_script(tmp_path, cache)
    assert second["from_cache"] and second["cache_path"] == first["cache_path"]
    assert second["config"] == first["config"] and second["latency"] == first["latency"]
    assert second["builds"] == 1  # only the best configuration's program was built
    assert "compiling" not in err2 and "from the tuning cache" in err2
    assert second["failures"] == first["failures"]


def test_configs_may_be_a_generator_and_are_read_once():
    configs = ({"block_M": b} for b in (8, 16))

    @tilelang.autotune(configs=configs, warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    assert build(32, 8).config in ({"block_M": 8}, {"block_M": 16})
    assert build(64, 8).config in ({"block_M": 8}, {"block_M": 16})


def test_a_config_key_the_function_does_not_take_raises_type_error():
    calls = []

    @tilelang.autotune(configs=[{"block_M": 8}, {"blok_M": 16}], warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        calls.append(block_M)
        return scale(M, N, block_M)

    with pytest.raises(TypeError, match="'blok_M'.*build\\(\\) does not take"):
        build(32, 8)
    assert calls == []  # raised before anything was built or compiled


def test_a_mistake_in_the_users_function_raises_instead_of_being_skipped():
    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        if block_M == 16:
            return scale(M, N, block_M, factor="2" + 1)  # TypeError: the user's bug
        return scale(M, N, block_M)

    with pytest.raises(TypeError, match="can only concatenate str"):
        build(32, 8)


def test_the_functions_own_assertion_marks_an_invalid_config():
    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 64}], warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        assert block_M <= M, "block_M larger than M"
        return scale(M, N, block_M)

    k = build(32, 8)
    assert k.config == {"block_M": 8}
    [failure] = k.autotune_failures
    assert failure.reason == "invalid config" and "block_M larger than M" in failure.message


def test_a_compile_running_past_the_timeout_is_killed_and_listed():
    if not workers.can_fork():
        pytest.skip("compile timeouts need forked workers")

    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3,
                       timeout=0.001)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    with pytest.raises(tilelang.TileLangError, match="no configuration works") as info:
        build(32, 8)
    assert str(info.value).count(": timeout: compiling took longer than 0.001 s") == 2


def test_checking_and_timing_stop_at_the_deadline():
    k = tilelang.compile(scale(32, 8), out_idx=[-1], target="cpu")
    x = torch.randn(32, 8)
    with pytest.raises(CandidateTimeout):
        measure(k, [x], None, False, 1e-2, 1e-2, 0.01, 1, 3, deadline=time.monotonic() - 1)
    assert measure(k, [x], lambda a: a * 2, True, 1e-2, 1e-2, 0.01, 1, 3, None) > 0


def test_shared_memory_exceeded_is_its_own_reason():
    from tilelang.engine.target import resolve

    @T.prim_func
    def big(A: T.Tensor((128, 128), "float32"), B: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((512, 512), "float32")  # 1 MiB: over every GPU's limit
            T.copy(A[0, 0], s[0:128, 0:128])
            T.copy(s[0:128, 0:128], B[0, 0])

    outcomes = {}
    workers.compile_all([big], dict(out_idx=[-1], target=resolve("cuda -arch=sm_80")), 120,
                        outcomes.__setitem__)
    reason, message = outcomes[0]
    assert reason == "shared memory exceeded" and "bytes of shared memory" in message


def test_in_process_compiles_where_fork_is_unavailable(monkeypatch):
    monkeypatch.setattr(workers, "can_fork", lambda: False)

    @tilelang.autotune(configs=[{"block_M": 8}, {"factor": 3.0}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16, factor=2.0):
        return scale(M, N, block_M, factor)

    k = build(32, 8)
    assert k.config == {"block_M": 8}
    assert [f.reason for f in k.autotune_failures] == ["wrong result"]


def test_autotuner_class_api():
    def kernel(block_M=16, factor=2.0):
        return scale(64, 16, block_M, factor)

    def ref(x):
        return x * 2

    def tuner():
        return (AutoTuner.from_kernel(kernel=kernel, configs=[{"block_M": 8}, {"block_M": 32}])
                .set_compile_args(out_idx=[-1], target="cpu")
                .set_profile_args(ref_prog=ref, skip_check=False))

    result = tuner().run(warmup=1, rep=3, timeout=120)
    assert result.config in ({"block_M": 8}, {"block_M": 32}) and result.latency > 0
    assert not result.from_cache and result.failures == []
    x = torch.randn(64, 16)
    torch.testing.assert_close(result.kernel(x), x * 2)
    again = tuner().run(warmup=1, rep=3)
    assert again.from_cache and again.config == result.config


def test_set_autotune_inputs_feeds_every_candidate():
    seen = []

    def ref(x):
        seen.append(x)
        return x * 2

    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3,
                       ref_prog=ref)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    x, y = torch.randn(32, 8), torch.empty(32, 8)
    with set_autotune_inputs(x, y):  # all parameters: the output is dropped
        build(32, 8)
    assert len(seen) == 2 and all(s is x for s in seen)


def test_cache_input_tensors_reuses_generated_inputs():
    seen = []

    def ref(x):
        seen.append(x)
        return x * 2

    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3,
                       ref_prog=ref, cache_input_tensors=True)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    build(32, 8)
    assert len(seen) == 2 and seen[0] is seen[1]


def test_a_call_that_fixes_a_tuned_parameter_compiles_it_directly(capfd):
    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    k = build(32, 8, block_M=16)
    assert not hasattr(k, "latency")
    assert "autotune" not in capfd.readouterr().err


def test_disabled_cache_stores_no_tuning_result(tmp_path):
    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    tilelang.disable_cache()
    try:
        k = build(32, 8)
    finally:
        tilelang.enable_cache()
    assert k.autotune_result.cache_path is None
    assert not (tmp_path / "cache" / "autotune").exists()


def test_tunes_without_a_tuning_cache_when_no_cache_folder_is_usable(monkeypatch):
    # the kernel cache warns and goes on without a folder; autotune raised a TypeError
    from tilelang.jit import cache

    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    monkeypatch.setattr(cache, "cache_dir", lambda: None)
    k = build(32, 8)
    assert k.autotune_result.cache_path is None and k.config["block_M"] in (8, 16)
    tilelang.autotuner.clear_cache()


def scale_through_shared(M, N, block_M=32):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            s = T.alloc_shared((block_M, N), "float32")
            x = T.alloc_fragment((block_M, N), "float32")
            T.copy(X[bx * block_M, 0], s)
            T.copy(s, x)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * 2.0
            T.copy(x, Y[bx * block_M, 0])

    return main


@pytest.mark.gpu
def test_tunes_on_the_gpu_after_cuda_is_initialized_here():
    x = torch.randn(1024, 256, device="cuda")  # CUDA is live in this process before forking
    torch.cuda.synchronize()

    @tilelang.autotune(configs=[{"block_M": 16}, {"block_M": 32}, {"block_M": 512}],
                       warmup=5, rep=20, ref_prog=lambda a: a * 2)
    @tilelang.jit(out_idx=[-1])
    def build(M, N, block_M=32):
        return scale_through_shared(M, N, block_M)

    k = build(1024, 256)
    assert k.config in ({"block_M": 16}, {"block_M": 32}) and k.latency > 0
    [failure] = k.autotune_failures  # 512 x 256 float32 is 512 KiB of shared memory
    assert failure.config == {"block_M": 512} and failure.reason == "shared memory exceeded"
    torch.testing.assert_close(k(x), x * 2)


def test_a_symbolic_size_without_given_inputs_says_how_to_give_them():
    m = T.dynamic("m")

    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(block_M=16):
        @T.prim_func
        def main(X: T.Tensor((m, 16), "float32"), Y: T.Tensor((m, 16), "float32")):
            with T.Kernel(T.ceildiv(m, block_M), threads=32) as bx:
                for i, j in T.Parallel(block_M, 16):
                    if bx * block_M + i < m:
                        Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 2.0

        return main

    with pytest.raises(KernelArgumentError, match=r"size 'm' of parameter 'X' is symbolic.*"
                                                  r"set_autotune_inputs\(\.\.\.\) or supply_prog"):
        build()
    x = torch.randn(40, 16)
    with set_autotune_inputs(x):
        torch.testing.assert_close(build()(x), x * 2)
