"""The decoder families' tensor table: Llama / Qwen2 / Qwen3 / Mistral /
Gemma 3 text / Dream / LLaDA checkpoints <-> `jaxlab.models.decoder`.

    model, cfg = jaxlab.io.hf.load("/ckpt/dir", dtype="bfloat16")
    logits_btv = model(input_ids_bt)                    # [B, T, V] float32
    jaxlab.io.hf.save(model, cfg, "/out/dir")           # transformers-4 dialect

`tensor_table(cfg)` is the family's name table for `jaxlab.io.hf.fill`
(the config mapping is `jaxlab.io.hf.config`). The model is never
materialised with a random init first: it is built abstractly and filled
with the loaded arrays. Layout mapping (HF `nn.Linear.weight` is
`[out, in]`):

  model.embed_tokens.weight            [V, D]    -> embed_vd [V, D]
  layers.i.self_attn.q_proj.weight     [N*H, D]  -> q_dnh [D, N, H]
  layers.i.self_attn.k/v_proj.weight   [K*H, D]  -> k_dkh / v_dkh [D, K, H]
  layers.i.self_attn.q/k/v_proj.bias   [N*H]     -> q_bias_nh [N, H] ...
  layers.i.self_attn.o_proj.weight     [D, N*H]  -> o_nhd [N, H, D]
  layers.i.mlp.gate/up_proj.weight     [F, D]    -> gate_df / up_df [D, F]
  layers.i.mlp.down_proj.weight        [D, F]    -> down_fd [F, D]
  layers.i.input_layernorm.weight      [D]       -> attn_norm.scale
  layers.i.post_attention_layernorm    [D]       -> mlp_norm.scale
  model.norm.weight                    [D]       -> final_norm.scale
  lm_head.weight                       [V, D]    -> lm_head_dv [D, V]
  layers.i.self_attn.q_norm/k_norm     [H]       -> q_norm/k_norm.scale (Qwen3)

Gemma 3's norms map as

  layers.i.input_layernorm             [D]       -> attn_norm.scale
  layers.i.post_attention_layernorm    [D]       -> post_attn_norm.scale
  layers.i.pre_feedforward_layernorm   [D]       -> mlp_norm.scale
  layers.i.post_feedforward_layernorm  [D]       -> post_mlp_norm.scale

with the (1 + w) weights stored as is; LLaDA's OLMo-style names are the
Llama names rewritten by `LLADA_TENSORS`.

Phi (`PhiForCausalLM`; `config_lib.phi_like(cfg)`) has its own names,
every LayerNorm and projection with a bias (`.weight` -> scale / kernel as
above, `.bias` -> the matching bias):

  model.final_layernorm.weight/bias    [D]       -> final_norm.scale/bias
  lm_head.weight / lm_head.bias        [V, D]/[V] -> lm_head_dv / lm_head_bias_v
  layers.i.input_layernorm.*           [D]       -> attn_norm.scale/bias
  layers.i.self_attn.q/k/v_proj.*                -> q_dnh, q_bias_nh, ...
  layers.i.self_attn.dense.weight/bias [D, N*H]  -> o_nhd / o_bias_d [D]
  layers.i.mlp.fc1.weight/bias         [F, D]    -> mlp.up_df / up_bias_f
  layers.i.mlp.fc2.weight/bias         [D, F]    -> mlp.down_fd / down_bias_d
  layers.i.self_attn.q/k_layernorm.*   [H]       -> q_norm/k_norm (qk_layernorm)

Gemma 3's multimodal checkpoints (`Gemma3ForConditionalGeneration`, model
type gemma3: every Gemma 3 from 4B up) load their language model:
`text_config` as a `Gemma3ForCausalLM` config, and the text tensors under
transformers 5's `model.language_model.` (or the Hub's older
`language_model.model.`) prefix. The SigLIP vision tower and projector are
not read (a warning says so), so the model is the text LM, whose logits
equal the checkpoint's on text-only inputs; `save` writes it as a
`Gemma3ForCausalLM`.

Scanned models (`scan_layers=True`, e.g. `load(path, scan_layers=True)`):
the per-layer HF tensors of the layers j, j + P, ... are converted and
stacked on the host into the `[L / P, ...]` params of `scan_blocks[j]`
(placed once with the stacked sharding; `layer_paths`), and `save` splits
them back, so a scanned model reads and writes the same HF tensors as the
unrolled one.
"""

from collections.abc import Callable, Mapping
import os
from typing import Any
import warnings

import jax
from flax import nnx

from jaxlab.io.hf import config as config_lib
from jaxlab.io.hf import files
from jaxlab.io.hf import fill
from jaxlab.models import decoder as decoder_lib

