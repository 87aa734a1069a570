#!/usr/bin/env python3
"""Write a tiny random Llama checkpoint (2 layers, hidden 128) with a byte-level tokenizer.

TEST-ONLY (molecule scenario sglang-cpu): no model hub is reachable, and real SGLang on CPU only
needs a well-formed Hugging Face checkpoint. Standard library only (no torch): the weights are
written straight into the safetensors format, the tokenizer as a `tokenizers` JSON (byte-level
BPE without merges: one token per byte). Deterministic (fixed seed). Idempotent: nothing is
written when OUTDIR/config.json exists.

Usage: make_tiny_llama.py OUTDIR [--architecture NAME]
  --architecture  the `architectures` entry of config.json (default LlamaForCausalLM); an unknown
                  name makes a checkpoint SGLang refuses to load (a fault case).
"""

from __future__ import annotations

import argparse
import array
import json
import pathlib
import random
import struct
import sys

HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
SPECIALS = ["<s>", "</s>", "<pad>"]


def byte_level_alphabet() -> list[str]:
    """GPT-2's bytes_to_unicode(): the printable character standing for each byte 0..255."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_json() -> dict:
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in byte_level_alphabet():
        vocab[ch] = len(vocab)
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, tok in enumerate(SPECIALS)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": vocab, "merges": [],
        },
    }


def tensor_shapes(vocab_size: int) -> dict[str, list[int]]:
    shapes = {"model.embed_tokens.weight": [vocab_size, HIDDEN]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = [HEADS * HEAD_DIM, HIDDEN]
        shapes[p + "self_attn.k_proj.weight"] = [KV_HEADS * HEAD_DIM, HIDDEN]
        shapes[p + "self_attn.v_proj.weight"] = [KV_HEADS * HEAD_DIM, HIDDEN]
        shapes[p + "self_attn.o_proj.weight"] = [HIDDEN, HEADS * HEAD_DIM]
        shapes[p + "mlp.gate_proj.weight"] = [INTERMEDIATE, HIDDEN]
        shapes[p + "mlp.up_proj.weight"] = [INTERMEDIATE, HIDDEN]
        shapes[p + "mlp.down_proj.weight"] = [HIDDEN, INTERMEDIATE]
        shapes[p + "input_layernorm.weight"] = [HIDDEN]
        shapes[p + "post_attention_layernorm.weight"] = [HIDDEN]
    shapes["model.norm.weight"] = [HIDDEN]
    shapes["lm_head.weight"] = [vocab_size, HIDDEN]
    return shapes


def write_safetensors(path: pathlib.Path, shapes: dict[str, list[int]], seed: int = 0) -> None:
    rng = random.Random(seed)
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, shape in shapes.items():
        count = 1
        for dim in shape:
            count *= dim
        if name.endswith("norm.weight"):
            values = array.array("f", [1.0] * count)
        else:
            values = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(count)))
        if sys.byteorder != "little":
            values.byteswap()
        data = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for data in blobs:
            fh.write(data)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=pathlib.Path)
    parser.add_argument("--architecture", default="LlamaForCausalLM")
    args = parser.parse_args(argv)
    out: pathlib.Path = args.outdir
    if (out / "config.json").exists():
        print(f"{out}: exists")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer_json()
    vocab_size = len(tokenizer["model"]["vocab"])
    config = {
        "architectures": [args.architecture],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": 2048,
        "mlp_bias": False,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    files = {
        "config.json": config,
        "generation_config.json": {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2},
        "tokenizer.json": tokenizer,
        "tokenizer_config.json": {
            "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "model_max_length": 2048,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
        "special_tokens_map.json": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"},
    }
    write_safetensors(out / "model.safetensors", tensor_shapes(vocab_size))
    # config.json last: its presence means the checkpoint is complete.
    for name, content in sorted(files.items(), key=lambda kv: kv[0] == "config.json"):
        (out / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for path in out.iterdir():
        path.chmod(0o644)  # readable by the service user
    print(f"{out}: tiny Llama ({args.architecture}), vocab {vocab_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
