"""The shipped SmolLM2 GGUF, converted once per test session.

`jaxlab.io.gguf.load` of the shipped SmolLM2-135M-Instruct Q4_1 file takes
~5 s on the 2-core CI machine (~2.3 s parsing the metadata with its 49152
token vocabulary, the rest dequantising), and `pretrained.load(...,
cache=True)` is no faster (it parses the metadata again and reads a 0.5 GB
npz into a zero-filled model). Several test modules load the same file
(tests/io/gguf_test.py, tests/io/pretrained_test.py,
tests/models/decoder_test.py, tests/analysis/frequency_entropy_test.py).
`load(name, dtype)` converts it once per session:

* the arrays and the config are written once to the run's scratch
  directory `$JAXLAB_TEST_SCRATCH` (one .npy per leaf;
  `session_cache.build_once`), so the other xdist worker reads that
  conversion (~1-2 s) instead of converting again. Within a process the last (name, dtype) asked for
  stays in memory (`functools.lru_cache(maxsize=1)`: the suite's modules
  that load the shipped file ask for float32 but one, so a worker holds
  0.5 GB, not 0.5 GB per dtype), and the later modules of that worker
  merge their models over the same jax arrays instead of reading the
  files again; each call returns its own model.
* without `$JAXLAB_TEST_SCRATCH` (a test module run by hand) the
  conversion is kept in the process (`functools.cache`) and each call
  merges a fresh model over the same immutable jax arrays.

What is cached is exactly what `gguf.load(path, dtype=dtype)` returned, so
the tests check the same weights they checked before.
"""

import contextlib
import functools
import os
import pickle
from typing import Any

from jaxlab.testing import session_cache


def _key(name: str, dtype: str) -> str:
  """The session-cache key of a (file, dtype): the file's name, size and
  modification time, so another file under the same name is not read."""
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  src = pretrained.path(name)
  st = os.stat(src)
  return (f"pretrained/{os.path.basename(src)}.{st.st_size}."
          f"{int(st.st_mtime)}.{dtype}")


def _write(out: str, cfg: Any, leaves: list[Any]) -> None:
  """Into the new directory `out`: one .npy per leaf, as unsigned ints of
  its width (numpy cannot save bfloat16 as itself), and the config with
  the leaves' dtypes."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  os.makedirs(out)
  dtypes = []
  for i, leaf in enumerate(leaves):
    a = np.asarray(leaf)
    dtypes.append(a.dtype.name)
    np.save(os.path.join(out, f"{i}.npy"), a.view(f"u{a.itemsize}"))
  with open(os.path.join(out, "cfg.pkl"), "wb") as fh:
    pickle.dump((cfg, dtypes), fh)


def _read(out: str) -> tuple[Any, list[Any]]:
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  with open(os.path.join(out, "cfg.pkl"), "rb") as fh:
    cfg, dtypes = pickle.load(fh)
  return cfg, [np.load(os.path.join(out, f"{i}.npy"), mmap_mode="r").view(
      jnp.dtype(d)) for i, d in enumerate(dtypes)]


def _convert(name: str, dtype: str):
  """(cfg, graphdef, state) of `gguf.load(path(name), dtype=dtype)`."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from jaxlab.io import gguf  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  model, cfg = gguf.load(pretrained.path(name), dtype=dtype)
  graphdef, state = nnx.split(model)
  return cfg, graphdef, state


_convert_here = functools.cache(_convert)


