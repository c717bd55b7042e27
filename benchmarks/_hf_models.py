"""Hugging Face ``transformers`` models for the PyTorch benchmarks, built from configs with random weights.

Nothing is downloaded (``HF_HUB_OFFLINE=1`` is set before ``transformers`` is
imported). Every model is wrapped so that it takes its inputs positionally and
returns its own training loss (``labels`` passed to the model), the way a
Hugging Face training loop calls it; the wrapped model is ``wrapper.hf``, so
``wrapper.hf.gradient_checkpointing_enable()`` turns on Hugging Face's own
per-layer checkpointing.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

__all__ = ["MODELS", "LossWrapper", "make_model"]

MODELS = ("gpt2", "bert", "llama", "qwen2", "vit", "t5")


class LossWrapper(torch.nn.Module):
    """``forward(x, labels) -> loss`` of a Hugging Face model called with keywords."""

    def __init__(self, hf, input_name: str):
        super().__init__()
        self.hf = hf
        self.input_name = input_name

    def forward(self, x, labels):
        return self.hf(**{self.input_name: x, "labels": labels}).loss


def make_model(name: str, layers: int = 2, hidden: int = 128, seq: int = 128, batch: int = 8,
               vocab: int = 1024, heads: int | None = None, seed: int = 0, dropout: bool = True):
    """``(wrapper, inputs)``: model ``name`` with ``layers`` layers of width ``hidden`` on ``batch`` x ``seq``
    inputs (ViT: ``seq`` patches of 8x8 pixels; T5: ``seq`` encoder and ``seq // 2`` decoder tokens), in
    training mode, eager attention, dropout as configured by the model's defaults (GPT-2, BERT, ViT, T5: 0.1;
    Llama, Qwen2: none) or off with ``dropout=False``.

    The loss type is set on the model (``model.loss_type``): transformers 5 ignores ``config.loss_type``, and
    without it GPT-2 logs a warning inside a compiled graph, which breaks the graph."""
    import transformers as tr

    heads = heads or max(1, hidden // 64)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    common = dict(attn_implementation="eager")
    if name == "gpt2":
        cfg = tr.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=seq,
                            use_cache=False, bos_token_id=0, eos_token_id=0, **common)
        hf, key = tr.GPT2LMHeadModel(cfg), "input_ids"
        x = torch.randint(0, vocab, (batch, seq), generator=g)
        labels = x.clone()
    elif name == "bert":
        cfg = tr.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=4 * hidden, max_position_embeddings=seq, **common)
        hf, key = tr.BertForMaskedLM(cfg), "input_ids"
        x = torch.randint(0, vocab, (batch, seq), generator=g)
        labels = x.clone()
    elif name == "llama":
        cfg = tr.LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                             num_key_value_heads=heads, intermediate_size=int(8 * hidden / 3) // 16 * 16,
                             max_position_embeddings=seq, use_cache=False, **common)
        hf, key = tr.LlamaForCausalLM(cfg), "input_ids"
        x = torch.randint(0, vocab, (batch, seq), generator=g)
        labels = x.clone()
    elif name == "qwen2":
        cfg = tr.Qwen2Config(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                             num_key_value_heads=heads, intermediate_size=int(8 * hidden / 3) // 16 * 16,
                             max_position_embeddings=seq, use_cache=False, **common)
        hf, key = tr.Qwen2ForCausalLM(cfg), "input_ids"
        x = torch.randint(0, vocab, (batch, seq), generator=g)
        labels = x.clone()
    elif name == "t5":
        cfg = tr.T5Config(vocab_size=vocab, d_model=hidden, d_kv=hidden // heads, num_heads=heads, d_ff=4 * hidden,
                          num_layers=layers, num_decoder_layers=layers, decoder_start_token_id=0, pad_token_id=0,
                          eos_token_id=1, use_cache=False, **common)
        hf, key = tr.T5ForConditionalGeneration(cfg), "input_ids"
        x = torch.randint(2, vocab, (batch, seq), generator=g)
        labels = torch.randint(2, vocab, (batch, max(1, seq // 2)), generator=g)
    elif name == "vit":
        side = int(round(seq ** 0.5)) * 8
        cfg = tr.ViTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                           intermediate_size=4 * hidden, image_size=side, patch_size=8, num_labels=10,
                           hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **common)
        hf, key = tr.ViTForImageClassification(cfg), "pixel_values"
        x = torch.randn(batch, 3, side, side, generator=g)
        labels = torch.randint(0, 10, (batch,), generator=g)
    else:
        raise KeyError(f"unknown model {name!r}; one of {MODELS}")
    if name in ("gpt2", "llama", "qwen2"):
        hf.loss_type = "ForCausalLM"
    if not dropout:
        for m in hf.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    model = LossWrapper(hf, key)
    model.train()
    return model, (x, labels)
