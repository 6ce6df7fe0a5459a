"""The vLLM argument catalog: validation, argv building and reading back, per vLLM version."""

from __future__ import annotations

import pytest

from agents.vllm_args import (
    CATALOG,
    DEFAULT_VERSION,
    KNOWN_VERSIONS,
    NEWEST_VERSION,
    UNRECOGNIZED,
    ArgError,
    argv_problems,
    available,
    code_loading_args,
    from_argv,
    loader_env,
    parse_version,
    to_argv,
    validate,
    version_note,
)

FLEET_CONFIG = {
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "gpu_memory_utilization": 0.9,
    "max_model_len": 8192,
    "tensor_parallel_size": 2,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": False,
    "kv_cache_dtype": "fp8",
    "dtype": "bfloat16",
    "seed": 0,
    "enforce_eager": True,
    "served_model_name": ["llama", "llama-3"],
    "download_dir": "/models",
    "disable_log_stats": True,
}


def messages(args: dict, version: str) -> list[str]:
    return [error.message for error in validate(args, version)]


def test_the_default_version_is_a_known_one():
    assert DEFAULT_VERSION in KNOWN_VERSIONS
    assert list(KNOWN_VERSIONS) == sorted(KNOWN_VERSIONS, key=parse_version)


def test_every_catalog_entry_has_a_flag_and_a_description():
    for dest, spec in CATALOG.items():
        assert spec.flag == "--" + dest.replace("_", "-")
        assert spec.description


@pytest.mark.parametrize("version", KNOWN_VERSIONS)
def test_a_fleet_config_is_valid_and_round_trips_in_every_known_version(version):
    assert validate(FLEET_CONFIG, version) == []
    assert from_argv(to_argv(FLEET_CONFIG, version), version) == FLEET_CONFIG


@pytest.mark.parametrize("version", KNOWN_VERSIONS)
def test_every_available_argument_round_trips(version):
    args = {dest: _sample(spec, version) for dest, spec in available(version).items()}
    args = {k: v for k, v in args.items() if v is not None}
    assert validate(args, version) == []
    assert from_argv(to_argv(args, version), version) == args
    # What the control plane renders, the agent accepts (agents/supervisor/spec.py).
    assert argv_problems(to_argv(args, version), version) == []
    falses = {k: False for k, v in args.items() if v is True}
    assert argv_problems(to_argv({**args, **falses}, version), version) == []


def _sample(spec, version):
    """A valid value for each kind; True for booleans so store_true switches come back."""
    if spec.kind == "bool":
        return True
    if spec.choices:
        values = next(v for s, v in reversed(spec.choices)
                      if parse_version(s) <= parse_version(version))
        return values[-1] if values else 16
    return {"int": 2, "float": 0.5, "str": "x", "strs": "name"}.get(spec.kind)


def test_swap_space_is_refused_on_current_vllm_with_the_version_it_went_away_in():
    [error] = validate({"swap_space": 4}, "0.33.0")
    assert error.arg == "swap_space"
    assert "--swap-space does not exist in vLLM 0.33.0 (removed in 0.18.0)" in error.message
    assert "kv_offloading_size" in error.message


@pytest.mark.parametrize("version", ["0.6.6.post1", "0.10.2", "0.11.0", "0.13.0", "0.17.1"])
def test_swap_space_is_accepted_on_versions_that_still_have_it(version):
    assert validate({"swap_space": 4}, version) == []
    assert to_argv({"swap_space": 4}, version) == ["--swap-space", "4"]


def test_an_argument_newer_than_the_version_says_when_it_arrived():
    [message] = messages({"kv_offloading_size": 8.0}, "0.11.0")
    assert "(added in 0.11.1)" in message


def test_gpu_memory_utilization_must_be_above_zero_and_at_most_one():
    assert messages({"gpu_memory_utilization": 1.5}, "0.33.0") == [
        "gpu_memory_utilization: must be > 0 and <= 1, got 1.5"]
    assert messages({"gpu_memory_utilization": 0}, "0.33.0")
    assert validate({"gpu_memory_utilization": 1}, "0.33.0") == []


def test_counts_must_be_positive():
    assert messages({"max_num_seqs": 0}, "0.33.0") == ["max_num_seqs: must be >= 1, got 0"]
    assert messages({"tensor_parallel_size": -2}, "0.11.0")


def test_max_model_len_takes_minus_one_for_auto_only_from_0_14():
    assert validate({"max_model_len": -1}, "0.33.0") == []
    assert messages({"max_model_len": -1}, "0.13.0") == ["max_model_len: must be >= 1, got -1"]


def test_a_misspelt_argument_gets_a_suggestion():
    assert validate({"max_num_seq": 256}, "0.33.0") == [
        ArgError("max_num_seq", "unknown argument 'max_num_seq' (did you mean max_num_seqs?)")]


