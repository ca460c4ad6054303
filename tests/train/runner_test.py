"""The generic step runner: parity with a hand-written update, reuse."""

from absl.testing import absltest
import chex
from flax import nnx

from jaxlab.data import tokenizers
from jaxlab.models import decoder
from jaxlab.objectives import self_generated as sg
from jaxlab.train import losses as losses_lib
from jaxlab.train import optim as optim_lib
from jaxlab.train import runner


class StepRunnerTest(absltest.TestCase):

  def test_matches_a_hand_written_update_and_reuses_the_step(self):
    tok = tokenizers.ByteTokenizer()
    cfg = decoder.DecoderConfig(vocab_size=tok.vocab_size, dim=32,
                                num_layers=1, num_heads=2, num_kv_heads=1,
                                mlp_dim=64)
    data = sg.encode_for_lm(tok, ["Q: a\nA: ", "Q: bb\nA: "],
                            ["one two", "three"], max_len=24)
    ocfg = runner.optim_config(lr=1e-2, warmup_steps=1, weight_decay=0.1,
                               schedule="cosine", clip_norm=0.5)
    ref = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(ref, optim_lib.make_optimizer(ocfg, 3),
                        wrt=nnx.Param)
    loss_fn = losses_lib.get("lm")
    for _ in range(3):
      grads = nnx.grad(lambda m: loss_fn(m, data, rng=None)[0])(ref)
      opt.update(ref, grads)
    want = nnx.state(ref, nnx.Param)
    runners = []
    for _ in range(2):  # the second runner reuses the compiled step
      model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
      step_runner = runner.StepRunner(model, loss="lm", loss_config=None,
                                      optim=ocfg, steps=3, seed=0)
      for step in range(3):
        step_runner.step(dict(data), step)
      step_runner.write_back()
      got = nnx.state(model, nnx.Param)
      chex.assert_trees_all_close(got, want, atol=1e-5, rtol=1e-5)
      runners.append(step_runner)
    self.assertIs(runners[0]._step, runners[1]._step)  # pylint: disable=protected-access


if __name__ == "__main__":
  absltest.main()