# Llama tensor-name piece -> LLaDA's (model.transformer.blocks.i.*).
LLADA_TENSORS = (
    ("model.embed_tokens.weight", "model.transformer.wte.weight"),
    ("model.norm.weight", "model.transformer.ln_f.weight"),
    ("lm_head.weight", "model.transformer.ff_out.weight"),
    ("model.layers.", "model.transformer.blocks."),
    ("input_layernorm.", "attn_norm."),
    ("post_attention_layernorm.", "ff_norm."),
    ("self_attn.o_proj.", "attn_out."),
    ("self_attn.", ""),
    ("mlp.gate_proj.", "ff_proj."),
    ("mlp.up_proj.", "up_proj."),
    ("mlp.down_proj.", "ff_out."),
)



def tensor_table(cfg: decoder_lib.DecoderConfig
              ) -> dict[tuple[Any, ...], tuple[str, tuple[int, ...],
                                               Callable, Callable]]:
  """jaxlab param path -> (HF name, HF shape, hf_to_ours, ours_to_hf)."""
  d, v, f = cfg.dim, cfg.vocab_size, cfg.mlp_dim
  n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
  same = lambda x: x  # pylint: disable=unnecessary-lambda-assignment
  t = lambda x: x.T  # pylint: disable=unnecessary-lambda-assignment

  def in_proj(heads):  # [heads*H, D] <-> [D, heads, H]
    return (lambda x: x.T.reshape(d, heads, h),
            lambda x: x.reshape(d, heads * h).T)

  def bias(heads):
    return (lambda x: x.reshape(heads, h), lambda x: x.reshape(heads * h))

  out_proj = (lambda x: x.T.reshape(n, h, d), lambda x: x.reshape(n * h, d).T)
  if config_lib.phi_like(cfg):
    return _phi_table(cfg, in_proj, bias, out_proj)
  table = {
      ("embed_vd",): ("model.embed_tokens.weight", (v, d), same, same),
      ("final_norm", "scale"): ("model.norm.weight", (d,), same, same),
  }
  if not cfg.tie_embeddings:
    table[("lm_head_dv",)] = ("lm_head.weight", (v, d), t, t)
  for i in range(cfg.num_layers):
    p = f"model.layers.{i}."
    rows = {
        ("attn_norm", "scale"): ("input_layernorm.weight", (d,), same, same),
        ("mlp_norm", "scale"): ("post_attention_layernorm.weight", (d,),
                                same, same),
        ("attn", "q_dnh"): ("self_attn.q_proj.weight", (n * h, d),
                            *in_proj(n)),
        ("attn", "k_dkh"): ("self_attn.k_proj.weight", (k * h, d),
                            *in_proj(k)),
        ("attn", "v_dkh"): ("self_attn.v_proj.weight", (k * h, d),
                            *in_proj(k)),
        ("attn", "o_nhd"): ("self_attn.o_proj.weight", (d, n * h), *out_proj),
        ("mlp", "gate_df"): ("mlp.gate_proj.weight", (f, d), t, t),
        ("mlp", "up_df"): ("mlp.up_proj.weight", (f, d), t, t),
        ("mlp", "down_fd"): ("mlp.down_proj.weight", (d, f), t, t),
    }
    if cfg.post_norms:  # Gemma: post-attention / pre- and post-MLP norms
      rows[("mlp_norm", "scale")] = ("pre_feedforward_layernorm.weight",
                                     (d,), same, same)
      rows[("post_attn_norm", "scale")] = ("post_attention_layernorm.weight",
                                           (d,), same, same)
      rows[("post_mlp_norm", "scale")] = (
          "post_feedforward_layernorm.weight", (d,), same, same)
    if cfg.qk_norm:
      rows[("attn", "q_norm", "scale")] = ("self_attn.q_norm.weight", (h,),
                                           same, same)
      rows[("attn", "k_norm", "scale")] = ("self_attn.k_norm.weight", (h,),
                                           same, same)
    if cfg.qkv_bias:
      rows[("attn", "q_bias_nh")] = ("self_attn.q_proj.bias", (n * h,),
                                     *bias(n))
      rows[("attn", "k_bias_kh")] = ("self_attn.k_proj.bias", (k * h,),
                                     *bias(k))
      rows[("attn", "v_bias_kh")] = ("self_attn.v_proj.bias", (k * h,),
                                     *bias(k))
    for path, row in rows.items():
      table[("layers", i) + path] = (p + row[0],) + row[1:]
  return table


