"""The side-by-side benchmark on a tiny model (correctness, not speed)."""

import json

import pytest
import torch

from poptune import ConfigError, PopConfig, load_model
from poptune.measure import RepeatPolicy
from poptune.measure.bench import BenchResult, BenchRow, BenchSpec, run_bench
from poptune.measure.nullcheck import AA_PAIRS
from poptune.measure.timing_prompts import prompt_batch

FAST = RepeatPolicy(warmup=0, min_repeats=2, min_seconds=0.0)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-gemma3")


def test_run_bench_records_every_length_and_round_trips(tiny):
    model, tok = tiny
    labels = []
    result = run_bench(
        model, tok, PopConfig(skip=3), BenchSpec(lengths=(16, 40), decode_tokens=3, policy=FAST),
        model_name="tiny-gemma3", progress=labels.append,
    )
    assert [row.length for row in result.rows] == [16, 40]
    assert labels == ["prefill 16", "decode 16", "prefill 40", "decode 40", "A/A check"]
    for row in result.rows:
        assert row.prefill.a.count == row.prefill.b.count == 2
        assert row.decode is not None and row.decode.a.count == 2
        assert row.ideal > 1.0 and row.speedup > 0
    data = json.loads(result.to_json())
    assert data["hardware"]["kind"] == "cpu" and data["config"] == {"skip": 3, "boundary": "last", "offset": 0}
    assert BenchResult.from_dict(data).to_json() == result.to_json()
    table = result.table()
    assert "speedup" in table and len(table.splitlines()) == 3
    from poptune import get_pop_config

    assert get_pop_config(model) is None  # the model is left plain


def test_prompts_are_real_text_of_exact_length(tiny):
    _, tok = tiny
    batch = prompt_batch(tok, 300, batch_size=3)
    assert batch["input_ids"].shape == (3, 300)
    assert batch["input_ids"][0, 0] == tok.bos_token_id
    assert "truth universally acknowledged" in tok.decode(batch["input_ids"][0])
    assert not (batch["input_ids"][0] == batch["input_ids"][1]).all()  # rows start at other places


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lengths=()), "at least one"),
        (dict(lengths=(1,)), "integers >= 2"),
        (dict(batch_size=0), "`batch_size`"),
        (dict(decode_tokens=-1), "`decode_tokens`"),
    ],
)
def test_spec_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        BenchSpec(**kwargs)


def test_lengths_beyond_the_model_are_refused(tiny):
    model, tok = tiny
    with pytest.raises(ConfigError, match="exceed this model's 4096 positions"):
        run_bench(model, tok, PopConfig(skip=1), BenchSpec(lengths=(5000,), policy=FAST), model_name="x")


def test_image_prompts_one_row_per_resolution(tiny):
    """Rows carry the image size and token count; the vision encoder lowers the ideal ratio; Qwen3-VL's
    rope state is left as found, so later text-only forwards are not shifted."""
    from poptune.measure.flops import ideal_speedup
    from poptune.models.vision import ImageSize

    model, tok = load_model("tiny-qwen3-vl")
    before = model.model.rope_deltas
    spec = BenchSpec(images=(ImageSize(64, 48), ImageSize(160, 128)), decode_tokens=2, policy=FAST)
    result = run_bench(model, tok, PopConfig(skip=2), spec, model_name="tiny-qwen3-vl")
    assert [(r.image, r.image_tokens) for r in result.rows] == [("64x48", 70), ("160x128", 80)]
    for row in result.rows:
        assert row.summary()["image_tokens"] == row.image_tokens and row.decode is not None
        assert 1.0 < row.ideal < ideal_speedup(model.config.text_config, row.length, PopConfig(skip=2))
    assert model.model.rope_deltas is before
    assert BenchResult.from_dict(json.loads(result.to_json())).to_json() == result.to_json()
    assert result.table().splitlines()[0].split()[:3] == ["image", "img", "tok"]
    with pytest.raises(ConfigError, match="text-only model"):
        run_bench(tiny[0], tiny[1], PopConfig(skip=1), spec, model_name="tiny-gemma3")


def test_bench_records_intervals_null_checks_and_provenance(tiny):
    model, tok = tiny
    result = run_bench(model, tok, PopConfig(skip=3), BenchSpec(lengths=(16,), decode_tokens=2, policy=FAST),
                       model_name="tiny-gemma3", weights="random")
    data = json.loads(result.to_json())
    row = data["rows"][0]
    assert row["speedup_lo"] <= row["speedup"] <= row["speedup_hi"] and row["pairs"] == 2
    assert row["decode_speedup_lo"] <= row["decode_speedup"] <= row["decode_speedup_hi"] and row["decode_pairs"] == 2
    assert row["prefill"]["order"] == ["ab", "ba"] and len(row["prefill"]["offsets_s"]) == 2
    check = data["null_check"]
    # The A/A pairs are as many as their equivalence test needs, whatever the policy's minimum.
    assert check["length"] == 16 and check["aa"]["pairs"] == AA_PAIRS and set(check["decode"]) == {"16"}
    assert check["aa"]["confidence"] == pytest.approx(0.90) and isinstance(check["aa"]["equivalent"], bool)
    assert data["noisy"] == check["noisy"] == bool(check["reasons"])
    prov = data["provenance"]
    assert {"command", "poptune", "git_commit", "weights_fingerprint", "attn_implementation", "dtype",
            "torch_threads", "thread_env", "load_start", "load_end"} <= set(prov)
    assert prov["weights_fingerprint"].startswith("random-seed0") and prov["dtype"] == "float32"
    assert "OMP_NUM_THREADS" in prov["thread_env"] and "sdpa" in data["ideal_assumption"]
    assert BenchResult.from_dict(data).to_json() == result.to_json()


