"""ViT / DeiT image classifiers (HF safetensors) -> `ViTClassifier`.

    model, cfg = jaxlab.io.hf.load("/ckpt/deit-base-patch16-224")
    logits_bc = model(pixel_values=x_bchw)    # as the HF image processor
                                              # gives them (no rescale)

`ViTForImageClassification` (Dosovitskiy et al., 2021),
`DeiTForImageClassification` and `DeiTForImageClassificationWithTeacher`
(Touvron et al., 2021: a distillation token after CLS; the "with teacher"
logits are the mean of the CLS and distillation heads) load as
`jaxlab.models.vit_classifier.ViTClassifier` (pre-norm LayerNorm blocks,
attention and GELU MLP with biases, the head on the final-normed CLS
token: the same computation as transformers' `ViTModel` / `DeiTModel` with
`add_pooling_layer=False`) with `rescale_input=False`: the model reads
`pixel_values` as the image processor normalised them
(`jaxlab.data.vision_processor.ClassifierProcessor`).

Tensor names: the Hub's / `save_pretrained`'s (`vit.encoder.layer.{i}.
attention.attention.query.weight`, ...) and transformers 5's module names
(`vit.layers.{i}.attention.q_proj.weight`, ...) are both read. The name
table is over `jaxlab.io.hf.fill`; `jaxlab.io.hf.load` dispatches here.
"""

from __future__ import annotations

from collections.abc import Mapping
import os
from typing import Any

import jax
from flax import nnx

from jaxlab.io.hf import files
from jaxlab.io.hf import fill
from jaxlab.models import vit_classifier as vc

# architectures -> (tensor prefix, distillation token, distilled head)
ARCHITECTURES = {
    "ViTForImageClassification": ("vit", False, False),
    "DeiTForImageClassification": ("deit", True, False),
    "DeiTForImageClassificationWithTeacher": ("deit", True, True),
}


def is_vit_config(hf: Mapping[str, Any]) -> bool:
  """A config.json of one of `ARCHITECTURES`."""
  archs = hf.get("architectures") or []
  return len(archs) == 1 and archs[0] in ARCHITECTURES


def vit_config_from_hf(hf: Mapping[str, Any], *,
                       where: str = "config.json"
                       ) -> vc.ViTClassifierConfig:
  """`ViTClassifierConfig` of a ViT / DeiT classification config.json."""
  if not is_vit_config(hf):
    raise ValueError(f"{where}: architectures={hf.get('architectures')} is "
                     f"not one of {', '.join(ARCHITECTURES)}")
  _, dist, dist_head = ARCHITECTURES[hf["architectures"][0]]
  act = hf.get("hidden_act", "gelu")
  if act != "gelu":
    raise ValueError(f"{where}: hidden_act={act!r}; ViTClassifier computes "
                     "the exact (erf) GELU, 'gelu'")
  if not hf.get("qkv_bias", True):
    raise ValueError(f"{where}: qkv_bias=false is not supported (the "
                     "released ViT / DeiT checkpoints have q/k/v biases)")
  size = hf.get("image_size", 224)
  patch = hf.get("patch_size", 16)
  for name, value in (("image_size", size), ("patch_size", patch)):
    if not isinstance(value, int):
      raise ValueError(f"{where}: {name}={value!r}: only square sizes (an "
                       "int) are supported")
  d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
  if d % heads:
    raise ValueError(f"{where}: hidden_size={d} is not a multiple of "
                     f"num_attention_heads={heads}")
  labels = hf.get("id2label") or {}
  num_classes = int(hf.get("num_labels") or len(labels) or 2)
  return vc.ViTClassifierConfig(
      image_size=size, patch_size=patch,
      channels=int(hf.get("num_channels", 3)), dim=d,
      num_layers=int(hf["num_hidden_layers"]), num_heads=heads,
      head_dim=d // heads, mlp_dim=int(hf["intermediate_size"]),
      num_classes=num_classes,
      init_std=float(hf.get("initializer_range", 0.02)),
      norm_eps=float(hf.get("layer_norm_eps", 1e-12)), rescale_input=False,
      distillation_token=dist, distilled_head=dist_head)