def test_an_argument_unlike_any_other_is_simply_unknown():
    [message] = messages({"zzz": 1}, "0.33.0")
    assert message.startswith("unknown argument 'zzz'")


@pytest.mark.parametrize(("name", "value"), [
    ("max_num_seqs", "256"),
    ("max_num_seqs", 25.6),
    ("max_num_seqs", True),
    ("enable_prefix_caching", 1),
    ("enable_prefix_caching", "true"),
    ("gpu_memory_utilization", "0.9"),
    ("gpu_memory_utilization", float("nan")),
    ("kv_cache_dtype", 8),
    ("served_model_name", []),
    ("download_dir", None),
])
def test_values_of_the_wrong_type_are_refused(name, value):
    [error] = validate({name: value}, "0.33.0")
    assert error.arg == name
    assert "must be" in error.message


def test_a_float_argument_takes_an_integer():
    assert to_argv({"cpu_offload_gb": 4}, "0.33.0") == ["--cpu-offload-gb", "4"]


def test_kv_cache_dtype_choices_follow_the_version():
    assert validate({"kv_cache_dtype": "nvfp4"}, "0.20.0") == []
    [message] = messages({"kv_cache_dtype": "nvfp4"}, "0.13.0")
    assert "not a choice in vLLM 0.13.0 (it arrives in 0.20.0)" in message
    assert messages({"kv_cache_dtype": "bfloat16"}, "0.10.2")
    assert validate({"kv_cache_dtype": "bfloat16"}, "0.11.0") == []


def test_block_size_is_any_positive_integer_once_vllm_dropped_the_list():
    assert messages({"block_size": 48}, "0.13.0")
    assert validate({"block_size": 48}, "0.20.0") == []
    assert messages({"block_size": 0}, "0.20.0")


def test_booleans_use_the_no_spelling_where_vllm_has_it():
    assert to_argv({"enable_prefix_caching": False}, "0.33.0") == ["--no-enable-prefix-caching"]
    assert to_argv({"enforce_eager": False}, "0.10.2") == ["--no-enforce-eager"]


def test_old_store_true_switches_write_false_as_nothing():
    assert to_argv({"enforce_eager": False}, "0.6.6.post1") == []
    assert to_argv({"enforce_eager": True}, "0.6.6.post1") == ["--enforce-eager"]
    assert to_argv({"disable_log_stats": False}, "0.33.0") == []


def test_old_chunked_prefill_takes_an_explicit_false():
    assert to_argv({"enable_chunked_prefill": False}, "0.6.6.post1") == [
        "--enable-chunked-prefill=False"]
    assert from_argv(["--enable-chunked-prefill", "false"], "0.6.6.post1") == {
        "enable_chunked_prefill": False}


def test_a_no_flag_an_old_version_lacks_is_not_read_back():
    argv = ["--no-enforce-eager"]
    assert from_argv(argv, "0.6.6.post1") == {UNRECOGNIZED: argv}
    assert from_argv(argv, "0.33.0") == {"enforce_eager": False}


def test_from_argv_keeps_what_it_does_not_know_in_order():
    argv = ["vllm", "serve", "meta/llama", "--port", "8000", "-tp", "4", "--max-model-len=32k"]
    assert from_argv(argv, "0.33.0") == {
        "tensor_parallel_size": 4,
        "max_model_len": 32000,
        UNRECOGNIZED: ["vllm", "serve", "meta/llama", "--port", "8000"],
    }


def test_from_argv_keeps_a_value_that_does_not_parse():
    assert from_argv(["--max-num-seqs", "many"], "0.33.0") == {
        UNRECOGNIZED: ["--max-num-seqs", "many"]}


def test_to_argv_refuses_invalid_args():
    with pytest.raises(ValueError, match="swap_space"):
        to_argv({"swap_space": 4}, "0.33.0")


def test_an_unparseable_version_is_an_error():
    assert validate({}, "latest") == [ArgError(
        "version", "unparseable vLLM version 'latest'; expected e.g. 0.33.0")]
    with pytest.raises(ValueError):
        to_argv({}, "latest")


@pytest.mark.parametrize(("text", "parsed"), [
    ("0.6.6.post1", (0, 6, 6, 0, 1)),
    ("0.9.0.1", (0, 9, 0, 1, 0)),
    ("v0.11.0", (0, 11, 0, 0, 0)),
    ("0.12.0rc1", (0, 12, 0, 0, 0)),
    ("0.11.0+cu128", (0, 11, 0, 0, 0)),
])
def test_versions_parse_the_way_vllm_spells_them(text, parsed):
    assert parse_version(text) == parsed


def test_a_version_between_known_ones_behaves_as_the_one_before():
    assert validate({"swap_space": 4}, "0.15.0") == []
    assert messages({"swap_space": 4}, "0.18.1")


