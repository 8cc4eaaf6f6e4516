"""A small BERT-style encoder written out op by op, for the built-in ``tiny_bert`` model.

    model = TinyBert()                      # hidden 64, 2 layers, 4 heads, 10 classes
    logits = model(torch.randn(1, 32, 64))  # (batch, sequence, hidden) float embeddings

The input is the token embeddings a tokenizer and embedding table would give (float, one row of
``hidden`` values per position); the encoder adds a learned position embedding, normalizes it and
runs ``layers`` post-norm encoder layers (self-attention with separate query/key/value linears,
residual add, LayerNorm, a GELU feed-forward, residual add, LayerNorm), then classifies the first
position (BERT's [CLS] pooling: a linear and tanh) with a linear head.

Every op is a plain PyTorch op (``nn.Linear``, ``torch.matmul``, ``softmax``, ``nn.LayerNorm``,
``nn.GELU``, reshape/permute), so the ONNX exporter writes MatMul/Gemm/Softmax/LayerNorm
subgraphs that ONNX Runtime's ``quantize_static`` quantizes as it does a user's BERT, and
torch.export writes aten ops torchao's PT2E quantizers annotate. It is not meant for PyTorch's
eager-mode quantization (attention multiplies two activations):
:mod:`relay_ext.frontend.models` loads it through its quantized ONNX export.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention, heads split with reshape/permute."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of the head count {heads}")
        self.heads, self.head_size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        return x.reshape(batch, sequence, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, hidden = x.shape
        query, key, value = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(self.head_size)
        context = torch.matmul(torch.softmax(scores, dim=-1), value)
        context = context.permute(0, 2, 1, 3).reshape(batch, sequence, hidden)
        return self.output(context)


class EncoderLayer(nn.Module):
    """Post-norm encoder layer: attention, add, LayerNorm, GELU feed-forward, add, LayerNorm."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.gelu = nn.GELU()
        self.feed_forward_output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.feed_forward_output(self.gelu(self.intermediate(x))))


class TinyBert(nn.Module):
    """Position embedding, LayerNorm, ``layers`` encoder layers, [CLS] pooler and a linear head
    on (batch, ``sequence``, ``hidden``) float embeddings."""

    def __init__(self, hidden: int = 64, layers: int = 2, heads: int = 4, sequence: int = 32,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.randn(1, sequence, hidden) * 0.1)
        self.embedding_norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, 4 * hidden) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embedding_norm(x + self.position)
        for layer in self.layers:
            x = layer(x)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)
