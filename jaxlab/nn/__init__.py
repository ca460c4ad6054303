"""Building blocks: norms, MLPs, attention with masks and KV cache, RoPE."""

from jaxlab.nn import attention
from jaxlab.nn import mlp
from jaxlab.nn import norm
from jaxlab.nn import rope
from jaxlab.nn.attention import Attention
from jaxlab.nn.attention import KVCache
from jaxlab.nn.attention import make_attention_mask
from jaxlab.nn.mlp import SwiGLU
from jaxlab.nn.norm import RMSNorm
