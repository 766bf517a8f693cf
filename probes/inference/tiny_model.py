"""The CPU path's model: a Llama-architecture decoder with random weights and a byte-level BPE tokenizer trained
on a few generated sentences, written in Hugging Face's format (config.json, model.safetensors, tokenizer.json),
which vLLM loads like any model directory. Nothing is downloaded. Its answers are noise; its shapes are real
(grouped-query attention, SwiGLU, RoPE), so the engine runs its whole path: tokenizer, scheduler, KV cache,
sampler, streaming.

Runs in the engine's Python (transformers, tokenizers and torch come with vLLM): `python tiny_model.py DIR`.
"""

import json
import os
import sys

WORDS = ("the cluster gpu node token serve request latency prefill decode batch cache expert rank world fabric "
         "storage check a of and to in for").split()
SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 4096}


def make(out):
    import torch  # noqa: PLC0415 - the engine's Python
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: PLC0415

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(48)) for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant:{% endif %}")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                      **SHAPE)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
    with open(os.path.join(out, "clustermax_model.json"), "w") as fh:
        json.dump({"name": "tiny-random", "what": "random weights, for the CPU path", "shape": SHAPE,
                   "vocab": len(fast)}, fh)


if __name__ == "__main__":
    make(sys.argv[1])