def _layer_names(prefix: str, i: int, new_names: bool) -> dict[str, str]:
  """Our per-layer key -> HF name (the Hub's or transformers 5's)."""
  if new_names:
    base = f"{prefix}.layers.{i}."
    return {"q": base + "attention.q_proj", "k": base + "attention.k_proj",
            "v": base + "attention.v_proj", "o": base + "attention.o_proj",
            "fc1": base + "mlp.fc1", "fc2": base + "mlp.fc2",
            "ln1": base + "layernorm_before", "ln2": base + "layernorm_after"}
  base = f"{prefix}.encoder.layer.{i}."
  return {"q": base + "attention.attention.query",
          "k": base + "attention.attention.key",
          "v": base + "attention.attention.value",
          "o": base + "attention.output.dense",
          "fc1": base + "intermediate.dense", "fc2": base + "output.dense",
          "ln1": base + "layernorm_before", "ln2": base + "layernorm_after"}


def tensor_table(cfg: vc.ViTClassifierConfig, architecture: str, *,
                 new_names: bool = False) -> dict[tuple[Any, ...], fill.Row]:
  """jaxlab param path -> (HF name, HF shape, hf_to_ours, ours_to_hf).

  Layouts: the patch convolution `[d, C, p, p]` is our `[p * p * C, d]`
  kernel over `patchify`'s (row, column, channel) patch vectors; a linear
  `[out, in]` is our `[in, out]`, with the heads split out of q / k / v
  (`[d, H, hd]`) and out of the output projection's input (`[H, hd, d]`);
  the CLS / distillation tokens `[1, 1, d]` and the position embedding
  `[1, N, d]` lose their leading ones.
  """
  if cfg.qk_dims or cfg.v_dims or cfg.mlp_dims:
    raise ValueError("a pruned ViTClassifier (per-layer widths) has no "
                     "transformers equivalent")
  prefix = ARCHITECTURES[architecture][0]
  d, h, hd, m = cfg.dim, cfg.num_heads, cfg.head_dim, cfg.mlp_dim
  p, ch, n, c = cfg.patch_size, cfg.channels, cfg.num_tokens, cfg.num_classes
  same = lambda x: x  # pylint: disable=unnecessary-lambda-assignment
  t = lambda x: x.T  # pylint: disable=unnecessary-lambda-assignment
  conv = (d, ch, p, p)
  emb = f"{prefix}.embeddings."

  def token(x):
    return x.reshape(1, 1, d)

  table: dict[tuple[Any, ...], fill.Row] = {
      ("patch_embed_kd",): (
          emb + "patch_embeddings.projection.weight", conv,
          lambda x: x.transpose(2, 3, 1, 0).reshape(p * p * ch, d),
          lambda x: x.reshape(p, p, ch, d).transpose(3, 2, 0, 1)),
      ("patch_bias_d",): (emb + "patch_embeddings.projection.bias", (d,),
                          same, same),
      ("cls_d",): (emb + "cls_token", (1, 1, d), lambda x: x.reshape(d),
                   token),
      ("pos_embed_nd",): (emb + "position_embeddings", (1, n, d),
                          lambda x: x.reshape(n, d),
                          lambda x: x.reshape(1, n, d)),
      ("final_norm", "scale"): (f"{prefix}.layernorm.weight", (d,), same,
                                same),
      ("final_norm", "bias"): (f"{prefix}.layernorm.bias", (d,), same, same),
  }
  head = "cls_classifier" if cfg.distilled_head else "classifier"
  table[("head_dc",)] = (head + ".weight", (c, d), t, t)
  table[("head_bias_c",)] = (head + ".bias", (c,), same, same)
  if cfg.distillation_token:
    table[("dist_d",)] = (emb + "distillation_token", (1, 1, d),
                          lambda x: x.reshape(d), token)
  if cfg.distilled_head:
    table[("dist_head_dc",)] = ("distillation_classifier.weight", (c, d), t,
                                t)
    table[("dist_head_bias_c",)] = ("distillation_classifier.bias", (c,),
                                    same, same)

  def in_heads(x):  # [H * hd, d] -> [d, H, hd]
    return x.T.reshape(d, h, hd)

  def out_heads(x):
    return x.reshape(d, h * hd).T

  for i in range(cfg.num_layers):
    nm = _layer_names(prefix, i, new_names)
    rows = {
        ("ln1", "scale"): (nm["ln1"] + ".weight", (d,), same, same),
        ("ln1", "bias"): (nm["ln1"] + ".bias", (d,), same, same),
        ("ln2", "scale"): (nm["ln2"] + ".weight", (d,), same, same),
        ("ln2", "bias"): (nm["ln2"] + ".bias", (d,), same, same),
        ("attn", "bo_d"): (nm["o"] + ".bias", (d,), same, same),
        ("attn", "wo_hvd"): (nm["o"] + ".weight", (d, h * hd),
                             lambda x: x.T.reshape(h, hd, d),
                             lambda x: x.reshape(h * hd, d).T),
        ("mlp", "w1_dm"): (nm["fc1"] + ".weight", (m, d), t, t),
        ("mlp", "b1_m"): (nm["fc1"] + ".bias", (m,), same, same),
        ("mlp", "w2_md"): (nm["fc2"] + ".weight", (d, m), t, t),
        ("mlp", "b2_d"): (nm["fc2"] + ".bias", (d,), same, same),
    }
    for ours, hf_key in (("q", "q"), ("k", "k"), ("v", "v")):
      w = "wv_dhv" if ours == "v" else f"w{ours}_dhk"
      b = "bv_hv" if ours == "v" else f"b{ours}_hk"
      rows[("attn", w)] = (nm[hf_key] + ".weight", (h * hd, d), in_heads,
                           out_heads)
      rows[("attn", b)] = (nm[hf_key] + ".bias", (h * hd,),
                           lambda x: x.reshape(h, hd),
                           lambda x: x.reshape(h * hd))
    for path, row in rows.items():
      table[("blocks", i) + path] = row
  return table


