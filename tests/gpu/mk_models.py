"""Build a tiny random-weight Llama target and a random EAGLE-3 draft for the real-GPU run (TEST-ONLY).

    python3 tests/gpu/mk_models.py /tmp/m

writes /tmp/m/target (LlamaForCausalLM, hidden 256, 8 layers: EAGLE-3 captures layers 2, L/2, L-3) and
/tmp/m/draft (one-layer LlamaForCausalLMEagle3 with d2t/t2d maps), bf16 safetensors, in seconds with torch
and safetensors; no weights travel. It also trains a byte-level BPE tokenizer (vocab 1024, <unk> <s> </s> =
0 1 2 as the configs say) into both folders and checks that transformers loads it, so the server can take
text (the playbook's smoke prompt and burst) instead of token ids. It prints one JSON line; "tokenizer_ok"
false means: launch with --skip-tokenizer-init and send input_ids. Random weights: EAGLE-3 accepts about one
token per step, so the run proves the path, not the speed. Based on the hand run of 2026-12-02
(../shared/h200-sglang-0.5.17/mk.py).
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

H, L, NH, KV, INTER, V = 256, 8, 4, 2, 512, 1024
HD = H // NH
DT = torch.bfloat16


def rnd(*shape):
    return (torch.randn(*shape) * 0.02).to(DT)


def ones(n):
    return torch.ones(n, dtype=DT)


BASE = dict(hidden_size=H, num_attention_heads=NH, num_key_value_heads=KV, head_dim=HD, intermediate_size=INTER,
            vocab_size=V, max_position_embeddings=2048, rms_norm_eps=1e-5, hidden_act="silu", model_type="llama",
            tie_word_embeddings=False, torch_dtype="bfloat16", rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
            attention_bias=False, mlp_bias=False)


def target(path):
    t = {"model.embed_tokens.weight": rnd(V, H), "model.norm.weight": ones(H), "lm_head.weight": rnd(V, H)}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "self_attn.q_proj.weight"] = rnd(NH * HD, H)
        t[p + "self_attn.k_proj.weight"] = rnd(KV * HD, H)
        t[p + "self_attn.v_proj.weight"] = rnd(KV * HD, H)
        t[p + "self_attn.o_proj.weight"] = rnd(H, NH * HD)
        t[p + "mlp.gate_proj.weight"] = rnd(INTER, H)
        t[p + "mlp.up_proj.weight"] = rnd(INTER, H)
        t[p + "mlp.down_proj.weight"] = rnd(H, INTER)
        t[p + "input_layernorm.weight"] = ones(H)
        t[p + "post_attention_layernorm.weight"] = ones(H)
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(BASE, architectures=["LlamaForCausalLM"], num_hidden_layers=L), f, indent=1)


def draft(path):
    d = {"midlayer.self_attn.q_proj.weight": rnd(NH * HD, 2 * H), "midlayer.self_attn.k_proj.weight": rnd(KV * HD, 2 * H),
         "midlayer.self_attn.v_proj.weight": rnd(KV * HD, 2 * H), "midlayer.self_attn.o_proj.weight": rnd(H, NH * HD),
         "midlayer.mlp.gate_proj.weight": rnd(INTER, H), "midlayer.mlp.up_proj.weight": rnd(INTER, H),
         "midlayer.mlp.down_proj.weight": rnd(H, INTER), "midlayer.input_layernorm.weight": ones(H),
         "midlayer.hidden_norm.weight": ones(H), "midlayer.post_attention_layernorm.weight": ones(H),
         "fc.weight": rnd(H, 3 * H), "norm.weight": ones(H), "lm_head.weight": rnd(V, H),
         "d2t": torch.zeros(V, dtype=torch.int64), "t2d": torch.ones(V, dtype=torch.bool)}
    save_file(d, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(BASE, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, draft_vocab_size=V,
                       target_hidden_size=H), f, indent=1)


def tokenizer(paths):
    """Byte-level BPE with V tokens; returns None when it works with transformers, else the error."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=V, special_tokens=["<unk>", "<s>", "</s>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        corpus = ["Tell me about speculative decoding, part %d. " % i * 3 for i in range(200)]
        corpus += ["The quick brown fox jumps over the lazy dog %d times." % i for i in range(200)]
        tok.train_from_iterator(corpus, trainer)
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
               "unk_token": "<unk>", "model_max_length": 2048, "add_bos_token": False}
        for p in paths:
            tok.save(os.path.join(p, "tokenizer.json"))
            with open(os.path.join(p, "tokenizer_config.json"), "w") as f:
                json.dump(cfg, f, indent=1)
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(paths[0])
        ids = t.encode("Tell me about speculative decoding")
        assert ids and max(ids) < V and t.eos_token_id == 2, (ids, t.eos_token_id)
        t.decode(ids)
        return None
    except Exception as exc:  # the run then uses token ids
        for p in paths:
            for name in ("tokenizer.json", "tokenizer_config.json"):
                if os.path.exists(os.path.join(p, name)):
                    os.unlink(os.path.join(p, name))
        return "%s: %s" % (type(exc).__name__, exc)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/m"
    torch.manual_seed(0)
    paths = [os.path.join(root, "target"), os.path.join(root, "draft")]
    for p in paths:
        os.makedirs(p, exist_ok=True)
    target(paths[0])
    draft(paths[1])
    err = tokenizer(paths)
    print(json.dumps({"target": paths[0], "draft": paths[1], "tokenizer_ok": err is None, "tokenizer_error": err}))


if __name__ == "__main__":
    main()