def _phi_table(cfg: decoder_lib.DecoderConfig, in_proj, bias, out_proj
               ) -> dict[tuple[Any, ...], tuple[str, tuple[int, ...],
                                                Callable, Callable]]:
  """`tensor_table` of a Phi config (`PhiForCausalLM` names)."""
  d, v, f = cfg.dim, cfg.vocab_size, cfg.mlp_dim
  n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
  same = lambda x: x  # pylint: disable=unnecessary-lambda-assignment
  t = lambda x: x.T  # pylint: disable=unnecessary-lambda-assignment

  def norm(ours, theirs, size):
    return {ours + ("scale",): (theirs + ".weight", (size,), same, same),
            ours + ("bias",): (theirs + ".bias", (size,), same, same)}

  table = {("embed_vd",): ("model.embed_tokens.weight", (v, d), same, same),
           **norm(("final_norm",), "model.final_layernorm", d)}
  if not cfg.tie_embeddings:
    table[("lm_head_dv",)] = ("lm_head.weight", (v, d), t, t)
  if cfg.lm_head_bias:
    table[("lm_head_bias_v",)] = ("lm_head.bias", (v,), same, same)
  for i in range(cfg.num_layers):
    rows = {
        **norm(("attn_norm",), "input_layernorm", d),
        ("attn", "q_dnh"): ("self_attn.q_proj.weight", (n * h, d),
                            *in_proj(n)),
        ("attn", "k_dkh"): ("self_attn.k_proj.weight", (k * h, d),
                            *in_proj(k)),
        ("attn", "v_dkh"): ("self_attn.v_proj.weight", (k * h, d),
                            *in_proj(k)),
        ("attn", "o_nhd"): ("self_attn.dense.weight", (d, n * h), *out_proj),
        ("mlp", "up_df"): ("mlp.fc1.weight", (f, d), t, t),
        ("mlp", "down_fd"): ("mlp.fc2.weight", (d, f), t, t),
    }
    if cfg.qkv_bias:
      rows[("attn", "q_bias_nh")] = ("self_attn.q_proj.bias", (n * h,),
                                     *bias(n))
      rows[("attn", "k_bias_kh")] = ("self_attn.k_proj.bias", (k * h,),
                                     *bias(k))
      rows[("attn", "v_bias_kh")] = ("self_attn.v_proj.bias", (k * h,),
                                     *bias(k))
    if cfg.attn_out_bias:
      rows[("attn", "o_bias_d")] = ("self_attn.dense.bias", (d,), same, same)
    if cfg.mlp_bias:
      rows[("mlp", "up_bias_f")] = ("mlp.fc1.bias", (f,), same, same)
      rows[("mlp", "down_bias_d")] = ("mlp.fc2.bias", (d,), same, same)
    if cfg.qk_norm:
      rows.update(norm(("attn", "q_norm"), "self_attn.q_layernorm", h))
      rows.update(norm(("attn", "k_norm"), "self_attn.k_layernorm", h))
    for path, row in rows.items():
      table[("layers", i) + path] = (f"model.layers.{i}." + row[0],) + row[1:]
  return table


def layer_paths(cfg: decoder_lib.DecoderConfig, param_path: tuple
                ) -> list[tuple[Any, ...]] | None:
  """Unrolled paths ("layers", i, ...) of the layers stacked in a scanned
  param ("scan_blocks", j, ...), in stacking order; None for other params."""
  if not param_path or param_path[0] != "scan_blocks":
    return None
  return [("layers", i) + tuple(param_path[2:])
          for i in cfg.scan_layer_ids(int(param_path[1]))]


def tensor_names_for(arch: str, table: dict) -> dict:
  """`tensor_table(cfg)` with the tensor names `arch` uses (LLaDA's)."""
  if arch != "LLaDAModelLM":
    return table
  out = {}
  for path, (name, *rest) in table.items():
    for old, new in LLADA_TENSORS:
      name = name.replace(old, new)
    out[path] = (name, *rest)
  return out


# Where a Gemma 3 multimodal checkpoint's text tensors live: transformers 5,
# then the Hub's older layout.
_GEMMA3_TEXT_PREFIXES = (("model.", "model.language_model."),
                         ("model.", "language_model.model."))


def gemma3_language_model(hf: Mapping[str, Any], path: str,
                          names: Mapping[str, str]
                          ) -> tuple[dict[str, Any], Callable[[str], str]]:
  """(the `Gemma3ForCausalLM` config of its `text_config`, HF text tensor
  name -> the name in this checkpoint's files) of a Gemma 3 multimodal
  checkpoint whose tensors are `names` (`files.weight_files`); warns that
  its vision tower is not loaded."""
  where = os.path.join(path, files.CONFIG_FILE)
  text = dict(hf.get("text_config") or {})
  if not text.get("hidden_size"):
    raise ValueError(f"{where}: {config_lib.GEMMA3_MULTIMODAL} without a "
                     "text_config (hidden_size missing)")
  text.update(architectures=[config_lib.GEMMA3], model_type="gemma3_text")
  # The embedding tie is the outer config's (transformers reads it there).
  text.setdefault("tie_word_embeddings", hf.get("tie_word_embeddings", True))
  prefixes = [p for p in _GEMMA3_TEXT_PREFIXES
              if f"{p[1]}embed_tokens.weight" in names]
  if not prefixes:
    raise ValueError(
        f"{path}: no Gemma 3 language-model tensors (looked for "
        + " or ".join(f"{p[1]}embed_tokens.weight"
                      for p in _GEMMA3_TEXT_PREFIXES) + ")")
  ours, theirs = prefixes[0]
  warnings.warn(f"{path}: {config_lib.GEMMA3_MULTIMODAL}: loading its "
                "language model only (Gemma3ForCausalLM); the vision tower "
                "and projector are not read", stacklevel=4)

  def rename(name: str) -> str:
    return theirs + name[len(ours):] if name.startswith(ours) else name
  return text, rename