@functools.lru_cache(maxsize=1)
def _converted(name: str, dtype: str):
  """`_convert`'s value, from the scratch directory when it has it; the
  last one kept in the process (immutable jax arrays, shared by the models
  `load` merges over them)."""
  import jax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from jaxlab.models import decoder as decoder_lib  # pylint: disable=g-import-not-at-top
  made = []

  def convert(tmp):
    made.append(_convert(name, dtype))
    _write(tmp, made[0][0], jax.tree.leaves(made[0][2]))

  out = session_cache.build_once(_key(name, dtype), convert)
  if out is None:  # outside a test session
    return _convert_here(name, dtype)
  if made:  # this process converted: its arrays as they are
    return made[0]
  cfg, leaves = _read(out)
  graphdef, abstract = nnx.split(nnx.eval_shape(
      lambda: decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))))
  treedef = jax.tree.structure(abstract)
  if treedef.num_leaves != len(leaves):
    raise ValueError(f"{out}: {len(leaves)} arrays, the model of its config "
                     f"has {treedef.num_leaves}")
  arrays = []
  for want, got in zip(jax.tree.leaves(abstract), leaves):
    if (tuple(want.shape), want.dtype) != (got.shape, got.dtype):
      raise ValueError(f"{out}: an array {got.shape} {got.dtype} where the "
                       f"model has {want.shape} {want.dtype}")
    arrays.append(jax.numpy.asarray(got))
  return cfg, graphdef, jax.tree.unflatten(treedef, arrays)


def load(name: str = "smollm2-135m-instruct", dtype: str = "float32"):
  """(model, cfg) as `gguf.load(pretrained.path(name), dtype=dtype)` gives
  them, converted once per session (see the module docstring); each call
  returns a new model object over the same arrays."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  cfg, graphdef, state = _converted(name, dtype)
  return nnx.merge(graphdef, state, copy=True), cfg


@functools.cache
def hf_gguf_tokenizer(name: str = "smollm2-135m-instruct"):
  """transformers' `AutoTokenizer.from_pretrained(dir, gguf_file=...)` of
  the shipped GGUF (~3 s: it parses the file's metadata), once per
  process. The reference the tokenizer tests compare with; read only."""
  import transformers  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  folder, file = os.path.split(pretrained.path(name))
  return transformers.AutoTokenizer.from_pretrained(folder, gguf_file=file)


@contextlib.contextmanager
def gguf_parsed_once():
  """Within the block, each GGUF file's metadata is parsed once.

  gguf-py's `GGUFReader` of the shipped SmolLM2 file takes ~2 s (its
  49152-token vocabulary), and one test class builds several:
  `jaxlab.io.gguf` makes one per `load` / `GGUFCheckpoint` /
  `save_tokenizer` / `to_hf`, transformers' `from_pretrained(...,
  gguf_file=...)` one each for the config, the generation config, the
  tokenizer and the weights, with a `load_gguf_checkpoint(path,
  return_tensors=False)` conversion of the metadata each time. Here both
  are memoised per path: the reader is a read-only memmap that every caller
  may share, and each caller gets its own deep copy of the converted
  metadata. What the code under test computes is unchanged.
  """
  import copy  # pylint: disable=g-import-not-at-top
  from unittest import mock  # pylint: disable=g-import-not-at-top
  import gguf as gguf_py  # pylint: disable=g-import-not-at-top
  from transformers import modeling_gguf_pytorch_utils as hf_gguf  # pylint: disable=g-import-not-at-top
  real_reader, real_load = gguf_py.GGUFReader, hf_gguf.load_gguf_checkpoint
  readers, parsed = {}, {}

  def reader(path, mode="r"):
    key = (os.path.realpath(path), mode)
    if mode != "r":
      return real_reader(path, mode)
    if key not in readers:
      readers[key] = real_reader(path, mode)
    return readers[key]

  def load(path, return_tensors=False, **kwargs):
    if return_tensors or kwargs:
      return real_load(path, return_tensors=return_tensors, **kwargs)
    key = os.path.realpath(path)
    if key not in parsed:
      parsed[key] = real_load(path, return_tensors=False)
    return copy.deepcopy(parsed[key])

  with mock.patch.object(gguf_py, "GGUFReader", reader), \
       mock.patch.object(hf_gguf, "load_gguf_checkpoint", load):
    yield
