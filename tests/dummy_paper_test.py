"""A new paper is new files only: the launcher, the notebooks and the report
find them, with no edit to any existing file (issue 28).

The test writes a dummy paper into a temporary plugin directory laid out like
the `jaxlab` package (`JAXLAB_PLUGIN_PATH`, docs/contributing.md), exactly
the files docs/contributing.md lists: a model builder
(`models/dummy_bigram.py`), a loss (`objectives/dummy_nll.py`), a data source
(`data/dummy_counting.py`), a tokenizer (`data/dummy_tokenizer.py`), a config with a `tiny` preset, an experiment,
a notebook with its builder and a doc with front matter. Then:

* the launcher lists and resolves the config (`--config=dummy_paper:tiny`),
  checks its loss name and runs its experiment, which reaches the model,
  loss, data source and tokenizer by name only; the loss it returns is the hand value
  (a bigram table of `scale` on i -> i+1 and counting data: every target
  has logit `scale`, the other V-1 logits 0, so the NLL is
  log(e^scale + V - 1) - scale);
* the notebook discovery of tests/colabs/setup_cell_test.py finds the
  notebook and its builder;
* the report's paper map gets the paper's row.

Everything registered is removed afterwards (registries, sys.modules,
package paths). In-process, nothing compiled: about a second.
"""

import importlib
import math
import os
import shutil
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest
import nbformat

from jaxlab import main
from jaxlab import registry
from jaxlab.data import pipeline
from jaxlab.data import tokenizers
from jaxlab.experiments import report
from jaxlab.models import registry as model_registry
from jaxlab.testing import notebooks
from jaxlab.train import losses

FILES = {
    "models/dummy_bigram.py": '''
        """A bigram table: logits of token i are row i (dummy paper)."""
        import jax.numpy as jnp
        from flax import nnx
        from jaxlab.models import registry

        class Bigram(nnx.Module):
          def __init__(self, vocab_size, scale):
            idx = jnp.arange(vocab_size)
            self.table = nnx.Param(scale * jnp.zeros(
                (vocab_size, vocab_size)).at[idx, (idx + 1) % vocab_size]
                .set(1.0))

          def __call__(self, ids):
            return self.table[...][ids]

        @registry.register("dummy_bigram")
        def build(model_cfg, *, vocab_size=None, seed=0):
          del seed
          return registry.ModelSpec(factory=lambda: Bigram(
              vocab_size, float(model_cfg.get("scale", 1.0))))
        ''',
    "objectives/dummy_nll.py": '''
        """Token-mean next-token NLL of a model returning logits."""
        import jax
        import jax.numpy as jnp
        from jaxlab.train import losses

        @losses.register("dummy_nll")
        def dummy_nll(model, batch, *, rng, config=None):
          del rng, config
          logp = jax.nn.log_softmax(model(batch["inputs"]), axis=-1)
          nll = -jnp.take_along_axis(logp, batch["targets"][..., None],
                                     axis=-1)
          return nll.mean(), {}
        ''',
    "data/dummy_counting.py": '''
        """Counting rows (a, a+1, ..., a+T): every target is its input + 1."""
        import numpy as np
        from jaxlab.data import pipeline

        @pipeline.register_source("dummy_counting")
        def counting(data_cfg, *, seq_len, tokenizer):
          del tokenizer
          rows = []
          for i in range(int(data_cfg.num_docs)):
            ids = np.arange(1 + i % 10, 1 + i % 10 + seq_len + 1,
                            dtype=np.int32)
            rows.append({"inputs": ids[:-1], "targets": ids[1:]})
          return rows, None
        ''',
    "data/dummy_tokenizer.py": '''
        """Ids 0..63 as themselves (a tokenizer registered by name)."""
        from jaxlab.data import tokenizer_base
        from jaxlab.data import tokenizers

        class Ids64(tokenizer_base.Tokenizer):
          vocab_size, bos_id, eos_id, pad_id = 64, 61, 62, 63

          def encode(self, text, *, add_bos=False, add_eos=False):
            return [int(t) for t in text.split()]

          def decode(self, ids):
            return " ".join(str(int(i)) for i in ids)

        @tokenizers.register("dummy_ids64")
        def ids64(*, path, checkpoint):
          del path, checkpoint
          return Ids64()
        ''',
    "configs/dummy_paper.py": '''
        """The dummy paper: a bigram model on counting data."""
        import ml_collections
        from jaxlab.configs import common

        def get_config(arg=None):
          args = common.parse_arg(arg, tiny=False)
          c = common.base_config()
          c.experiment = "dummy_paper"
          c.model = ml_collections.ConfigDict({"name": "dummy_bigram",
                                               "scale": 2.0})
          c.data = ml_collections.ConfigDict(
              {"source": "dummy_counting", "num_docs": 64,
               "tokenizer": "dummy_ids64"})
          c.loss.name = "dummy_nll"
          c.train.update(seq_len=32, batch_size=16)
          if args.tiny:
            c.data.num_docs = 6
            c.train.update(seq_len=8, batch_size=4)
          return c
        ''',
    "experiments/dummy_paper.py": '''
        """Composition only: data source, model and loss, all by name."""
        import jax
        import numpy as np
        from jaxlab.data import pipeline
        from jaxlab.data import tokenizers
        from jaxlab.models import registry
        from jaxlab.train import losses

        def run(config, workdir):
          del workdir
          tok = tokenizers.build(config.data.tokenizer)
          train, _ = pipeline.lm_sources(
              config.data, seq_len=int(config.train.seq_len), tokenizer=tok)
          model = registry.get_spec(config.model,
                                    vocab_size=tok.vocab_size).factory()
          rows = train[:int(config.train.batch_size)]
          batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
          loss, _ = losses.get(config.loss.name)(
              model, batch, rng=jax.random.key(0), config=config.loss)
          return {"loss": float(loss), "vocab_size": tok.vocab_size,
                  "rows": len(rows)}
        ''',
    "colabs/_build_dummy_paper_colab.py": '''
        """Writes colabs/dummy_paper.ipynb."""
        import os
        import sys
        import nbformat
        from jaxlab.testing import notebooks
        sys.path.insert(0, notebooks.COLABS)
        import _setup_cell

        def build():
          return _setup_cell.notebook([
              ("md", "# The dummy paper"),
              ("code", "from jaxlab.configs import dummy_paper")])

        if __name__ == "__main__":
          nbformat.write(build(), os.path.join(
              os.path.dirname(os.path.abspath(__file__)), "dummy_paper.ipynb"))
        ''',
    "docs/papers/dummy_paper.md": '''
        ---
        papers:
        - id: Z9
          title: The dummy paper
          code: jaxlab/models/dummy_bigram.py, jaxlab/objectives/dummy_nll.py
          config: dummy_paper
          colab: colabs/dummy_paper.ipynb
          status: not shown at this scale
          verdict: a test fixture, nothing measured.
        ---
        # The dummy paper
        ''',
}


class DummyPaperTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.plugin = tempfile.mkdtemp()
    cls.addClassCleanup(shutil.rmtree, cls.plugin, ignore_errors=True)
    for rel, text in FILES.items():
      path = os.path.join(cls.plugin, rel)
      os.makedirs(os.path.dirname(path), exist_ok=True)
      with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())
    # As a contributor would: run the builder to write the notebook.
    builder = notebooks.load_builder(os.path.join(
        cls.plugin, "colabs", "_build_dummy_paper_colab.py"))
    nbformat.write(builder.build(), os.path.join(cls.plugin, "colabs",
                                                 "dummy_paper.ipynb"))
    env = mock.patch.dict(os.environ, {registry.PLUGIN_ENV: cls.plugin})
    env.start()
    cls.addClassCleanup(env.stop)
    cls.addClassCleanup(cls._forget)

  @classmethod
  def _forget(cls):
    """Removes what the dummy paper registered and where it was found."""
    for reg, name in ((model_registry._BUILDERS, "dummy_bigram"),  # pylint: disable=protected-access
                      (losses.LOSSES, "dummy_nll"),
                      (pipeline.SOURCES, "dummy_counting"),
                      (tokenizers.TOKENIZERS, "dummy_ids64")):
      reg._items.pop(name, None)  # pylint: disable=protected-access
    for name in [m for m in sys.modules if "dummy_" in m]:
      del sys.modules[name]
    for package in ("jaxlab.models", "jaxlab.objectives", "jaxlab.data",
                    "jaxlab.experiments"):
      path = importlib.import_module(package).__path__
      path[:] = [p for p in path if not p.startswith(cls.plugin)]

  def test_the_launcher_finds_and_runs_it(self):
    self.assertIn("dummy_paper", main.packaged_configs())
    self.assertIn("dummy_paper", main.available_experiments())
    path = main.resolve_config_arg("dummy_paper:tiny")
    self.assertEqual(path, os.path.join(self.plugin, "configs",
                                        "dummy_paper.py") + ":tiny")
    self.assertIn("Presets (--config=dummy_paper:P1,P2,...):\n  tiny ",
                  main.config_help("dummy_paper:tiny"))
    _, config, _ = main._load_config(*path.split(":"))  # pylint: disable=protected-access
    main.check_loss(config)  # the loss is found by name
    self.assertIn("dummy_nll", losses.available())
    result = main.run_experiment(config, tempfile.mkdtemp(dir=self.plugin))
    v, scale = result["vocab_size"], 2.0
    self.assertEqual((v, result["rows"]), (64, 4))  # the dummy tokenizer's
    # Every target is the table's `scale` entry; the other V-1 logits are 0.
    self.assertAlmostEqual(result["loss"],
                           math.log(math.exp(scale) + v - 1) - scale,
                           places=5)
    self.assertIn("dummy_bigram", model_registry.available())
    self.assertIn("decoder", model_registry.available())  # the old ones stay

  def test_the_notebook_test_finds_the_notebook_and_its_builder(self):
    found = notebooks.builders()  # what tests/colabs/setup_cell_test.py runs
    builder = os.path.join(self.plugin, "colabs",
                           "_build_dummy_paper_colab.py")
    self.assertEqual(found["dummy_paper.ipynb"], (builder, "build"))
    self.assertIn("pmc_unlearning.ipynb", found)  # and the checkout's
    self.assertEqual(set(found), set(notebooks.notebooks()))
    committed = nbformat.read(notebooks.notebooks()["dummy_paper.ipynb"],
                              as_version=4)
    built = notebooks.load_builder(builder).build()
    self.assertEqual([(c.cell_type, c.source) for c in committed.cells],
                     [(c.cell_type, c.source) for c in built.cells])

  def test_the_report_puts_it_on_the_paper_map(self):
    with mock.patch.dict(os.environ, {registry.PLUGIN_ENV: ""}):
      before = report.render_paper_map().splitlines()
    after = report.render_paper_map().splitlines()
    rows = [r for r in after if r not in before]
    self.assertLen(rows, 2)  # the count line and the paper's row
    row = next(r for r in rows if r.startswith("| Z9. "))
    self.assertIn("| Z9. The dummy paper | not shown at this scale |", row)
    self.assertIn("`dummy_paper`", row)
    self.assertIn("[dummy_paper.ipynb](", row)


if __name__ == "__main__":
  absltest.main()
