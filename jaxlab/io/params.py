"""A model's parameters as one .npz file, for experiments' resumable stages.

An experiment that pre-trains a model and then runs several methods from it
saves the pre-trained parameters once, so a killed or extended run reloads
them instead of training again:

    if params.exists(path):
      params.load(model, path, meta)
    else:
      train(model)
      params.save(model, path, meta)

Arrays are stored under their `nnx` path ("layers/0/attn/q/kernel"), with an
optional JSON `meta` (e.g. the config that produced them): `load` refuses a
file whose paths, shapes or `meta` differ from the model's, with one message
that names the file, instead of loading parameters of another run. Writes go
to a temporary file first, so a run killed mid-write leaves no half file.
(Full training state, optimizer included, is the trainer's orbax checkpoint:
`jaxlab.train.checkpoint`; this is parameters only.)
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import jax.numpy as jnp
from flax import nnx
import numpy as np

_META = "__meta__"


def _flat(model: nnx.Module) -> list[tuple[str, Any]]:
  return [("/".join(map(str, k)), v)
          for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))]


def _meta_json(meta: Any) -> str:
  return json.dumps(meta, sort_keys=True, default=str)


def config_key(config: Any, *fields: str) -> tuple[dict[str, Any], str]:
  """The `fields` of `config` a stage depends on, and an 8-hex digest.

  The dict is the `meta` to save the stage's result with; the digest names
  its file, so a run whose config differs in these fields computes a new
  file and one that does not reloads the old (e.g.
  `WORKDIR/sft_seed0_<digest>.npz`). Sections (`ConfigDict`) become dicts.
  """
  meta = {f: (config.get(f).to_dict() if hasattr(config.get(f), "to_dict")
              else config.get(f)) for f in fields}
  blob = _meta_json(meta).encode()
  return meta, hashlib.sha256(blob).hexdigest()[:8]


def save(model: nnx.Module, path: str, meta: Any = None) -> None:
  """Writes `model`'s nnx.Param leaves (and `meta`, JSON) to `path` (.npz)."""
  arrays = {k: np.asarray(v.get_value()) for k, v in _flat(model)}
  arrays[_META] = np.asarray(_meta_json(meta))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp.npz"
  np.savez(tmp, **arrays)
  os.replace(tmp, path)


def exists(path: str) -> bool:
  return os.path.isfile(path)


def load(model: nnx.Module, path: str, meta: Any = None) -> Any:
  """Loads `save`'s file into `model` in place; returns the saved meta.

  With a dict `meta`, each of its keys must hold the same value in the saved
  meta (which may have more keys, e.g. a final loss); otherwise the whole
  meta must be equal.

  Raises:
    ValueError: the file was written for other parameters (paths or shapes)
      or with another `meta` (e.g. another config).
  """
  with np.load(path) as f:
    stored = {k: f[k] for k in f.files}
  saved = json.loads(str(stored.pop(_META, np.asarray("null"))))
  want = json.loads(_meta_json(meta))
  same = (isinstance(want, dict) and isinstance(saved, dict)
          and all(k in saved and saved[k] == v for k, v in want.items())
          ) if isinstance(want, dict) else saved == want
  if not same:
    raise ValueError(
        f"{path} was saved with meta {_meta_json(saved)}, not "
        f"{_meta_json(meta)}: use another workdir or delete the file to "
        "recompute it")
  flat = _flat(model)
  mine = {k: tuple(v.get_value().shape) for k, v in flat}
  theirs = {k: tuple(v.shape) for k, v in stored.items()}
  if mine != theirs:
    diff = sorted(set(mine.items()) ^ set(theirs.items()))[:4]
    raise ValueError(f"{path} does not match the model's parameters "
                     f"(first differences, path and shape: {diff})")
  def value(var, arr):
    # .npz stores bfloat16 (an ml_dtypes dtype) as raw 2-byte void: view it
    # back as the parameter's dtype; device arrays, as `save` read them.
    want = np.dtype(var.get_value().dtype)
    if arr.dtype.kind == "V" and arr.dtype.itemsize == want.itemsize:
      arr = arr.view(want)
    return jnp.asarray(arr)

  nnx.update(model, nnx.from_flat_state(
      [(k, v.replace(value(v, stored["/".join(map(str, k))])))
       for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))]))
  return saved
