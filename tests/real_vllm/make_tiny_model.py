"""Make the tiny Llama that the real-vLLM tests and `PITWALL_REAL_VLLM=1 make run` serve.

No model hub is reachable from these machines, so the model is made here, deterministically:
a 2-layer Llama (hidden 128, 4 heads of 32: the CPU attention backend needs a head size of at
least 32) with random weights from a fixed seed, and a byte-level BPE tokenizer trained on a
small generated corpus, with a chat template so /v1/chat/completions works too. About 2 MB.
Its output is gibberish; what matters is that loading, scheduling, the KV cache, preemptions
and latencies are vLLM's own.

Runs with the real-vLLM environment's Python (it needs torch, transformers and tokenizers):

    python tests/real_vllm/make_tiny_model.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

# Bump when the model changes, so caches keyed on it are made anew.
MODEL_FORMAT = 1
SEED = 20261204
VOCAB_SIZE = 2048
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SYLLABLES = ["ka", "ve", "lo", "mi", "ru", "ten", "sor", "pa", "gi", "nu", "qe", "dax",
             "fol", "hy", "jo", "wen", "zi", "bra", "cle", "str"]


def corpus(lines: int = 4000) -> list[str]:
    """Pseudo-words from a seeded generator: the same text, so the same merges, every time."""
    rng = random.Random(SEED)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))
             for _ in range(3000)]
    words += ["the", "GPU", "cache", "token", "request", "vLLM", "Pitwall", "hello", "world"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(4, 24))) + rng.choice(".?!")
            for _ in range(lines)]


def make_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def make_weights(out: Path, vocab: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
        bos_token_id=1, eos_token_id=2, pad_token_id=3, tie_word_embeddings=True,
        torch_dtype="float32")
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    make_tokenizer(out)
    vocab = len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"])
    make_weights(out, vocab)
    (out / "pitwall-tiny-model.json").write_text(json.dumps(
        {"format": MODEL_FORMAT, "seed": SEED, "vocab_size": vocab}) + "\n")
    print(f"tiny model written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
