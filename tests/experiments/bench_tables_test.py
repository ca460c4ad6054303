"""docs/benchmarks.md's CPU benchmark tables are the ones the committed JSON makes."""

import contextlib
import io
import os
import re

from absl.testing import absltest

from jaxlab.experiments.bench import _tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class BenchTablesTest(absltest.TestCase):

  def test_readme_block_equals_generated_tables(self):
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
      readme = f.read()
    m = re.search(r"<!-- bench-tables:[^>]*-->\n(.*?)\n<!-- /bench-tables -->",
                  readme, re.S)
    self.assertIsNotNone(m, "docs/benchmarks.md lacks the bench-tables markers")
    with contextlib.redirect_stdout(io.StringIO()):
      text = _tables.main([f"--dir={os.path.join(ROOT, 'docs', 'bench')}"])
    self.assertEqual(m.group(1).strip(), text.strip(),
                     "docs/benchmarks.md's tables differ from docs/bench JSON: "
                     "rerun python -m jaxlab.experiments.bench._tables")

  def test_profile_table_groups_parts(self):
    decode = {"results": [{"size": "56m", "batch": 8, "jaxlab": {"profile": {
        "by_module": {"jit__decode": {"by_part": {
            "lm_head": 0.3, "mlp": 0.4, "attention_qkv_proj": 0.05,
            "attention_out_proj": 0.05, "kv_cache_write": 0.1,
            "other": 0.1}}},
        "by_op_kind": {"dot": 0.85}}}}]}
    train = {"results": [{"size": "56m", "batch": 8, "seq_len": 256,
                          "jax": {"profile": {
                              "by_part": {"lm_head": 0.2, "cross_entropy": 0.05,
                                          "mlp": 0.4, "optimizer": 0.05,
                                          "norm": 0.3},
                              "by_op_kind": {"dot": 0.7}}}}]}
    lines = _tables.profile_table(decode, train).splitlines()
    self.assertEqual(lines[-2], "| decode loop 56m B=8 | 30% | 40% | 10% | "
                     "10% | 0% | 10% | 85% |")
    self.assertEqual(lines[-1], "| train step 56m 8x256 | 25% | 40% | 0% | "
                     "0% | 5% | 30% | 70% |")
    self.assertEqual(_tables.profile_table({"results": []}, None), "")

  def test_gpu_table_rows_by_hand(self):
    rep = {"device": "GPU", "jax": "0.1", "spec_peak_tflops": 1000.0,
           "measured_matmul_peak_tflops": 500.0, "train": [
               {"size": "s", "params": 2_000_000, "batch": 4, "seq_len": 8,
                "remat": True, "attention_impl": None, "tokens_per_s": 12345.0,
                "mfu_vs_spec_peak": 0.25, "mfu_vs_measured_peak": 0.5,
                "temp_bytes": 3e9, "peak_bytes_in_use": 4.25e9},
               {"size": "s", "remat": False, "attention_impl": "cudnn",
                "error": "ValueError('bad')"}]}
    lines = _tables.gpu_table([("h200_run7.json", rep)]).splitlines()
    self.assertIn("peak 500 TFLOP/s, spec 1000", lines[0])
    self.assertEqual(lines[4], "| run7 | s | 2M | 4x8 | default | True | 12k | "
                     "25.0% | 50.0% | 3.0 | 4.2 |")
    self.assertEqual(lines[5], "| run7 | s | - | - | cudnn | False | "
                     "failed: ValueError | - | - | - | - |")
    self.assertEqual(_tables.gpu_table([]), "")

  def test_data_table_rows_by_hand(self):
    rep = {"seq_len": 2048, "batch": 8,
           "machine": {"cpu": "X", "cpu_count": 2, "loadavg_before": [1.0]},
           "raw": {"texts": 10, "tokens": 5000, "tokens_per_s": 1.6e6,
                   "encode_loop": {"tokens_per_s": 6e5}},
           "step": {"chips_per_host": 4, "peak_bf16_flops_per_chip": 459e12,
                    "shape": "llama3_8b", "step_seq_len": 8192,
                    "flops_per_token": 5.8e10, "host_tokens_per_s": 32000.0},
           "pipeline": [{"workers": 2, "non_pad_tokens_per_s": 8e5,
                         "slot_tokens_per_s": 1e6, "packing_efficiency": 0.8,
                         "ratio_to_raw": 0.5}]}
    lines = _tables.data_table(rep).splitlines()
    # 8e5 / 32000 = 25 hosts' worth.
    self.assertEqual(lines[4], "| 2 | 800000 | 1000000 | 80% | 0.50 | 25.0 |")
    self.assertIn("on 32000 tok/s", lines[-1])


if __name__ == "__main__":
  absltest.main()
