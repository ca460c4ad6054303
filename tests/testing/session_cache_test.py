"""`jaxlab.testing.session_cache.build_once`: built once, complete or absent."""

import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest

from jaxlab.testing import session_cache


class BuildOnceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root)
    patcher = mock.patch.dict(os.environ,
                              {session_cache.SCRATCH_ENV: self.root})
    patcher.start()
    self.addCleanup(patcher.stop)

  def test_written_once_then_read(self):
    calls = []

    def write(d):
      calls.append(d)
      os.makedirs(d)
      with open(os.path.join(d, "x"), "w") as f:
        f.write("built")

    first = session_cache.build_once("a/b", write)
    second = session_cache.build_once("a/b", write)
    self.assertEqual(first, second)
    self.assertEqual(first, os.path.join(self.root, "jaxlab-session-cache",
                                         "a", "b"))
    self.assertLen(calls, 1)
    self.assertNotEqual(calls[0], first)  # written elsewhere, then renamed
    with open(os.path.join(first, "x")) as f:
      self.assertEqual(f.read(), "built")

  def test_a_failed_build_leaves_nothing_and_is_retried(self):
    def fail(d):
      os.makedirs(d)
      raise RuntimeError("half way")

    with self.assertRaisesRegex(RuntimeError, "half way"):
      session_cache.build_once("k", fail)
    self.assertFalse(os.path.exists(session_cache.path("k")))
    out = session_cache.build_once("k", os.makedirs)
    self.assertTrue(os.path.isdir(out))

  def test_outside_a_session_nothing_is_built(self):
    with mock.patch.dict(os.environ, clear=True):
      self.assertIsNone(session_cache.path("k"))
      self.assertIsNone(session_cache.build_once(
          "k", lambda d: self.fail("built outside a session")))


if __name__ == "__main__":
  absltest.main()
