"""A Llama in plain torch, for bench/torch_native.py's torch side: Hugging
Face's LlamaForCausalLM computed as its eager path does (RMSNorm in FP32,
rotary embeddings by rotate_half, repeat_kv for the grouped key/value heads,
causal softmax attention, a SwiGLU MLP, an untied head), nn.Linear's without
biases, initialised N(0, 0.02) as Hugging Face's; torch 1.13 has no fused
attention, so this is what a user of it runs."""

import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, width, heads, kv_heads, mlp, eps):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, width // heads
        self.input_layernorm = RMSNorm(width, eps)
        self.q_proj = nn.Linear(width, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(width, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(width, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, width, bias=False)
        self.post_attention_layernorm = RMSNorm(width, eps)
        self.gate_proj = nn.Linear(width, mlp, bias=False)
        self.up_proj = nn.Linear(width, mlp, bias=False)
        self.down_proj = nn.Linear(mlp, width, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(2, 3)) / math.sqrt(self.hd)
        att = torch.softmax(att.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
        y = (att @ v).transpose(1, 2).reshape(b, t, self.heads * self.hd)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, vocab, width, layers, heads, kv_heads, mlp, theta=10000.0,
                 eps=1e-5):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(
            Block(width, heads, kv_heads, mlp, eps) for _ in range(layers))
        self.norm = RMSNorm(width, eps)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.hd, self.theta = width // heads, theta
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        t = idx.shape[1]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2).float() / self.hd))
        freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        x = self.embed_tokens(idx)
        for block in self.layers:
            x = block(x, cos, sin, mask)
        return self.lm_head(self.norm(x))
