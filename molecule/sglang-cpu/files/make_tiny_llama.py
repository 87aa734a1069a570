#!/usr/bin/env python3
"""Write a tiny random Llama (2 layers, hidden 128) and a byte-level BPE tokenizer to OUTDIR.

TEST-ONLY (molecule scenario sglang-cpu): no model hub is reachable, and real SGLang on CPU only
needs a well-formed Hugging Face checkpoint. Run with the server venv's Python (torch,
transformers, tokenizers). Idempotent: does nothing if OUTDIR/config.json exists.
Usage: make_tiny_llama.py OUTDIR
"""

from __future__ import annotations

import pathlib
import sys

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "EAGLE-3 speculative decoding with SGLang on a CPU test host.",
    "Hello world! What is the capital of France? Paris.",
    "0 1 2 3 4 5 6 7 8 9 , . ; : ! ? ' \" ( ) [ ] { } - + * / = < >",
]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = pathlib.Path(argv[1])
    if (out / "config.json").exists():
        print(f"{out}: exists")
        return 0
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", model_max_length=2048
    )
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    for path in out.iterdir():  # readable by the service user
        path.chmod(0o644)
    print(f"{out}: tiny Llama, vocab {len(fast)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
