"""Tiny LLaDA / Dream checkpoints for the DPad real-run tests.

LLaDA: a tiny random Llama checkpoint (with the tiny ChatML tokenizer
beside it, `hf_fixtures.make_chat_checkpoint`) rewritten under LLaDA's
tensor names and config.json fields (`modeling_llada.py`, as
tests/io/hf_diffusion_test.py does; mask and EOS ids in config.json as
LLaDA-8B-Instruct has them). Dream: a tiny Qwen2 checkpoint relabelled
`DreamModel` (Dream's config.json: `mask_token_id`, `eos_token_id`).

Under pytest (`$JAXLAB_TEST_SCRATCH` set) each checkpoint is built once
per session into the scratch directory (`session_cache.build_once`) and copied
to `path` (both DPad test modules use the same two, and the xdist worker
that needs them second copies instead of building them with torch); the
files are those a fresh build writes (seeded weights).
"""

import json
import os
import shutil

import safetensors.numpy

from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import session_cache

VOCAB = 416   # >= the tiny tokenizer's 400 ids
MASK = 410    # outside the tokenizer, as a reserved id

# LLaDA tensor names (modeling_llada.py, LLaDALlamaBlock) per HF Llama name.
LLADA_NAMES = {
    "model.embed_tokens.weight": "model.transformer.wte.weight",
    "model.norm.weight": "model.transformer.ln_f.weight",
    "lm_head.weight": "model.transformer.ff_out.weight",
}
LLADA_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ff_norm.weight",
    "self_attn.q_proj.weight": "q_proj.weight",
    "self_attn.k_proj.weight": "k_proj.weight",
    "self_attn.v_proj.weight": "v_proj.weight",
    "self_attn.o_proj.weight": "attn_out.weight",
    "mlp.gate_proj.weight": "ff_proj.weight",
    "mlp.up_proj.weight": "up_proj.weight",
    "mlp.down_proj.weight": "ff_out.weight",
}


def llada_name(name):
  if name in LLADA_NAMES:
    return LLADA_NAMES[name]
  _, _, i, rest = name.split(".", 3)
  return f"model.transformer.blocks.{i}.{LLADA_LAYER[rest]}"


def _once_per_session(kind, path, eos_id, build):
  """`build(path)`, or a copy of the session's one build (module doc)."""
  out = session_cache.build_once(f"diffusion/{kind}-{eos_id}", build)
  if out is None:
    return build(path)
  shutil.copytree(out, path, dirs_exist_ok=True)
  return os.fspath(path)


def make_llada(path, eos_id):
  """A tiny LLaDA checkpoint directory (tokenizer beside it)."""
  return _once_per_session("llada", path, eos_id,
                           lambda p: _build_llada(p, eos_id))


def make_dream(path, eos_id):
  """A tiny Dream checkpoint directory (tokenizer beside it)."""
  return _once_per_session("dream", path, eos_id,
                           lambda p: _build_dream(p, eos_id))


def _build_llada(path, eos_id):
  hfx.make_chat_checkpoint(path, "llama", vocab_size=VOCAB,
                           max_position_embeddings=512)
  st = os.path.join(path, "model.safetensors")
  tensors = safetensors.numpy.load_file(st)
  safetensors.numpy.save_file({llada_name(k): v for k, v in tensors.items()},
                              st)
  with open(os.path.join(path, "config.json")) as f:
    llama = json.load(f)
  rope = llama.get("rope_parameters", {}).get("rope_theta",
                                              llama.get("rope_theta"))
  cfg = {"architectures": ["LLaDAModelLM"], "model_type": "llada",
         "d_model": llama["hidden_size"], "n_heads": llama[
             "num_attention_heads"],
         "n_kv_heads": llama["num_key_value_heads"],
         "n_layers": llama["num_hidden_layers"],
         "mlp_hidden_size": llama["intermediate_size"],
         "vocab_size": VOCAB, "embedding_size": VOCAB, "rope_theta": rope,
         "rms_norm_eps": llama["rms_norm_eps"], "max_sequence_length": 512,
         "weight_tying": False, "block_type": "llama",
         "layer_norm_type": "rms", "include_bias": False,
         "activation_type": "silu", "mask_token_id": MASK,
         "eos_token_id": eos_id}
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(cfg, f)
  return path


def _build_dream(path, eos_id):
  hfx.make_chat_checkpoint(path, "qwen2", vocab_size=VOCAB,
                           max_position_embeddings=512)
  with open(os.path.join(path, "config.json")) as f:
    cfg = json.load(f)
  cfg.update(architectures=["DreamModel"], model_type="Dream",
             mask_token_id=MASK, eos_token_id=eos_id)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(cfg, f)
  return path