def test_no_null_check_times_no_aa_pair(tiny):
    model, tok = tiny
    result = run_bench(model, tok, PopConfig(skip=3), BenchSpec(lengths=(16,), decode_tokens=0, policy=FAST,
                                                                null_check=False), model_name="tiny-gemma3")
    assert result.null_check is not None and result.null_check.aa is None and result.null_check.decode == {}


def test_intervals_wider_than_the_precision_target_are_listed(tiny):
    model, tok = tiny
    policy = RepeatPolicy(warmup=0, min_repeats=3, max_repeats=3, min_seconds=0.0, precision=1e-9)
    result = run_bench(model, tok, PopConfig(skip=3), BenchSpec(lengths=(16,), decode_tokens=0, policy=policy,
                                                                null_check=False), model_name="tiny-gemma3")
    assert set(result.imprecise()) == {"prefill 16"} and json.loads(result.to_json())["imprecise"]


def test_rows_carry_energy_and_telemetry_or_why_not(tiny):
    model, tok = tiny
    result = run_bench(model, tok, PopConfig(skip=3), BenchSpec(lengths=(16,), decode_tokens=0, policy=FAST,
                                                                null_check=False), model_name="tiny-gemma3")
    figures = result.rows[0].summary()
    assert figures["energy_pop_j"] is None and figures["energy_full_j"] is None
    assert figures["energy_reason"] == "CPU device: no NVML telemetry"
    assert figures["telemetry_reason"] == "CPU device: no NVML telemetry" and figures["timing"] == "eager"
    data = json.loads(result.to_json())
    assert data["energy_seconds"] == 1.0 and data["graphs"] is False
    assert data["rows"][0]["energy"]["full"]["reason"] == "CPU device: no NVML telemetry"
    assert BenchResult.from_dict(data).to_json() == result.to_json()


def test_cuda_graph_timing_is_refused_on_cpu(tiny):
    model, tok = tiny
    with pytest.raises(ConfigError, match="`graphs` .* needs a model on a CUDA device, this one is on cpu"):
        run_bench(model, tok, PopConfig(skip=3), BenchSpec(lengths=(16,), graphs=True, policy=FAST),
                  model_name="tiny-gemma3")
    with pytest.raises(ConfigError, match=r"`energy_seconds` must be 0 \(off\) or >= 1, got 0.5"):
        BenchSpec(energy_seconds=0.5)


def test_a_gpu_warms_up_at_least_a_second_at_the_timed_shape() -> None:
    from poptune.measure.benchrecord import GPU_WARMUP_SECONDS, device_policy

    one_pair = RepeatPolicy(warmup=1, min_repeats=5, min_seconds=0.2)  # `poptune bench`'s own policy
    on_gpu = device_policy(one_pair, torch.device("cuda", 0))
    assert GPU_WARMUP_SECONDS >= 1.0 and on_gpu.warmup_seconds == GPU_WARMUP_SECONDS and on_gpu.warmup == 1
    assert device_policy(RepeatPolicy(warmup=0, min_repeats=3), torch.device("cuda")).warmup == 1
    assert device_policy(one_pair, torch.device("cpu")) == one_pair  # a CPU has no clocks to ramp up
    longer = RepeatPolicy(warmup=2, warmup_seconds=3.0)
    assert device_policy(longer, torch.device("cuda")) == longer


@pytest.mark.parametrize("decode_tokens", [0, 2])
def test_each_row_records_the_kv_cache_bytes_of_both_sides(tiny, decode_tokens):
    # The bytes of the real cache after each side's prefill, per request: with the layers' own K/V, POP's cache is
    # the full model's (every layer holds every prompt token), whether read from the decode pair or a prefill of
    # its own.
    from poptune.measure.prefill import cache_bytes, prefill
    from poptune.measure.windows import window_sizes_on_device

    model, tok = tiny
    spec = BenchSpec(lengths=(24,), batch_size=2, decode_tokens=decode_tokens, policy=FAST, null_check=False)
    row = run_bench(model, tok, PopConfig(skip=3), spec, model_name="tiny-gemma3").rows[0]
    with torch.inference_mode(), window_sizes_on_device(model):  # as the bench prefills (one shared window size)
        out = prefill(model, prompt_batch(tok, 24, 1, device=model.device), None)
    keys_values = sum(t.nbytes for layer in out.cache.layers for t in (layer.keys, layer.values))
    assert row.kv_bytes == row.full_kv_bytes == cache_bytes(out.cache) >= keys_values > 0
    assert row.summary()["kv_bytes"] == row.kv_bytes and BenchRow.from_dict(row.to_dict()).kv_bytes == row.kv_bytes


def test_cache_bytes_counts_each_tensor_once():
    from poptune.measure.prefill import cache_bytes

    keys, values = torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4, dtype=torch.float16)
    layer = type("Layer", (), {})()
    layer.keys, layer.values, layer.is_initialized = keys, values, True
    shared = type("Layer", (), {})()
    shared.keys, shared.values = keys, values  # a layer reusing another's cache holds no bytes of its own
    cache = type("Cache", (), {"layers": [layer, shared]})()
    assert cache_bytes(cache) == 1 * 2 * 5 * 4 * (4 + 2)
    assert cache_bytes(((keys, values), (keys[:, :, :2], values))) == keys.nbytes + values.nbytes  # a prefix view
