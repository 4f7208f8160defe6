"""The benchmark models: `transformers` models random-initialized from their configs, fp32, or
bf16/f16 when the id says so ("bert-base:bf16": the same weights cast, image inputs too).

Nothing is downloaded: each model is built from a config with a fixed seed, so every worker
process builds the same weights. Each comes in two sizes: "full" (the real architecture, the one
the results are about) and "small" (a few narrow layers of the same architecture, for quick runs
and tests). Poolers whose output the benchmark ignores are left out so that no peer is charged for
work another peer's dead-code elimination would skip (ResNetModel has no such switch; its global
average pool costs next to nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

SIZES = ("full", "small")


class LastHiddenState(torch.nn.Module):
    """Returns the model output's last_hidden_state: one tensor that every backend (and the ONNX
    export) hands back and that is compared against eager."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs).last_hidden_state


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[[str], torch.nn.Module]  # size → the Hugging Face model
    takes_tokens: bool       # token ids (batch, length), else images (batch, 3, side, side)
    extent: dict[str, int]   # size → sequence length or image side


def _bert(size: str) -> torch.nn.Module:
    from transformers import BertConfig, BertModel
    config = BertConfig() if size == "full" else BertConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64)
    return BertModel(config, add_pooling_layer=False)


def _gpt2(size: str) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model
    # One forward pass: no key/value cache is built or returned.
    config = GPT2Config(use_cache=False) if size == "full" else GPT2Config(
        use_cache=False, n_embd=64, n_layer=2, n_head=2, n_positions=64)
    return GPT2Model(config)


def _vit(size: str) -> torch.nn.Module:
    from transformers import ViTConfig, ViTModel
    config = ViTConfig() if size == "full" else ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128)
    return ViTModel(config, add_pooling_layer=False)


def _resnet(size: str) -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel
    # ResNet-50 spelled out rather than trusting the config's defaults to stay ResNet-50.
    config = ResNetConfig(depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048],
                          layer_type="bottleneck", embedding_size=64) if size == "full" else \
        ResNetConfig(depths=[1, 1], hidden_sizes=[32, 64], layer_type="bottleneck",
                     embedding_size=16)
    return ResNetModel(config)


def _mobilenetv2(size: str) -> torch.nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2Model
    config = MobileNetV2Config() if size == "full" else MobileNetV2Config(
        image_size=64, depth_multiplier=0.35)
    return MobileNetV2Model(config, add_pooling_layer=False)


MODELS: dict[str, ModelSpec] = {
    "bert-base": ModelSpec(_bert, True, {"full": 128, "small": 16}),
    "gpt2": ModelSpec(_gpt2, True, {"full": 128, "small": 16}),
    "vit-b16": ModelSpec(_vit, False, {"full": 224, "small": 32}),
    "resnet50": ModelSpec(_resnet, False, {"full": 224, "small": 64}),
    "mobilenetv2": ModelSpec(_mobilenetv2, False, {"full": 224, "small": 64}),
}


DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def is_model_id(text: str) -> bool:
    """A model of MODELS, alone or with ":" and a dtype of DTYPES."""
    name, colon, dtype = text.partition(":")
    return name in MODELS and (not colon or dtype in DTYPES)


def build(model_id: str, size: str, batch: int, seed: int = 0):
    """The model (eval mode, returning last_hidden_state) and its input, the same in every
    process for the same arguments."""
    name, _, dtype = model_id.partition(":")
    spec = MODELS[name]
    torch.manual_seed(seed)
    hf_model = spec.build(size)
    extent = spec.extent[size]
    inputs = (torch.randint(0, hf_model.config.vocab_size, (batch, extent)) if spec.takes_tokens
              else torch.randn(batch, 3, extent, extent))
    model = LastHiddenState(hf_model).eval()
    if dtype:
        model = model.to(DTYPES[dtype])
        inputs = inputs if spec.takes_tokens else inputs.to(DTYPES[dtype])
    return model, inputs
