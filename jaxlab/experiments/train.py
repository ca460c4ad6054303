"""Experiment "train": the generic trainer on `config.model` / `config.data`.

Writes `WORKDIR/results.json` (`jaxlab.experiments.results` schema: command,
git commit, package versions, machine, config; the final train and eval
metrics at its top level; `"preempted": true` and the metrics of the last
step when Ctrl-C / SIGTERM stopped it) and a loss-curve PNG; with `config.export_dir`,
also the trained model as a Hugging Face checkpoint (merged LoRA, the
checkpoint's tokenizer files).
"""

import io
import os
import time
from typing import Any

import jax

from jaxlab import plotting
from jaxlab.experiments import results as results_lib
from jaxlab.io import paths
from jaxlab.train import metrics as metrics_lib
from jaxlab.train import trainer


def plot_loss(workdir: str) -> str | None:
  """Saves WORKDIR/loss.png from metrics.jsonl (None if nothing logged)."""
  rows = metrics_lib.read_metrics(workdir)
  tr = [(r["step"], r["loss"]) for r in rows if "loss" in r]
  ev = [(r["step"], r["eval/loss"]) for r in rows if "eval/loss" in r]
  if not tr:
    return None
  plt = plotting.pyplot()
  fig, ax = plt.subplots(figsize=(5, 3.2))
  ax.plot(*zip(*tr), label="train")
  if ev:
    ax.plot(*zip(*ev), "o-", label="eval")
  ax.set_xlabel("step")
  ax.set_ylabel("loss (nats/token)")
  ax.legend()
  fig.tight_layout()
  path = paths.join(workdir, "loss.png")  # a local path or a gs:// URL
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=100)
  plt.close(fig)
  paths.write_bytes(path, buf.getvalue())
  return path


def export(config, ts) -> str:
  """Writes the trained model (LoRA merged) as a HF checkpoint at
  `config.export_dir`, with the checkpoint tokenizer's files (`data.tokenizer`
  auto/hf), so that transformers loads it with the same logits."""
  from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
  if jax.process_count() > 1:
    raise ValueError("export_dir: exporting from a multi-process run is not "
                     "supported; export from a single-process restore")
  cfg = ts.spec.config if ts.spec is not None else None
  if cfg is None or not hasattr(cfg, "vocab_size"):
    raise ValueError("export_dir: only decoder models export to a HF "
                     "checkpoint")
  tok = export_tokenizer(config)  # before writing anything
  path = hf.save(ts.model(), cfg, config.export_dir)
  if tok is not None:
    from jaxlab.data import hf_tokenizer  # pylint: disable=g-import-not-at-top
    hf_tokenizer.save(tok, path)
  return path


def export_tokenizer(config):
  """The tokenizer `export` writes beside the weights (`data.tokenizer`
  auto: the checkpoint's own, a GGUF's converted; hf: `tokenizer_path`),
  None for the others."""
  from jaxlab.data import tokenizers  # pylint: disable=g-import-not-at-top
  from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
  if config.data.tokenizer == "auto" and config.init_from:
    return pretrained.tokenizer(config.init_from)
  if config.data.tokenizer in ("auto", "hf"):
    return tokenizers.build(config.data.tokenizer,
                            path=config.data.tokenizer_path,
                            field="data.tokenizer")
  return None


def check_export(config) -> None:
  """Fails fast, before the first step, on what `export` would fail on at
  the end: the target (a directory that can be created or is empty and
  writable) and the tokenizer (built now, so a GGUF's converts now)."""
  if jax.process_count() > 1:
    raise ValueError("export_dir: exporting from a multi-process run is not "
                     "supported; export from a single-process restore")
  out = os.path.abspath(config.export_dir)
  if os.path.isfile(out):
    raise ValueError(f"export_dir={config.export_dir!r} is a file; give a "
                     "directory")
  parent = out
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.access(parent, os.W_OK):
    raise ValueError(f"export_dir={config.export_dir!r}: {parent} is not "
                     "writable")
  export_tokenizer(config)


def run(config, workdir: str) -> dict[str, Any]:
  start_time = time.time()
  if config.export_dir:
    check_export(config)
  out = trainer.train(config, workdir)
  ts = out.pop("train_state", None)
  data_prov = out.pop("data", None)
  export_error = None
  if config.export_dir and not out["preempted"] and jax.process_index() == 0:
    try:
      out["exported_to"] = export(config, ts)
    except Exception as e:  # pylint: disable=broad-except
      # The trained checkpoint and results.json are kept either way.
      export_error = e
      out["export_error"] = f"{type(e).__name__}: {e}"
  rows = metrics_lib.read_metrics(workdir)
  losses = [r["loss"] for r in rows if "loss" in r]
  if losses:
    out["first_logged_loss"] = losses[0]
  # Only process 0 writes: every process of a multi-host run shares WORKDIR.
  # A preempted run (Ctrl-C / SIGTERM) writes its metrics so far, with
  # "preempted": true; re-running resumes and overwrites it.
  if jax.process_index() == 0:
    if not out["preempted"]:
      out["plot"] = plot_loss(workdir)
    results_lib.write(workdir, "train", fields=out, config=config,
                      start_time=start_time, data=data_prov)
  if export_error is not None:
    raise ValueError(
        f"training finished but the export to {config.export_dir} failed "
        f"({out['export_error']}); the trained checkpoint is in "
        f"{out.get('checkpoint_dir')} and results.json in {workdir}. Export "
        "again with jaxlab.io.pretrained.load(WORKDIR) and jaxlab.io.hf.save, "
        "or fix the cause and re-run the same command (it resumes at the "
        "end and exports)") from export_error
  return out