def tensor_shapes(cfg: decoder_lib.DecoderConfig, *,
                  architecture: str | None = None
                  ) -> dict[str, tuple[int, ...]]:
  """HF tensor name -> HF-layout shape of every tensor a `cfg` model is
  made of: the names `load_tensors` asks for and `save` writes
  (`architecture`: the config.json architecture whose tensor names to use,
  e.g. "LLaDAModelLM"; None: the Llama-family names)."""
  table = tensor_names_for(architecture or "", tensor_table(cfg))
  return {name: shape for name, shape, _, _ in table.values()}


def load_tensors(cfg: decoder_lib.DecoderConfig,
                 get_tensor: Callable[[str, tuple[int, ...]], Any], *,
                 mesh: jax.sharding.Mesh | None = None, rules: Any = None,
                 architecture: str | None = None) -> decoder_lib.Decoder:
  """A `Decoder` of `cfg` filled from HF-layout tensors given by name.

  The loader behind `load` (safetensors) and `jaxlab.io.gguf.load`: any
  other source of transformers-named tensors (another file format, an
  in-memory state dict) fills a model the same way (`fill.fill` over
  `tensor_table(cfg)`).

  Args:
    cfg: the architecture (e.g. from `config_from_hf`).
    get_tensor: `get_tensor(name, shape) -> array`: the HF tensor `name`
      (e.g. "model.layers.0.self_attn.q_proj.weight") in transformers'
      layout, whose expected HF shape is `shape` (`tensor_shapes(cfg)`
      lists them all). It should raise a ValueError naming its source when
      the tensor is missing or has another shape; a returned array of the
      wrong shape raises a ValueError here. It is called once per tensor
      (per layer of a scanned param), so a source can read lazily.
    mesh, rules: optional mesh and logical-axis rules; every parameter is
      placed with its `NamedSharding` as it is converted (a dim the mesh
      axes do not divide stays replicated).
    architecture: as in `tensor_shapes` (the names asked for).

  Returns:
    The filled `Decoder` (params in `cfg.param_dtype`; a scanned config's
    stacked params are the layers' tensors stacked on the host).
  """
  return fill.fill(lambda: decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0)),
                   tensor_names_for(architecture or "", tensor_table(cfg)),
                   get_tensor, layer_paths=lambda p: layer_paths(cfg, p),
                   mesh=mesh, rules=rules)


def load_decoder(path: str | os.PathLike, *, dtype: str = "float32",
                 param_dtype: str | None = None,
                 mesh: jax.sharding.Mesh | None = None, rules: Any = None,
                 **config_overrides: Any
                 ) -> tuple[decoder_lib.Decoder, decoder_lib.DecoderConfig]:
  """`jaxlab.io.hf.load` of a decoder-family checkpoint directory (a Gemma 3
  multimodal one as its language model): the arguments and errors of
  `load`."""
  path = os.fspath(path)
  hf_json = files.read_config(path)
  rename = None
  names = None
  if config_lib.is_gemma3_multimodal_config(hf_json):
    names = files.weight_files(path)
    hf_json, rename = gemma3_language_model(hf_json, path, names)
  cfg = config_lib.config_from_hf(
      hf_json, dtype=dtype, param_dtype=param_dtype,
      where=os.path.join(path, files.CONFIG_FILE), **config_overrides)
  with files.tensor_reader(path, names, rename) as get_tensor:
    model = load_tensors(
        cfg, get_tensor, mesh=mesh, rules=rules,
        architecture=config_lib.architecture(hf_json, files.CONFIG_FILE))
  return model, cfg


def save_decoder(model: decoder_lib.Decoder,
                 cfg: decoder_lib.DecoderConfig,
                 path: str | os.PathLike) -> str:
  """`jaxlab.io.hf.save` of a `Decoder`: config.json (`config_to_hf`) and
  model.safetensors (`fill.to_tensors` over `tensor_table(cfg)`; LoRA
  adapters folded in)."""
  hf_config = config_lib.config_to_hf(cfg)
  tensors = fill.to_tensors(model, tensor_table(cfg),
                            layer_paths=lambda p: layer_paths(model.cfg, p))
  return files.write(path, tensors, hf_config)
