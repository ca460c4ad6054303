r"""AOT-compile a config's train step for a TPU topology, on this (CPU) host.

    python -m jaxlab.experiments.compile --config=lm_tiny:tiny \
        --topology=v5e:2x2 --config.mesh.data=1 --config.mesh.fsdp=-1
    python -m experiments.compile --config=jaxlab/configs/lm_tiny.py \
        --topology=v5p:2x2x4 --num_slices=2 --out=/tmp/aot.json

Nothing runs and no TPU is needed: libtpu (`pip install 'jaxlab[tpu]'`)
builds compile-only devices of the topology (`--num_slices` copies of it
joined over DCN: the `data` mesh axis spans them), the mesh comes from
`config.mesh`, and the train step (`trainer.make_train_step` on the
abstract state of `trainer.build`) is lowered and compiled. Prints, per
chip: argument / output / temporary / total bytes against the HBM, the
model FLOPs of a step, the collectives of the optimised HLO, the custom
kernels, the compile time and a roofline lower bound on the step time; a
config whose experiment samples (a `max_new_tokens` field, or an
`aot_sampler` section {batch, prompt_len, max_new_tokens}) also gets its
sampler's prefill and decode programs. `--out` writes the report as JSON.

A program that does not fit the chip's HBM is one `error:` line with the
numbers and the knobs to turn (exit status 1; the JSON then holds `error`):
libtpu's own out-of-memory error, or, for a program libtpu compiled (its
check counts the temporaries only), arguments + temporaries over the HBM.
`--model_from=init_from` compiles a paper preset with the architecture of
the checkpoint `config.init_from` names (its config.json; no weights are
read) instead of the preset's `SHAPES` entry, keeping the preset's dtypes,
remat, image size and batch.
`--config` takes a packaged config name (`lm_tiny:tiny`, the files of
jaxlab/configs/) or a path, and `--config.x.y=v` overrides as for
`python -m jaxlab.main`.
"""

import json
import os
import sys

from jaxlab import configs as configs_lib
from jaxlab import experiments as experiments_lib
from jaxlab.train import aot

# Before JAX initialises: libtpu must not look for real chips.
aot.configure_host_env()

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

_FLAGS = {}


def _define_flags() -> None:
  """The command-line flags, defined when run as a program (so importing
  `run` defines none, e.g. next to `jaxlab.main`'s --config)."""
  if _FLAGS:
    return
  _FLAGS["config"] = config_flags.DEFINE_config_file(
      "config", None,
      "A packaged config by name (NAME[:preset], e.g. lm_tiny:tiny) or a "
      "path to a config file (PATH.py[:preset]).", lock_config=True)
  _FLAGS["topology"] = flags.DEFINE_string(
      "topology", None, "TPU topology: v5e:2x2, v5p:2x2x4, v4:2x2x1, "
      "v6e:4x4, ... (chip:shape, as libtpu names it). Default: the "
      "config's `scale.topology` (paper-scale presets).")
  _FLAGS["num_slices"] = flags.DEFINE_integer(
      "num_slices", 1, "Slices of --topology joined over DCN (multi-slice); "
      "the mesh's data axis spans them.")
  _FLAGS["out"] = flags.DEFINE_string("out", None,
                                      "Write the report here as JSON.")
  _FLAGS["sampler"] = flags.DEFINE_bool(
      "sampler", True, "Also compile the sampler's prefill and decode for a "
      "config that samples.")
  _FLAGS["model_from"] = flags.DEFINE_enum(
      "model_from", "preset", ("preset", "init_from"),
      "A paper preset's model shapes: the preset's (the released "
      "checkpoint's config.json values, `configs._scale.SHAPES`) or those "
      "of the checkpoint config.init_from names (its config.json read, no "
      "weights; a Hub id fetches the config.json alone).")
  _FLAGS["hlo_dir"] = flags.DEFINE_string(
      "hlo_dir", None, "Write each program's optimised HLO here "
      "(<program>.hlo.txt).")
  flags.mark_flags_as_required(["config"])


def run(config, topology: str | None, num_slices: int = 1, *,
        sampler: bool = True, out: str | None = None,
        hlo_dir: str | None = None, model_from: str = "preset") -> dict:
  """Compiles `config` for the topology; prints the table, writes `out`.

  `model_from="init_from"`: a paper preset's model takes the architecture
  of the checkpoint `config.init_from` names (`_scale.from_checkpoint`;
  the report's `scale.model_from` says which config.json).
  """
  experiments_lib.import_loss_modules()
  if model_from not in ("preset", "init_from"):
    raise ValueError(f"model_from={model_from!r}; valid: preset, init_from")
  if model_from == "init_from":
    config = with_checkpoint_model(config)
  scale = config.get("scale")
  if topology is None:
    if scale is None:
      raise ValueError("--topology is required (or a config with a paper-"
                       "scale preset, whose config.scale names one)")
    topology, num_slices = scale.topology, int(scale.num_slices)
  try:
    report = aot.compile_config(config, topology, num_slices=num_slices,
                                sampler_too=sampler, hlo_dir=hlo_dir)
  except aot.HbmOomError as e:
    report = {"topology": topology, "num_slices": num_slices,
              "error": str(e), "fits": False}
    if out:
      _write(out, report)
    raise
  print(aot.format_report(report), flush=True)
  over = aot.overflow_message(report)
  report["fits"] = over is None
  if over:
    report["error"] = over
  if out:
    _write(out, report)
    print(f"Report: {out}", flush=True)
  if over:
    raise aot.HbmOomError(over)
  return report


def with_checkpoint_model(config):
  """A copy of paper preset `config` whose model is `config.init_from`'s
  architecture (`jaxlab.io.pretrained.checkpoint_config`)."""
  from jaxlab.configs import _scale  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  if not config.get("init_from", ""):
    raise ValueError("--model_from=init_from needs config.init_from (a "
                     "checkpoint directory, a Hub id or a GGUF file)")
  if config.get("scale") is None:
    raise ValueError("--model_from=init_from is for a paper-scale preset "
                     "(NAME:paper); this config has no config.scale")
  ckpt, where = pretrained.checkpoint_config(config.init_from)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    _scale.from_checkpoint(config, ckpt, where)
  return config


def _write(path: str, report: dict) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
    f.write("\n")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  f = {k: v.value for k, v in _FLAGS.items()}
  try:
    run(f["config"], f["topology"], f["num_slices"], sampler=f["sampler"],
        out=f["out"], hlo_dir=f["hlo_dir"], model_from=f["model_from"])
  except aot.HbmOomError as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(1)
  except (ValueError, FileNotFoundError) as e:  # a missing checkpoint too
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(2)


def _entry():
  try:
    sys.argv = configs_lib.resolve_flag(sys.argv)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  _define_flags()
  app.run(main)


if __name__ == "__main__":
  _entry()
