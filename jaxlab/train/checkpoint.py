"""Checkpoints with orbax: train state + grain iterator + step/RNG metadata.

One checkpoint (a numbered directory under `WORKDIR/checkpoints/`) holds
three items saved together:
  state: the NNX state of (model, optimizer), every array sharded as trained;
  data:  each process's grain iterator state (`process_<i>-of-<n>.json`);
  meta:  JSON with step, RNG key data, the shapes of every state array (so a
         workdir from another model is refused with a clear message) and
         free-form info (model config).
Saves are asynchronous and keep the last N. Restores target the *current*
abstract state with its shardings, so a checkpoint written on one mesh
restores onto any other.
"""

from typing import Any

from absl import logging
from etils import epath
import grain
import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxlab.io import paths


def _path_str(path) -> str:
  return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def state_shapes(state: Any) -> dict[str, list[int]]:
  """`{"model/layers/0/attn/q_dnh/value": [D, N, H], ...}` of a state."""
  flat = jax.tree_util.tree_flatten_with_path(state)[0]
  return {_path_str(p): list(np.shape(x)) for p, x in flat}


class Checkpointer:
  """Save / restore of (state, data iterator, meta) in `directory`."""

  def __init__(self, directory: str, *, keep: int = 3,
               async_save: bool = True):
    # A local directory (absolute) or a URL such as gs://BUCKET/run/
    # checkpoints, handed to orbax as an epath unchanged.
    self.directory = paths.resolve(directory)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=True,
        enable_async_checkpointing=async_save)
    self._mngr = ocp.CheckpointManager(
        epath.Path(self.directory), options=options,
        item_names=("state", "data", "meta"))

  def latest_step(self) -> int | None:
    return self._mngr.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._mngr.all_steps())

  def save(self, step: int, state: Any, data_iter: Any,
           meta: dict[str, Any]) -> None:
    meta = dict(meta, step=int(step), shapes=state_shapes(state))
    args = {"state": ocp.args.StandardSave(state),
            "meta": ocp.args.JsonSave(meta)}
    if data_iter is not None:
      args["data"] = grain.checkpoint.CheckpointSave(data_iter)
    self._mngr.save(step, args=ocp.args.Composite(**args), force=True)

  def read_meta(self, step: int) -> dict[str, Any]:
    out = self._mngr.restore(
        step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return out["meta"]

  def check_compatible(self, step: int, abstract_state: Any) -> dict:
    """Raises ValueError if the checkpoint's arrays differ from the model's."""
    meta = self.read_meta(step)
    saved = meta.get("shapes", {})
    want = state_shapes(abstract_state)
    if saved != want:
      diffs = [f"{k}: checkpoint {saved.get(k)} vs model {want.get(k)}"
               for k in sorted(set(saved) | set(want))
               if saved.get(k) != want.get(k)]
      raise ValueError(
          f"the checkpoint at {self.directory}/{step} was written by a model "
          f"of another shape ({len(diffs)} arrays differ, e.g. "
          f"{'; '.join(diffs[:3])}). Use a fresh --workdir or the matching "
          "model config; the existing checkpoint is left untouched.")
    return meta

  def restore(self, step: int, abstract_state: Any,
              data_iter: Any = None) -> tuple[Any, dict[str, Any]]:
    """Restores into `abstract_state` (ShapeDtypeStructs with shardings).

    `data_iter` is updated in place when the checkpoint holds this process's
    iterator state, i.e. it was written by as many processes as run now;
    otherwise it is left alone and `meta["data_restored"]` is False (the
    caller positions it). All processes must call this together. Returns
    (state, meta).
    """
    meta = self.check_compatible(step, abstract_state)
    args = {"state": ocp.args.StandardRestore(abstract_state),
            "meta": ocp.args.JsonRestore()}
    data_restored = (data_iter is not None and
                     epath.Path(self._data_file(step)).exists())
    if data_restored:
      args["data"] = grain.checkpoint.CheckpointRestore(data_iter)
    out = self._mngr.restore(step, args=ocp.args.Composite(**args))
    logging.info("restored checkpoint step %d from %s", step, self.directory)
    return out["state"], dict(out["meta"], data_restored=data_restored)

  def _data_file(self, step: int) -> str:
    """This process's grain iterator file within checkpoint `step`."""
    return paths.join(self.directory, str(step), "data",
                        f"process_{jax.process_index()}-of-"
                        f"{jax.process_count()}.json")

  def reached_preemption(self, step: int) -> bool:
    """Whether JAX's multi-host preemption sync point was reached."""
    return self._mngr.reached_preemption(step)

  def wait(self) -> None:
    self._mngr.wait_until_finished()

  def close(self) -> None:
    self._mngr.wait_until_finished()
    self._mngr.close()
