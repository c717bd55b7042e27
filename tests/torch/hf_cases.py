"""Tiny Hugging Face models with random weights, built from configs (nothing is downloaded).

Sizes are chosen so that activations, not parameters, dominate a training
step's memory (sequence 32, hidden 32), yet one step runs in milliseconds.
"""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

B, L, V, H = 4, 32, 64, 32


def _ids(batch, seq, low=0):
    return torch.randint(low, V, (batch, seq))


def gpt2(batch=B):
    # MLP width 2x (not GPT-2's 4x): one GELU backward node alone then needs well under half the activations
    cfg = transformers.GPT2Config(n_layer=2, n_embd=H, n_head=2, n_inner=2 * H, vocab_size=V, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    ids = _ids(batch, L)
    return transformers.GPT2LMHeadModel(cfg), {"input_ids": ids, "labels": ids}


def bert(batch=B):
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=H, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=V, max_position_embeddings=64)
    ids = _ids(batch, L)
    mask = torch.ones(batch, L, dtype=torch.long)
    return transformers.BertForMaskedLM(cfg), {"input_ids": ids, "attention_mask": mask, "labels": ids}


def llama(batch=B):
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=H, num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=64, vocab_size=V, max_position_embeddings=64,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    ids = _ids(batch, L)
    return transformers.LlamaForCausalLM(cfg), {"input_ids": ids, "labels": ids}


def qwen2(batch=B):
    cfg = transformers.Qwen2Config(num_hidden_layers=2, hidden_size=H, num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=64, vocab_size=V, max_position_embeddings=64,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    ids = _ids(batch, L)
    return transformers.Qwen2ForCausalLM(cfg), {"input_ids": ids, "labels": ids}


def vit(batch=B):
    cfg = transformers.ViTConfig(image_size=32, patch_size=4, num_channels=3, num_hidden_layers=2, hidden_size=H,
                                 num_attention_heads=2, intermediate_size=64, num_labels=5)
    return (transformers.ViTForImageClassification(cfg),
            {"pixel_values": torch.randn(batch, 3, 32, 32), "labels": torch.randint(0, 5, (batch,))})


def t5(batch=B):
    cfg = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=H, d_kv=16, num_heads=2, d_ff=64,
                                vocab_size=V, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return (transformers.T5ForConditionalGeneration(cfg),
            {"input_ids": _ids(batch, L, low=2), "labels": _ids(batch, L // 2, low=2)})


def resnet(batch=B):
    """A model with BatchNorm (running statistics are buffers updated by the forward)."""
    cfg = transformers.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                    layer_type="basic", num_labels=3)
    return (transformers.ResNetForImageClassification(cfg),
            {"pixel_values": torch.randn(batch, 3, 32, 32), "labels": torch.randint(0, 3, (batch,))})


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "vit": vit, "t5": t5}


def resident_bytes(model, batch) -> int:
    """Bytes resident before a step: the model's parameters and buffers and the batch's tensors (distinct
    storages), which an allocator meter started at the step does not see."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()) + [v for v in batch.values() if torch.is_tensor(v)]:
        p = t.untyped_storage().data_ptr()
        if p not in seen:
            seen.add(p)
            total += t.untyped_storage().nbytes()
    return total


def loss_step(module, batch, seed=1):
    """A step that keeps only the loss (``loss = model(**batch).loss``), as HF's Trainer does; returns it."""
    module.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = module(**batch).loss
    loss.backward()
    return loss.detach()


def make(name, batch=B, seed=0):
    torch.manual_seed(seed)
    model, batch_kw = (MODELS.get(name) or {"resnet": resnet, "qwen2": qwen2}[name])(batch)
    model.train()
    return model, batch_kw
