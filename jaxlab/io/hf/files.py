"""A Hugging Face checkpoint directory: its config.json and safetensors.

A directory holds `config.json` and either `model.safetensors` or a sharded
`model.safetensors.index.json` plus the shards it names. Tensors are read
one at a time with `safetensors.safe_open(framework="numpy")` (bfloat16
arrives as an `ml_dtypes.bfloat16` array), so torch is never imported.
`tensor_reader` gives the `get_tensor(name, shape)` that the fill loop
(`jaxlab.io.hf.fill`) calls; `write` writes a directory back.
"""

from collections.abc import Callable, Iterator, Mapping
import contextlib
import json
import os
from typing import Any

from safetensors import safe_open
import safetensors.numpy

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def read_config(path: str | os.PathLike) -> dict[str, Any]:
  """The parsed config.json of checkpoint directory `path`."""
  path = os.fspath(path)
  config_path = os.path.join(path, CONFIG_FILE)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"checkpoint directory {path} does not exist")
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{config_path} not found: a HF checkpoint "
                            "directory needs a config.json")
  try:
    with open(config_path, encoding="utf-8") as fh:
      hf = json.load(fh)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{config_path}: not valid JSON ({e})") from None
  if not isinstance(hf, dict):
    raise ValueError(f"{config_path}: expected a JSON object, got "
                     f"{type(hf).__name__}")
  return hf


def open_safetensors(file: str):
  """`safe_open` whose errors (truncated, corrupt header) name the file."""
  try:
    return safe_open(file, framework="numpy")
  except Exception as e:  # safetensors raises its own SafetensorError
    raise ValueError(f"{file}: not a readable safetensors file ({e}); the "
                     "download may be incomplete") from None


def weight_files(path: str) -> dict[str, str]:
  """HF tensor name -> file path (single file or sharded index)."""
  index_path = os.path.join(path, INDEX_FILE)
  single_path = os.path.join(path, SINGLE_FILE)
  if os.path.exists(index_path):
    with open(index_path) as fh:
      index = json.load(fh)
    if "weight_map" not in index:
      raise ValueError(f"{index_path}: missing field 'weight_map'")
    files = {}
    for name, shard in index["weight_map"].items():
      shard_path = os.path.join(path, shard)
      if not os.path.exists(shard_path):
        raise FileNotFoundError(
            f"shard file {shard_path} (listed in {index_path} for tensor "
            f"{name!r}) does not exist")
      files[name] = shard_path
    return files
  if os.path.exists(single_path):
    with open_safetensors(single_path) as fh:
      return {name: single_path for name in fh.keys()}
  found = sorted(os.listdir(path))
  raise FileNotFoundError(
      f"no {SINGLE_FILE} or {INDEX_FILE} in {path} (found: {found}); only "
      "safetensors checkpoints are supported")


@contextlib.contextmanager
def tensor_reader(path: str, files: Mapping[str, str] | None = None,
                  rename: Callable[[str], str] | None = None
                  ) -> Iterator[Callable[[str, tuple[int, ...]], Any]]:
  """`get_tensor(name, shape)` over the safetensors of directory `path`.

  Each call opens the tensor's file once (kept open until the context
  exits), checks its shape in the header against `shape` before reading
  it, and returns the host numpy array; a missing tensor, another shape or
  a file cut short raise a ValueError naming the file.

  Args:
    path: the checkpoint directory.
    files: its `weight_files` (read here when None).
    rename: the name in these files of a name asked for (e.g. a prefix of a
      multimodal checkpoint); the identity when None.
  """
  files = weight_files(path) if files is None else files
  where_index = os.path.join(path, INDEX_FILE if os.path.exists(
      os.path.join(path, INDEX_FILE)) else SINGLE_FILE)
  handles: dict[str, Any] = {}

  def get_tensor(name: str, hf_shape: tuple[int, ...]):
    """One HF tensor (host numpy), its name and shape checked."""
    if rename is not None:
      name = rename(name)
    if name not in files:
      raise ValueError(f"{where_index}: missing tensor {name!r}")
    file = files[name]
    if file not in handles:
      handles[file] = open_safetensors(file).__enter__()
    found_shape = tuple(handles[file].get_slice(name).get_shape())
    if found_shape != tuple(hf_shape):
      raise ValueError(
          f"{file}: tensor {name!r} has shape {found_shape}, expected "
          f"{tuple(hf_shape)} from {CONFIG_FILE}")
    try:
      return handles[file].get_tensor(name)
    except Exception as e:  # a shard cut short after its header
      raise ValueError(f"{file}: cannot read tensor {name!r} ({e}); the "
                       "file may be truncated") from None

  try:
    yield get_tensor
  finally:
    for fh in handles.values():
      fh.__exit__(None, None, None)


def write(path: str | os.PathLike, tensors: Mapping[str, Any],
          config: Mapping[str, Any]) -> str:
  """Writes `config.json` and `model.safetensors` (`tensors`: HF name ->
  numpy array, dtypes kept) into directory `path`; returns it."""
  path = os.fspath(path)
  os.makedirs(path, exist_ok=True)
  safetensors.numpy.save_file(dict(tensors), os.path.join(path, SINGLE_FILE),
                              metadata={"format": "pt"})
  with open(os.path.join(path, CONFIG_FILE), "w") as fh:
    json.dump(config, fh, indent=2)
  return path