def vit_config_to_hf(cfg: vc.ViTClassifierConfig) -> dict[str, Any]:
  """config.json of `cfg` (transformers' ViT / DeiT classification)."""
  arch = ("DeiTForImageClassificationWithTeacher" if cfg.distilled_head
          else "DeiTForImageClassification" if cfg.distillation_token
          else "ViTForImageClassification")
  return {
      "architectures": [arch], "model_type": ARCHITECTURES[arch][0],
      "hidden_size": cfg.dim, "num_hidden_layers": cfg.num_layers,
      "num_attention_heads": cfg.num_heads,
      "intermediate_size": cfg.mlp_dim, "hidden_act": "gelu",
      "image_size": cfg.image_size, "patch_size": cfg.patch_size,
      "num_channels": cfg.channels, "qkv_bias": True,
      "layer_norm_eps": cfg.norm_eps,
      "initializer_range": cfg.init_std,
      "id2label": {str(i): f"LABEL_{i}" for i in range(cfg.num_classes)},
      "label2id": {f"LABEL_{i}": i for i in range(cfg.num_classes)},
  }


def load_vit(path: str | os.PathLike, *, dtype: str = "float32",
             param_dtype: str | None = None,
             mesh: jax.sharding.Mesh | None = None, rules: Any = None,
             **config_overrides: Any
             ) -> tuple[vc.ViTClassifier, vc.ViTClassifierConfig]:
  """Loads a HF ViT / DeiT image-classification checkpoint (no torch).

  The model computes in float32 (`dtype` / `param_dtype` other than
  float32 are refused); with `mesh` and `rules` every parameter is placed
  with its `NamedSharding` as it is read. `config_overrides` are further
  `ViTClassifierConfig` fields (e.g. `image_size` is not one: the position
  embedding fixes it). (`jaxlab.io.hf.load` dispatches here.)
  """
  for name, value in (("dtype", dtype), ("param_dtype", param_dtype)):
    if value not in (None, "float32"):
      raise ValueError(f"{name}={value!r}: a ViT / DeiT classifier loads in "
                       "float32 only")
  path = os.fspath(path)
  hf = files.read_config(path)
  cfg = vit_config_from_hf(hf, where=os.path.join(path, files.CONFIG_FILE))
  if config_overrides:
    import dataclasses  # pylint: disable=g-import-not-at-top
    cfg = dataclasses.replace(cfg, **config_overrides)
  names = files.weight_files(path)
  arch = hf["architectures"][0]
  prefix = ARCHITECTURES[arch][0]
  new_names = f"{prefix}.layers.0.attention.q_proj.weight" in names
  table = tensor_table(cfg, arch, new_names=new_names)
  with files.tensor_reader(path, names) as get_tensor:
    model = fill.fill(lambda: vc.ViTClassifier(cfg, rngs=nnx.Rngs(0)),
                      table, get_tensor, mesh=mesh, rules=rules)
  return model, cfg


def save_vit(model: vc.ViTClassifier, cfg: vc.ViTClassifierConfig,
             path: str | os.PathLike) -> str:
  """Writes config.json and model.safetensors (the Hub's tensor names),
  which transformers' `from_pretrained` and `load_vit` read."""
  if cfg.rescale_input:
    raise ValueError("model.rescale_input=True: this model maps [0, 1] "
                     "images to [-1, 1] itself, which a transformers ViT "
                     "does not; only a model with rescale_input=False "
                     "(loaded from HF) can be saved as one")
  hf = vit_config_to_hf(cfg)
  tensors = fill.to_tensors(model, tensor_table(cfg, hf["architectures"][0]))
  return files.write(path, tensors, hf)
