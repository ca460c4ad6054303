"""Shared config pieces: every training config starts from `base_config()`.

Paper configs call `base_config()` and override what they need, so field
names (and their command-line overrides such as `--config.train.steps=10`,
`--config.optim.lr=3e-4`, `--config.mesh.fsdp=-1`) are the same everywhere.
"""

import ml_collections

# The trainer's defaults live in the library (`jaxlab.train.defaults`).
from jaxlab.train.defaults import (  # pylint: disable=unused-import
    base_config, decoder_config, mesh_config, optim_config, sharding_rules,
    train_config)


def _convert(key: str, value: str, default):
  """`value` (command-line text) as the type of `default`."""
  if default is None:
    return value
  if isinstance(default, bool):
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
      return True
    if low in ("0", "false", "no", "off"):
      return False
    raise ValueError(f"config arg {key}={value!r}: expected a boolean "
                     "(true/false)")
  try:
    return type(default)(value)
  except ValueError:
    raise ValueError(f"config arg {key}={value!r}: expected "
                     f"{type(default).__name__}") from None


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
  """A config file's argument -> {preset: bool, key: value} (big_vision).

  `jaxlab/configs/X.py:tiny,steps=10` gives `arg="tiny,steps=10"`. Every boolean
  default is a *preset*, switched on by its bare name (`tiny`); every other
  default is a `key=value` argument converted to the default's type. An
  unknown preset or key, a bare key that needs a value, or a value of the
  wrong type is one `ValueError` that lists what is valid.
  """
  out = ml_collections.ConfigDict(defaults)
  presets = sorted(k for k, v in defaults.items() if isinstance(v, bool))
  keys = sorted(k for k, v in defaults.items() if not isinstance(v, bool))
  valid = (f"valid presets: {', '.join(presets) or 'none'}; valid key=value "
           f"args: {', '.join(keys) or 'none'}")
  for part in (arg or "").split(","):
    part = part.strip()
    if not part:
      continue
    if "=" in part:
      k, v = (x.strip() for x in part.split("=", 1))
      if k not in out:
        raise ValueError(f"unknown config arg {k!r} (in {arg!r}); {valid}")
      out[k] = _convert(k, v, defaults[k])
    elif part in presets:
      out[part] = True
    elif part in out:
      raise ValueError(f"config arg {part!r} needs a value ({part}=...); "
                       f"{valid}")
    else:
      raise ValueError(f"unknown preset {part!r} (in config arg {arg!r}); "
                       f"{valid}")
  return out


def qwen_vl_prefix_model(model: ml_collections.ConfigDict, *, kind: str,
                         image_size: int, num_frames: int = 1
                         ) -> ml_collections.ConfigDict:
  """`config.model` of the Qwen2.5-VL prefix LM (`jaxlab.models.
  qwen2_vl_prefix`, issue #32's `vl` presets) at a miniature's size: the
  decoder fields of `model` (its `name`, `vit` and `video` sections
  dropped), a tiny vision tower (one windowed and one full-attention block,
  patch 4, 2 x 2 merge, temporal patch 2) whose output is the decoder
  width, and the `prefix` section (an image or a clip of `num_frames`
  frames of `image_size` pixels). The task's vocabulary gets the four
  vision tokens after it (`qwen2_vl_prefix.with_task_vocab`)."""
  d = {k: v for k, v in model.to_dict().items()
       if k not in ("name", "vit", "video")}
  d.update(name="qwen2_5_vl_prefix",
           vision=dict(depth=2, hidden_size=16, intermediate_size=32,
                       num_heads=2, patch_size=4, temporal_patch_size=2,
                       spatial_merge_size=2, window_size=8,
                       fullatt_block_indexes=(1,)),
           prefix=dict(kind=kind, image_size=image_size,
                       num_frames=num_frames))
  return ml_collections.ConfigDict(d)