def test_an_unknown_future_version_behaves_as_the_newest():
    assert available("9.0.0") == available(NEWEST_VERSION)
    assert to_argv(FLEET_CONFIG, "9.0.0") == to_argv(FLEET_CONFIG, NEWEST_VERSION)
    assert "newer than the newest version Pitwall knows" in version_note("9.0.0")
    assert version_note(NEWEST_VERSION) is None


# --- launch safety: a value never reads as an option; arguments that load code are marked --

@pytest.mark.parametrize(("args", "arg"), [
    ({"tokenizer": "--middleware=evilmod.app"}, "tokenizer"),
    ({"served_model_name": ["m", "--tool-parser-plugin", "/tmp/p.py"]}, "served_model_name"),
    ({"served_model_name": "-x"}, "served_model_name"),
    ({"quantization": "-q"}, "quantization"),
    ({"download_dir": "--chat-template=/tmp/t.jinja"}, "download_dir"),
])
def test_a_string_or_list_value_that_would_read_as_an_option_is_refused(args, arg):
    [error] = validate(args, "0.33.0")
    assert error.arg == arg and "would be read as an option" in error.message
    with pytest.raises(ValueError, match="read as an option"):
        to_argv(args, "0.33.0")


def test_negative_numbers_still_pass_where_a_version_allows_them():
    assert to_argv({"max_model_len": -1, "seed": -5}, "0.33.0") == [
        "--max-model-len", "-1", "--seed", "-5"]


def test_argv_from_a_control_plane_is_read_back_whole_or_refused():
    good = to_argv({**FLEET_CONFIG, "served_model_name": ["a", "b"]}, "0.33.0")
    assert argv_problems(good, "0.33.0") == []
    # What an old control plane rendered from served_model_name=["m", "--tool-parser-plugin",
    # "/tmp/p.py"]: a flag Pitwall does not know slipped in after the list.
    slipped = ["--served-model-name", "m", "--tool-parser-plugin", "/tmp/p.py"]
    assert argv_problems(slipped, "0.33.0") == [
        "'--tool-parser-plugin' is not an argument Pitwall renders for vLLM 0.33.0",
        "'/tmp/p.py' is not an argument Pitwall renders for vLLM 0.33.0"]
    assert argv_problems(["--tokenizer", "--middleware=evilmod.app"], "0.33.0")
    assert argv_problems(["--tokenizer=-x"], "0.33.0")
    assert argv_problems(["--max-model-len", "-1"], "0.33.0") == []
    assert argv_problems([], "latest") == [
        "unparseable vLLM version 'latest'; expected e.g. 0.33.0"]


def test_arguments_that_load_code_are_marked_in_the_catalog():
    assert CATALOG["trust_remote_code"].loads_code
    assert not CATALOG["max_num_seqs"].loads_code
    assert code_loading_args({"trust_remote_code": True, "max_num_seqs": 8}) == [
        "trust_remote_code"]
    assert code_loading_args({"trust_remote_code": False}) == []  # false loads nothing
    assert code_loading_args({"no_such_arg": "x"}) == []


def test_loader_variables_are_one_documented_list():
    env = {"LD_PRELOAD": "/tmp/x.so", "PYTHONPATH": "/tmp", "LD_LIBRARY_PATH": "/tmp",
           "BASH_ENV": "/tmp/rc", "ENV": "/tmp/rc", "PYTHONSTARTUP": "/tmp/s.py",
           "CUDA_INJECTION64_PATH": "/tmp/i.so", "VLLM_LOGGING_CONFIG_PATH": "/tmp/l.json",
           "HF_TOKEN": "hf_x", "VLLM_LOGGING_LEVEL": "INFO", "PYTHONUNBUFFERED": "1"}
    assert loader_env(env) == sorted(set(env) - {"HF_TOKEN", "VLLM_LOGGING_LEVEL",
                                                  "PYTHONUNBUFFERED"})


def test_serve_defaults_come_from_the_catalog_and_depend_on_the_gpu():
    from agents.vllm_args import serve_default

    gib = 2**30
    assert serve_default("gpu_memory_utilization") == 0.9
    assert (serve_default("max_num_batched_tokens", 80 * gib, "NVIDIA H100 80GB HBM3"),
            serve_default("max_num_seqs", 141 * gib, "NVIDIA H200")) == (8192, 1024)
    # A100s, smaller GPUs and a GPU vLLM cannot query get the smaller budget.
    for mem, name in ((80 * gib, "NVIDIA A100-SXM4-80GB"), (24 * gib, "NVIDIA L4"), (None, "")):
        assert (serve_default("max_num_batched_tokens", mem, name),
                serve_default("max_num_seqs", mem, name)) == (2048, 256)
    assert serve_default("max_model_len") is None  # from the model
